package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

func payload(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "webhooks", name))
	if err != nil {
		t.Fatalf("read payload: %v", err)
	}
	return b
}

// delivery builds a webhook request the way each provider sends it.
func delivery(provider, event, id string, body []byte, secret string) *http.Request {
	req := request("POST", "/v1/webhooks/"+provider, "", body)
	switch provider {
	case "github":
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", id)
		req.Header.Set("X-Hub-Signature-256", api.Sign([]byte(secret), body))
	case "gitlab":
		req.Header.Set("X-Gitlab-Event", event)
		req.Header.Set("X-Gitlab-Event-UUID", id)
		req.Header.Set("X-Gitlab-Token", secret)
	case "generic":
		req.Header.Set(api.HeaderGenericDelivery, id)
		req.Header.Set("X-Signature-256", api.Sign([]byte(secret), body))
	}
	return req
}

type hookAnswer struct {
	Status   string
	Reason   string
	Pipeline string
	Run      *runs.Run
}

func wantHook(t *testing.T, f *fixture, req *http.Request, code int, status string) hookAnswer {
	t.Helper()
	rec := f.serve(req)
	if rec.Code != code {
		t.Fatalf("status: got %d, want %d: %s", rec.Code, code, rec.Body)
	}
	a := decodeJSON[hookAnswer](t, rec)
	if a.Status != status {
		t.Fatalf("answer status: got %q, want %q: %s", a.Status, status, rec.Body)
	}
	return a
}

func TestGitHubWorkflowRunTriggersOnce(t *testing.T) {
	f := newFixture(t)
	body := payload(t, "github-workflow-run.json")
	a := wantHook(t, f, delivery("github", "workflow_run", "d-1", body, githubSecret), 202, "triggered")
	r := a.Run
	if r == nil || r.Pipeline != "prod" || r.Trigger.ImageTag != "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e" ||
		r.Trigger.Build != "1234" || r.Trigger.Commit != "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e" ||
		r.Trigger.By != "webhook:github:d-1" {
		t.Fatalf("run: got %+v", r)
	}

	// GitHub's "redeliver" sends the same delivery ID: nothing new starts.
	again := wantHook(t, f, delivery("github", "workflow_run", "d-1", body, githubSecret), 200, "duplicate")
	if again.Run == nil || again.Run.ID != r.ID || !strings.Contains(again.Reason, "already received") {
		t.Errorf("redelivery: got %+v, want the first run %s, already received", again, r.ID)
	}
	// A captured body re-sent under a fresh delivery ID starts nothing either.
	again = wantHook(t, f, delivery("github", "workflow_run", "d-2", body, githubSecret), 200, "duplicate")
	if again.Run == nil || again.Run.ID != r.ID || !strings.Contains(again.Reason, "another delivery ID") {
		t.Errorf("replayed body: got %+v, want the first run %s", again, r.ID)
	}
	if n := f.runCount(); n != 1 {
		t.Fatalf("runs: got %d, want 1", n)
	}
}

func TestWebhookRedeliveryAfterAFailureRuns(t *testing.T) {
	f := newFixture(t)
	body := payload(t, "github-workflow-run.json")
	f.engine.setClosed(true) // the daemon is restarting
	rec := f.serve(delivery("github", "workflow_run", "d-9", body, githubSecret))
	wantError(t, rec, 503, "")
	if rec.Header().Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	f.engine.setClosed(false)
	wantHook(t, f, delivery("github", "workflow_run", "d-9", body, githubSecret), 202, "triggered")
	wantHook(t, f, delivery("github", "workflow_run", "d-9", body, githubSecret), 200, "duplicate")
	if n := f.runCount(); n != 1 {
		t.Fatalf("runs: got %d, want 1", n)
	}
}

func TestWebhookConcurrentReplaysStartOneRun(t *testing.T) {
	f := newFixture(t)
	body := payload(t, "github-workflow-run.json")
	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- f.serve(delivery("github", "workflow_run", "same-delivery", body, githubSecret)).Code
		}()
	}
	wg.Wait()
	close(codes)
	triggered := 0
	for c := range codes {
		if c == 202 {
			triggered++
		} else if c != 200 {
			t.Errorf("replay answered %d, want 200", c)
		}
	}
	if triggered != 1 || f.runCount() != 1 || f.engine.count() != 1 {
		t.Fatalf("triggered %d times, %d runs stored, %d submitted; want 1 each", triggered, f.runCount(), f.engine.count())
	}
}

func TestWebhookSignatures(t *testing.T) {
	f := newFixture(t)
	body := payload(t, "github-workflow-run.json")
	tampered := bytes.Replace(body, []byte(`"conclusion": "success"`), []byte(`"conclusion": "success" `), 1)
	if bytes.Equal(tampered, body) {
		t.Fatal("test payload did not change")
	}
	cases := []struct {
		name string
		req  func() *http.Request
	}{
		{"wrong secret", func() *http.Request { return delivery("github", "workflow_run", "x1", body, "another-secret-xxxxxxx") }},
		{"no signature", func() *http.Request {
			r := delivery("github", "workflow_run", "x2", body, githubSecret)
			r.Header.Del("X-Hub-Signature-256")
			return r
		}},
		{"sha1 signature", func() *http.Request {
			r := delivery("github", "workflow_run", "x3", body, githubSecret)
			r.Header.Set("X-Hub-Signature-256", "sha1="+strings.Repeat("0", 40))
			return r
		}},
		{"short signature", func() *http.Request {
			r := delivery("github", "workflow_run", "x4", body, githubSecret)
			r.Header.Set("X-Hub-Signature-256", "sha256=abcd")
			return r
		}},
		{"body changed after signing", func() *http.Request {
			r := delivery("github", "workflow_run", "x5", body, githubSecret)
			r2 := request("POST", "/v1/webhooks/github", "", tampered)
			r2.Header = r.Header.Clone()
			return r2
		}},
		{"gitlab wrong token", func() *http.Request {
			return delivery("gitlab", "Pipeline Hook", "x6", payload(t, "gitlab-pipeline.json"), "not-the-gitlab-token")
		}},
		{"gitlab no token", func() *http.Request {
			r := delivery("gitlab", "Pipeline Hook", "x7", payload(t, "gitlab-pipeline.json"), gitlabSecret)
			r.Header.Del("X-Gitlab-Token")
			return r
		}},
		{"generic signed with the github secret", func() *http.Request {
			return delivery("generic", "", "x8", payload(t, "generic.json"), githubSecret)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := wantError(t, f.serve(c.req()), 401, "")
			if e.Error.Code != "bad_signature" {
				t.Errorf("code: got %q, want bad_signature", e.Error.Code)
			}
		})
	}
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs after refused deliveries: got %d, want 0", n)
	}
	// A refused delivery must not burn its delivery ID: the genuine one still works.
	wantHook(t, f, delivery("github", "workflow_run", "x5", body, githubSecret), 202, "triggered")
}

func TestWebhookUnmappedAndIgnored(t *testing.T) {
	f := newFixture(t)
	push := payload(t, "github-push.json")
	feature := bytes.Replace(push, []byte(`"refs/heads/main"`), []byte(`"refs/heads/feature/x"`), 1)
	a := wantHook(t, f, delivery("github", "push", "p-1", feature, githubSecret), 202, "unmapped")
	if !strings.Contains(a.Reason, `branch="feature/x"`) {
		t.Errorf("unmapped reason: got %q, want it to name the branch", a.Reason)
	}
	failed := bytes.Replace(payload(t, "github-workflow-run.json"), []byte(`"conclusion": "success"`), []byte(`"conclusion": "failure"`), 1)
	a = wantHook(t, f, delivery("github", "workflow_run", "w-1", failed, githubSecret), 202, "ignored")
	if !strings.Contains(a.Reason, "failure") {
		t.Errorf("ignored reason: got %q", a.Reason)
	}
	wantHook(t, f, delivery("github", "ping", "ping-1", []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`), githubSecret), 202, "ignored")
	wantHook(t, f, delivery("github", "issues", "i-1", []byte(`{"action":"opened"}`), githubSecret), 202, "ignored")
	running := bytes.Replace(payload(t, "gitlab-pipeline.json"), []byte(`"status": "success"`), []byte(`"status": "running"`), 1)
	wantHook(t, f, delivery("gitlab", "Pipeline Hook", "g-1", running, gitlabSecret), 202, "ignored")
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}
}

func TestGitHubPush(t *testing.T) {
	f := newFixture(t)
	a := wantHook(t, f, delivery("github", "push", "p-1", payload(t, "github-push.json"), githubSecret), 202, "triggered")
	if a.Run.Pipeline != "demo" || a.Run.Trigger.Commit != "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e" || a.Run.Trigger.Params["pusher"] != "octocat" {
		t.Errorf("run: got %+v", a.Run)
	}
}

func TestGitLabPipeline(t *testing.T) {
	f := newFixture(t)
	body := payload(t, "gitlab-pipeline.json")
	a := wantHook(t, f, delivery("gitlab", "Pipeline Hook", "3d9a5c1e-1111-4b59-9a51-6d0c0f3e2a10", body, gitlabSecret), 202, "triggered")
	if a.Run.Pipeline != "demo" || a.Run.Trigger.ImageTag != "bcbb5ec396a2c0f828686f14fac9b80b780504f2" || a.Run.Trigger.Build != "31337" {
		t.Errorf("run: got %+v", a.Run)
	}
	wantHook(t, f, delivery("gitlab", "Pipeline Hook", "3d9a5c1e-1111-4b59-9a51-6d0c0f3e2a10", body, gitlabSecret), 200, "duplicate")
}

func TestGenericWebhook(t *testing.T) {
	f := newFixture(t)
	body := payload(t, "generic.json")
	a := wantHook(t, f, delivery("generic", "", "gen-1", body, genericSecret), 202, "triggered")
	tr := a.Run.Trigger
	if a.Run.Pipeline != "demo" || tr.ImageTag != "v2.4.0" || tr.Build != "1234" || tr.AppVersion != "2.4.0" || tr.Params["region"] != "eu-west-1" {
		t.Errorf("run: got %+v", a.Run)
	}
	// Without a delivery ID the body alone identifies the delivery.
	req := delivery("generic", "", "", body, genericSecret)
	req.Header.Del(api.HeaderGenericDelivery)
	wantHook(t, f, req, 200, "duplicate")
	wantError(t, f.serve(delivery("generic", "", "bad id with spaces", body, genericSecret)), 400, "X-Delivery-ID")
}

func TestWebhookBadPayloads(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) {
		c.MaxBodyBytes = 4 << 10
		c.Webhooks.Generic.Rules = append([]config.WebhookRule{{
			Event: "needs-field", Pipeline: "demo", Trigger: config.TriggerTemplate{ImageTag: "${payload.missing.field}"},
		}, {
			Event: "bad-tag", Pipeline: "demo", Trigger: config.TriggerTemplate{ImageTag: "${payload.tag}"},
		}, {
			Event: "no-pipeline", Pipeline: "gone"},
		}, c.Webhooks.Generic.Rules...)
	})
	big := []byte(`{"event":"x","pad":"` + strings.Repeat("a", 8<<10) + `"}`)
	cases := []struct {
		name   string
		body   string
		status int
		field  string
	}{
		{"not json", `event=build`, 400, ""},
		{"array", `[1,2]`, 400, ""},
		{"wrong type", `{"event":"build.succeeded","repository":"acme/api","build":true}`, 400, "build"},
		{"not a whole number", `{"event":"build.succeeded","repository":"acme/api","build":12.5}`, 400, "build"},
		{"trailing data", `{"event":"x"} {"event":"y"}`, 400, ""},
		{"rule needs a missing field", `{"event":"needs-field"}`, 422, "webhooks rules[0].trigger.image_tag"},
		{"rule yields a bad tag", `{"event":"bad-tag","tag":"../../x"}`, 422, "webhooks rules[1].trigger.image_tag"},
		{"rule names an unknown pipeline", `{"event":"no-pipeline"}`, 422, "webhooks rules[2].pipeline"},
		{"oversize", string(big), 413, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, f.serve(delivery("generic", "", "bad-"+string(rune('a'+i)), []byte(c.body), genericSecret)), c.status, c.field)
		})
	}
	gh := delivery("github", "workflow_run", "gh-bad", []byte(`{"action":"completed","workflow_run":"nope"}`), githubSecret)
	wantError(t, f.serve(gh), 400, "workflow_run")
	gh = delivery("github", "", "gh-noevent", []byte(`{}`), githubSecret)
	wantError(t, f.serve(gh), 400, "X-GitHub-Event")
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}
}

// TestBodyMustBeOneJSONObject: the trigger route and the webhooks hold their bodies to one
// rule: an empty body, another kind of value (null included), malformed JSON or data after
// the object answers 400 invalid_json naming no field, with the same message on both.
func TestBodyMustBeOneJSONObject(t *testing.T) {
	f := newFixture(t)
	for i, body := range []string{``, " \n", `null`, `[]`, `[{"build":"1"}]`, `"x"`, `12`, `true`, `build=1`,
		`{"build":`, `{"build":"1",}`, `{} {}`, `{"build":"1"} x`, `{}]`} {
		t.Run(fmt.Sprintf("%q", body), func(t *testing.T) {
			trigger := wantError(t, f.serve(request("POST", "/v1/pipelines/demo/runs", triggerToken, body)), 400, "")
			hook := wantError(t, f.serve(delivery("generic", "", fmt.Sprintf("shape-%d", i), []byte(body), genericSecret)), 400, "")
			if trigger.Error.Code != "invalid_json" || trigger.Error.Field != "" {
				t.Errorf("trigger: got %+v, want invalid_json naming no field", trigger.Error)
			}
			if hook != trigger {
				t.Errorf("webhook: got %+v, want the trigger route's %+v", hook.Error, trigger.Error)
			}
		})
	}
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}
}

func TestWebhookWithoutSecretIsRefused(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) {
		c.Webhooks.GitHub.Secret = ""
		c.Webhooks.Generic = nil
	})
	body := payload(t, "github-workflow-run.json")
	// Signed with the empty key: must still be refused.
	e := wantError(t, f.serve(delivery("github", "workflow_run", "e-1", body, "")), 403, "")
	if e.Error.Code != "webhook_disabled" {
		t.Errorf("code: got %q, want webhook_disabled", e.Error.Code)
	}
	if !strings.Contains(e.Error.Message, "ORCH_GITHUB_WEBHOOK_SECRET") || !strings.Contains(e.Error.Message, "webhooks.github.secret") {
		t.Errorf("message %q, want it to name ORCH_GITHUB_WEBHOOK_SECRET and webhooks.github.secret", e.Error.Message)
	}
	wantError(t, f.serve(delivery("generic", "", "e-2", payload(t, "generic.json"), genericSecret)), 403, "")
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}
}

func TestWebhookRateLimit(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.RateLimits.Webhook = config.Rate{PerSecond: 0.01, Burst: 1} })
	body := payload(t, "generic.json")
	wantHook(t, f, delivery("generic", "", "r-1", body, genericSecret), 202, "triggered")
	rec := f.serve(delivery("generic", "", "r-2", body, genericSecret))
	wantError(t, rec, 429, "")
	if rec.Header().Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
}
