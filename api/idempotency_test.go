package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// runAnswer is the trigger route's answer.
type runAnswer struct {
	Run      runs.Run
	Existing bool
}

// TestIdempotencyKeyReusedWithAnotherBody: a key sent again with another image tag answers
// 422 naming the key and the run it names, and starts nothing; the same parameters in
// another order and spacing still answer the first run.
func TestIdempotencyKeyReusedWithAnotherBody(t *testing.T) {
	f := newFixture(t)
	send := func(body string) *http.Request {
		req := request("POST", "/v1/pipelines/demo/runs", triggerToken, body)
		req.Header.Set("Idempotency-Key", "ci-build-9")
		return req
	}
	rec := f.serve(send(`{"build":"9","image_tag":"v1","params":{"a":"1","b":"2"}}`))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("first trigger: got %d, want 202: %s", rec.Code, rec.Body)
	}
	first := decodeJSON[runAnswer](t, rec).Run
	// The digest is of a fixed canonical form, so that digests stored by an earlier build
	// still match the same body.
	canonical := sha256.Sum256([]byte(`{"build":"9","image_tag":"v1","commit":"","app_version":"","params":{"a":"1","b":"2"},"rollback":false,"reason":""}`))
	if got, want := first.Trigger.IdempotencyHash, "sha256:"+hex.EncodeToString(canonical[:]); got != want {
		t.Errorf("the stored digest: got %q, want %q (the canonical form's)", got, want)
	}

	rec = f.serve(send(`{ "params": {"b":"2", "a":"1"}, "image_tag": "v1", "build": "9" }`))
	if got := decodeJSON[runAnswer](t, rec); rec.Code != http.StatusAccepted || !got.Existing || got.Run.ID != first.ID {
		t.Fatalf("same parameters, other spelling: got %d %+v, want 202 with run %s existing", rec.Code, got, first.ID)
	}

	rec = f.serve(send(`{"build":"9","image_tag":"v2","params":{"a":"1","b":"2"}}`))
	e := wantError(t, rec, http.StatusUnprocessableEntity, "Idempotency-Key").Error
	if e.Code != "idempotency_key_reused" || !strings.Contains(e.Message, `"ci-build-9"`) || !strings.Contains(e.Message, first.ID) {
		t.Errorf("answer: got %+v, want code idempotency_key_reused naming the key and run %s", e, first.ID)
	}
	if n := f.runCount(); n != 1 {
		t.Errorf("runs in the store: got %d, want 1", n)
	}
}

// TestIdempotencyKeyCannotTakeAWebhooksKey: a trigger token sending the key a future GitHub
// delivery will have ("webhook:github:<event digest>": the SHA-256 of its JSON without
// installation, members sorted) does not stop that delivery's run.
func TestIdempotencyKeyCannotTakeAWebhooksKey(t *testing.T) {
	f := newFixture(t)
	body := payload(t, "github-workflow-run.json")
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	canon, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(canon)
	req := request("POST", "/v1/pipelines/prod/runs", triggerToken, map[string]string{"image_tag": "evil"})
	req.Header.Set("Idempotency-Key", "webhook:github:"+hex.EncodeToString(sum[:]))
	if rec := f.serve(req); rec.Code != http.StatusAccepted {
		t.Fatalf("trigger: got %d, want 202: %s", rec.Code, rec.Body)
	}
	a := wantHook(t, f, delivery("github", "workflow_run", "d-9", body, githubSecret), http.StatusAccepted, "triggered")
	if a.Run == nil || a.Run.Trigger.ImageTag == "evil" {
		t.Errorf("the delivery's run: got %+v, want its own run with the workflow's tag", a.Run)
	}
}
