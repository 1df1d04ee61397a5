package chaos

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

const webhookSecret = "chaos-generic-webhook-secret-0123"

// postDelivery sends a generic webhook delivery to d, signed over signed (the body sent may
// differ: a tampered delivery), and returns the status and the answer.
func postDelivery(t *testing.T, d *daemon, id string, signed, body []byte) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.base+"/v1/webhooks/generic", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.HeaderGenericDelivery, id)
	req.Header.Set("X-Signature-256", api.Sign([]byte(webhookSecret), signed))
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatalf("deliver %s to %s: %v", id, d.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// TestWebhookReplayAcrossDaemons: deliveries are de-duplicated in the shared store, so a
// delivery replayed to another daemon of the same Redis — or to a restarted one, after its
// run ended — starts no second run, and a body changed after signing is refused by both.
// (The handler-level cases, signature schemes and concurrent replays, are api's tests.)
func TestWebhookReplayAcrossDaemons(t *testing.T) {
	w := newWorld(t)
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML([]svc{{name: "a", uuid: appA}}, "locks: { ttl: 30s }\n")})
	cfg := filepath.Join(t.TempDir(), "orchestrator.yaml")
	if err := os.WriteFile(cfg, []byte(`webhooks:
  generic:
    rules:
      - event: build.succeeded
        pipeline: prod
        trigger:
          build: "${payload.build}"
          image_tag: "${payload.image_tag}"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(instance string) map[string]string {
		e := w.env(instance, dir)
		e["ORCH_CONFIG"], e["ORCH_GENERIC_WEBHOOK_SECRET"] = cfg, webhookSecret
		return e
	}
	d1 := startDaemon(t, "d1", env("chaos-hook-1"))
	d2 := startDaemon(t, "d2", env("chaos-hook-2"))

	body := []byte(`{"event":"build.succeeded","build":"77","image_tag":"v77"}`)
	code, a := postDelivery(t, d1, "delivery-1", body, body)
	if code != http.StatusAccepted || a["status"] != "triggered" {
		t.Fatalf("first delivery: %d %v, want 202 triggered", code, a)
	}
	code, a = postDelivery(t, d2, "delivery-1", body, body)
	if code != http.StatusOK || a["status"] != "duplicate" {
		t.Errorf("the same delivery to the other daemon: %d %v, want 200 duplicate", code, a)
	}
	tampered := bytes.Replace(body, []byte(`"v77"`), []byte(`"v78"`), 1)
	for _, d := range []*daemon{d1, d2} {
		if code, a := postDelivery(t, d, "delivery-2", body, tampered); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("a body changed after signing, to %s: %d %v, want 401 or 403", d.name, code, a)
		}
	}

	var page struct {
		Runs []runs.Run `json:"runs"`
	}
	code, b := d2.do(http.MethodGet, "/v1/runs", nil, nil)
	if err := json.Unmarshal(b, &page); code != http.StatusOK || err != nil || len(page.Runs) != 1 {
		t.Fatalf("runs after the replays: %d %s, want exactly one", code, b)
	}
	got := d1.waitEnded(page.Runs[0].ID, 60*time.Second)
	if got.Status != runs.StatusSucceeded {
		t.Fatalf("the run: %q (%s), want succeeded", got.Status, got.Reason)
	}

	// Replayed again after the run ended, to a restarted daemon: still nothing new.
	d1.kill()
	d1.restart()
	if code, a := postDelivery(t, d1, "delivery-1", body, body); code != http.StatusOK || a["status"] != "duplicate" {
		t.Errorf("the delivery replayed to the restarted daemon: %d %v, want 200 duplicate", code, a)
	}
	if n := len(w.cf.RequestsTo("POST /deploy")); n != 1 {
		t.Errorf("Coolify got %d deploys, want 1", n)
	}
}
