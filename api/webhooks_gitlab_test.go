package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
)

// gitlabKinds are the sample GitLab deliveries in testdata/webhooks, one of each event kind,
// with the X-Gitlab-Event header GitLab sends with it.
var gitlabKinds = []struct{ file, event string }{
	{"gitlab-pipeline.json", "Pipeline Hook"},
	{"gitlab-pipeline-merge-request.json", "Pipeline Hook"},
	{"gitlab-push.json", "Push Hook"},
	{"gitlab-tag-push.json", "Tag Push Hook"},
	{"gitlab-merge-request.json", "Merge Request Hook"},
	{"gitlab-job.json", "Job Hook"},
	{"gitlab-deployment.json", "Deployment Hook"},
	{"gitlab-release.json", "Release Hook"},
	{"gitlab-note.json", "Note Hook"},
	{"gitlab-issue.json", "Issue Hook"},
}

// Pipeline sources GitLab documents; the first six are what a rule accepts by default.
var (
	acceptedSources = []string{"push", "web", "schedule", "api", "trigger", "pipeline"}
	refusedSources  = []string{"parent_pipeline", "merge_request_event", "external", "external_pull_request_event", "chat", "webide",
		"ondemand_dast_scan", "security_orchestration_policy"}
)

func withSource(t testing.TB, body []byte, source string) []byte {
	t.Helper()
	out := bytes.Replace(body, []byte(`"source": "push"`), []byte(`"source": "`+source+`"`), 1)
	if source != "push" && bytes.Equal(out, body) {
		t.Fatal("the sample pipeline payload has no source to replace")
	}
	return out
}

// TestGitLabEveryEventKind sends one delivery of every GitLab event kind, as GitLab sends it
// and once without X-Gitlab-Event: only the successful pipeline of an accepted source on the
// rule's branch triggers; everything else is 202 ignored with a reason, never a 4xx.
func TestGitLabEveryEventKind(t *testing.T) {
	f := newFixture(t)
	id := 0
	send := func(event string, body []byte) *http.Request {
		id++
		return delivery("gitlab", event, fmt.Sprintf("gl-%d", id), body, gitlabSecret)
	}
	for _, k := range gitlabKinds {
		for _, header := range []string{k.event, ""} {
			t.Run(k.file+"/"+header, func(t *testing.T) {
				want, status := "ignored", 202
				if k.file == "gitlab-pipeline.json" {
					want, status = "triggered", 202
					if header == "" {
						want, status = "duplicate", 200 // the same body was delivered with the header
					}
				}
				a := wantHook(t, f, send(header, payload(t, k.file)), status, want)
				if want == "ignored" && a.Reason == "" {
					t.Errorf("ignored without a reason")
				}
				if k.file == "gitlab-pipeline-merge-request.json" && !strings.Contains(a.Reason, "merge-request pipelines never deploy") {
					t.Errorf("reason: got %q, want merge-request pipelines never deploy", a.Reason)
				}
				if strings.Contains(k.file, "push") && !strings.Contains(a.Reason, "pipeline events are") {
					t.Errorf("reason: got %q, want it to say pipeline events are the deploy signal", a.Reason)
				}
			})
		}
	}
	if n := f.runCount(); n != 1 {
		t.Fatalf("runs: got %d, want 1 (the pipeline event)", n)
	}
}

func TestGitLabPipelineSources(t *testing.T) {
	f := newFixture(t)
	body := payload(t, "gitlab-pipeline.json")
	for _, src := range acceptedSources {
		a := wantHook(t, f, delivery("gitlab", "Pipeline Hook", "src-"+src, withSource(t, body, src), gitlabSecret), 202, "triggered")
		if a.Run == nil || a.Run.Pipeline != "demo" {
			t.Errorf("source %s: run %+v", src, a.Run)
		}
	}
	for _, src := range refusedSources {
		a := wantHook(t, f, delivery("gitlab", "Pipeline Hook", "src-"+src, withSource(t, body, src), gitlabSecret), 202, "ignored")
		if !strings.Contains(a.Reason, src) && !strings.Contains(a.Reason, "merge-request") {
			t.Errorf("source %s: reason %q does not name it", src, a.Reason)
		}
	}
	if n, want := f.runCount(), len(acceptedSources); n != want {
		t.Fatalf("runs: got %d, want %d", n, want)
	}

	// A rule listing its sources accepts those only.
	f = newFixture(t, func(c *config.Daemon) { c.Webhooks.GitLab.Rules[0].Sources = []string{"schedule"} })
	a := wantHook(t, f, delivery("gitlab", "Pipeline Hook", "s-1", body, gitlabSecret), 202, "ignored")
	if !strings.Contains(a.Reason, `pipeline source "push" is not one rules[0] accepts (schedule)`) {
		t.Errorf("reason: got %q", a.Reason)
	}
	wantHook(t, f, delivery("gitlab", "Pipeline Hook", "s-2", withSource(t, body, "schedule"), gitlabSecret), 202, "triggered")
}

// A GitLab push triggers only through a rule that says event: push; a pipeline's ref is a
// branch name, never stripped of refs/heads/ (issue 11).
func TestGitLabPushRuleAndRefs(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) {
		c.Webhooks.GitLab.Rules = append(c.Webhooks.GitLab.Rules,
			config.WebhookRule{Event: "push", Repository: "acme/web", Branch: "main", Pipeline: "prod",
				Trigger: config.TriggerTemplate{ImageTag: "${payload.after}"}},
			config.WebhookRule{Repository: "acme/web", Branch: "release/*", Pipeline: "prod",
				Trigger: config.TriggerTemplate{ImageTag: "${payload.object_attributes.sha}"}})
	})
	a := wantHook(t, f, delivery("gitlab", "Push Hook", "p-1", payload(t, "gitlab-push.json"), gitlabSecret), 202, "triggered")
	if a.Run.Pipeline != "prod" || a.Run.Trigger.Commit != "da1560886d4f094c3e6c9ef40349f7d38b5d27d7" {
		t.Errorf("run: got %+v", a.Run)
	}
	// A tag push has no branch: the push rule (branch main) does not match it.
	wantHook(t, f, delivery("gitlab", "Tag Push Hook", "p-2", payload(t, "gitlab-tag-push.json"), gitlabSecret), 202, "unmapped")
	deleted := bytes.Replace(payload(t, "gitlab-push.json"), []byte(`"after": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7"`),
		[]byte(`"after": "0000000000000000000000000000000000000000"`), 1)
	wantHook(t, f, delivery("gitlab", "Push Hook", "p-3", deleted, gitlabSecret), 202, "ignored")

	pipeline := payload(t, "gitlab-pipeline.json")
	evil := bytes.Replace(pipeline, []byte(`"ref": "main"`), []byte(`"ref": "refs/heads/release/evil"`), 1)
	a = wantHook(t, f, delivery("gitlab", "Pipeline Hook", "r-1", evil, gitlabSecret), 202, "unmapped")
	if !strings.Contains(a.Reason, `branch="refs/heads/release/evil"`) {
		t.Errorf("reason: got %q", a.Reason)
	}
	release := bytes.Replace(pipeline, []byte(`"ref": "main"`), []byte(`"ref": "release/2.4"`), 1)
	wantHook(t, f, delivery("gitlab", "Pipeline Hook", "r-2", release, gitlabSecret), 202, "triggered")
}

// Only a bad token, a bad content type or a body that is not JSON is a 4xx; a body GitLab
// would never send, of any shape, is ignored.
func TestGitLabOnlyTokenTypeAndJSONAre4xx(t *testing.T) {
	f := newFixture(t)
	for i, body := range []string{
		`{"object_kind":"pipeline","object_attributes":{"source":{"id":1},"status":"success"}}`,
		`{"object_kind":"pipeline","object_attributes":"x"}`,
		`{"object_kind":"pipeline"}`,
		`{"object_kind":7}`,
		`{}`,
		`{"object_kind":"push","ref":["x"]}`,
	} {
		for _, header := range []string{"Pipeline Hook", "Push Hook", "Merge Request Hook", ""} {
			wantHook(t, f, delivery("gitlab", header, fmt.Sprintf("odd-%d-%d", i, len(header)), []byte(body), gitlabSecret), 202, "ignored")
		}
	}
	wantError(t, f.serve(delivery("gitlab", "Pipeline Hook", "j-1", []byte(`not json`), gitlabSecret)), 400, "")
	wantError(t, f.serve(delivery("gitlab", "Pipeline Hook", "j-2", []byte(`[1]`), gitlabSecret)), 400, "")
	req := delivery("gitlab", "Pipeline Hook", "j-3", payload(t, "gitlab-pipeline.json"), gitlabSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	wantError(t, f.serve(req), 415, "Content-Type")
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}
}

// The GitLab token is checked before the body is read: a wrong token is refused without
// reading a byte of it.
func TestGitLabTokenBeforeBody(t *testing.T) {
	f := newFixture(t)
	body := &countingReader{r: bytes.NewReader(payload(t, "gitlab-pipeline.json"))}
	req := delivery("gitlab", "Pipeline Hook", "t-1", nil, "not-the-gitlab-token")
	req.Body = body
	wantError(t, f.serve(req), 401, "")
	if body.n != 0 {
		t.Fatalf("read %d bytes of a delivery with a wrong token, want 0", body.n)
	}
}

type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (c *countingReader) Close() error { return nil }

// FuzzGitLabWebhook sends GitLab deliveries with a valid token through the whole handler,
// seeded with every sample event kind. Properties: a body that is not a JSON object is a
// 400; a delivery that starts (or finds) a run is a successful pipeline event, not a
// merge-request one, from an accepted source, of the rule's project and branch; a 422
// (the rule's trigger can't be built from the payload) only for such a deploy signal;
// everything else is 202 ignored or unmapped.
func FuzzGitLabWebhook(f *testing.F) {
	for _, k := range gitlabKinds {
		f.Add(k.event, payload(f, k.file))
		f.Add("", payload(f, k.file))
	}
	for _, src := range append(acceptedSources, refusedSources...) {
		f.Add("Pipeline Hook", withSource(f, payload(f, "gitlab-pipeline.json"), src))
	}
	f.Add("Pipeline Hook", []byte(`{"object_kind":"pipeline","object_attributes":{"source":{"id":1}}}`))
	fx := newFixture(f)
	n := 0
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		n++
		req := delivery("gitlab", event, fmt.Sprintf("fuzz-%d", n), body, gitlabSecret)
		if event == "" {
			req.Header.Del("X-Gitlab-Event")
		}
		if strings.ContainsAny(event, "\r\n\x00") {
			return // not a header value an HTTP client can send
		}
		rec := httptest.NewRecorder()
		fx.h.ServeHTTP(rec, req)
		var a struct{ Status string }
		_ = json.Unmarshal(rec.Body.Bytes(), &a)
		trimmed := bytes.TrimLeft(body, " \t\r\n")
		isObject := json.Valid(body) && len(trimmed) > 0 && trimmed[0] == '{'
		switch {
		case !isObject:
			if rec.Code != 400 {
				t.Fatalf("a body that is not a JSON object: got %d, want 400: %s", rec.Code, rec.Body)
			}
		case rec.Code == 202 && a.Status == "triggered", rec.Code == 200 && a.Status == "duplicate", rec.Code == 422:
			if !gitlabDeploySignal(event, body) {
				t.Fatalf("%q answered %d %s, but it is not a deploy signal: %s", event, rec.Code, a.Status, body)
			}
		case rec.Code == 202 && (a.Status == "ignored" || a.Status == "unmapped"):
		default:
			t.Fatalf("%q answered %d: %s", event, rec.Code, rec.Body)
		}
	})
}

// gitlabDeploySignal is the test's own reading of a delivery: a successful pipeline of
// acme/web on branch main, from an accepted source, not a merge request's.
func gitlabDeploySignal(event string, body []byte) bool {
	var p struct {
		ObjectKind       any `json:"object_kind"`
		ObjectAttributes struct {
			Ref    any `json:"ref"`
			Tag    any `json:"tag"`
			Source any `json:"source"`
			Status any `json:"status"`
		} `json:"object_attributes"`
		MergeRequest any `json:"merge_request"`
		Project      struct {
			Path any `json:"path_with_namespace"`
		} `json:"project"`
	}
	if json.Unmarshal(body, &p) != nil {
		return false
	}
	oa := p.ObjectAttributes
	src, _ := oa.Source.(string)
	path, _ := p.Project.Path.(string)
	return (event == "Pipeline Hook" || event == "" && p.ObjectKind == "pipeline") &&
		oa.Status == "success" && oa.Ref == "main" && oa.Tag != true && p.MergeRequest == nil &&
		slices.Contains(acceptedSources, src) && strings.EqualFold(path, "acme/web")
}

// TestGitLabDeliveryIDIsIdempotencyKey: GitLab's per-delivery ID is Idempotency-Key (the same
// across retries and a Resend); X-Gitlab-Event-UUID is shared by every hook fired in one
// request and read only when Idempotency-Key is missing (an older GitLab).
func TestGitLabDeliveryIDIsIdempotencyKey(t *testing.T) {
	f := newFixture(t)
	body := payload(t, "gitlab-pipeline.json")
	send := func(key, uuid string) *http.Request {
		r := delivery("gitlab", "Pipeline Hook", uuid, body, gitlabSecret)
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		return r
	}
	a := wantHook(t, f, send("5b8a7c3e-0001-4e0f-9d3c-1f2e3d4c5b6a", "recursion-uuid-1"), 202, "triggered")
	if a.Run.Trigger.By != "webhook:gitlab:5b8a7c3e-0001-4e0f-9d3c-1f2e3d4c5b6a" {
		t.Errorf("by: got %q, want the Idempotency-Key", a.Run.Trigger.By)
	}
	// A Resend from the hook's page: the same Idempotency-Key, another X-Gitlab-Event-UUID.
	again := wantHook(t, f, send("5b8a7c3e-0001-4e0f-9d3c-1f2e3d4c5b6a", "recursion-uuid-2"), 200, "duplicate")
	if again.Run == nil || again.Run.ID != a.Run.ID || !strings.Contains(again.Reason, "already received") ||
		!strings.Contains(again.Reason, "Resend") {
		t.Errorf("resend: got %+v, want the first run %s, already received (a Resend)", again, a.Run.ID)
	}
	// An older GitLab without Idempotency-Key: X-Gitlab-Event-UUID names the delivery.
	other := bytes.Replace(body, []byte(`"id": 31337`), []byte(`"id": 31338`), 1)
	if bytes.Equal(other, body) {
		t.Fatal("the sample pipeline payload has no id to replace")
	}
	if d := wantHook(t, f, send("", "old-gitlab-uuid"), 200, "duplicate"); d.Reason != "this payload already started a run under another delivery ID" {
		t.Errorf("same body under another ID: got %q", d.Reason)
	}
	b := wantHook(t, f, send("", "old-gitlab-uuid-2"), 200, "duplicate")
	if b.Run == nil || b.Run.ID != a.Run.ID {
		t.Errorf("same body under another ID: got %+v, want the first run", b)
	}
	b = wantHook(t, f, delivery("gitlab", "Pipeline Hook", "old-gitlab-uuid-3", other, gitlabSecret), 202, "triggered")
	if b.Run.Trigger.By != "webhook:gitlab:old-gitlab-uuid-3" {
		t.Errorf("by: got %q, want the X-Gitlab-Event-UUID", b.Run.Trigger.By)
	}
}
