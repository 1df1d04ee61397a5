package api_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestWebhookOriginRecorded (issue 35, item 5): a run records what asked for it from each
// provider's delivery: repository, ref, commit page, CI job page, actor, delivery, and the
// traceparent the CI sent.
func TestWebhookOriginRecorded(t *testing.T) {
	f := newFixture(t)
	const sha = "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e"
	req := delivery("github", "workflow_run", "gh-origin-1", payload(t, "github-workflow-run.json"), githubSecret)
	req.Header.Set("traceparent", testTraceparent)
	a := wantHook(t, f, req, 202, "triggered")
	want := orchestrator.Origin{Provider: "github", Repo: "acme/api", Ref: "main", CommitURL: "https://github.com/acme/api/commit/" + sha,
		JobURL: "https://github.com/acme/api/actions/runs/9876543210", Actor: "octocat", Delivery: "gh-origin-1", Traceparent: testTraceparent}
	if got := a.Run.Trigger.Origin; got != want {
		t.Errorf("github origin:\n got %+v\nwant %+v", got, want)
	}

	const glSHA = "bcbb5ec396a2c0f828686f14fac9b80b780504f2"
	a = wantHook(t, f, delivery("gitlab", "Pipeline Hook", "3d9a5c1e-2222-4b59-9a51-6d0c0f3e2a10", payload(t, "gitlab-pipeline.json"), gitlabSecret), 202, "triggered")
	want = orchestrator.Origin{Provider: "gitlab", Repo: "acme/web", Ref: "main", CommitURL: "https://gitlab.example.com/acme/web/-/commit/" + glSHA,
		JobURL: "https://gitlab.example.com/acme/web/-/pipelines/31337", Actor: "web-bot", Delivery: "3d9a5c1e-2222-4b59-9a51-6d0c0f3e2a10"}
	if got := a.Run.Trigger.Origin; got != want {
		t.Errorf("gitlab origin:\n got %+v\nwant %+v", got, want)
	}
}

// TestWebhookOriginKeepsWhatIsSound: a signed delivery whose page URL is not one people may
// open (javascript:) or whose traceparent is malformed still deploys; those values are left
// out, the rest kept.
func TestWebhookOriginKeepsWhatIsSound(t *testing.T) {
	f := newFixture(t)
	body := bytes.Replace(payload(t, "github-push.json"), []byte(`"compare": "https://github.com/acme/api/compare/`),
		[]byte(`"compare": "javascript:alert(document.cookie)//`), 1)
	if bytes.Equal(body, payload(t, "github-push.json")) {
		t.Fatal("the push payload has no compare URL to replace")
	}
	req := delivery("github", "push", "gh-push-odd", body, githubSecret)
	req.Header.Set("traceparent", "00-zz-not-a-trace")
	a := wantHook(t, f, req, 202, "triggered")
	o := a.Run.Trigger.Origin
	if o.JobURL != "" || o.Traceparent != "" {
		t.Errorf("origin kept job_url %q and traceparent %q, want both left out", o.JobURL, o.Traceparent)
	}
	if o.Repo != "acme/api" || o.Actor != "octocat" || o.Delivery != "gh-push-odd" {
		t.Errorf("origin %+v: want the sound values kept", o)
	}
}

// TestAPITriggerOrigin: the trigger API records what the caller says of itself (repo, ref,
// job page, actor, reason) and the traceparent header, with the token's name in by; a bad
// value is refused naming its field, and nothing is stored.
func TestAPITriggerOrigin(t *testing.T) {
	f := newFixture(t)
	req := request("POST", "/v1/pipelines/demo/runs", triggerToken, map[string]any{"image_tag": "v1",
		"repo": "acme/api", "ref": "main", "job_url": "https://ci.example.com/jobs/7", "actor": "alice", "reason": "hotfix INC-12"})
	req.Header.Set("traceparent", testTraceparent)
	rec := f.serve(req)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("trigger: got %d: %s", rec.Code, rec.Body)
	}
	r := decodeJSON[struct{ Run *runs.Run }](t, rec).Run
	want := orchestrator.Origin{Provider: "api", Repo: "acme/api", Ref: "main", JobURL: "https://ci.example.com/jobs/7", Actor: "alice", Traceparent: testTraceparent}
	if r.Trigger.Origin != want || r.Trigger.By != "api:trigger" || r.Trigger.Reason != "hotfix INC-12" {
		t.Errorf("run trigger: got origin %+v by %q reason %q, want origin %+v by api:trigger", r.Trigger.Origin, r.Trigger.By, r.Trigger.Reason, want)
	}
	n := f.runCount()
	for field, body := range map[string]map[string]any{
		"job_url":     {"job_url": "javascript:alert(1)"},
		"repo":        {"repo": "acme/../../orgs"},
		"traceparent": {"traceparent": "00-abc"},
		"actor":       {"actor": "a\u0000b"},
	} {
		wantError(t, f.do("POST", "/v1/pipelines/demo/runs", triggerToken, body), http.StatusBadRequest, field)
	}
	if got := f.runCount(); got != n {
		t.Errorf("runs: got %d after refused triggers, want %d", got, n)
	}
}

// TestCancelRecordsWhoAndWhy: a cancel says who asked (the token, and the name given) and
// why, in the run's reason.
func TestCancelRecordsWhoAndWhy(t *testing.T) {
	f := newFixture(t)
	r := f.trigger("demo", map[string]any{"image_tag": "v1"})
	rec := f.do("POST", "/v1/runs/"+r.ID+"/cancel", triggerToken, map[string]any{"by": "alice", "reason": "wrong build"})
	if rec.Code != http.StatusOK {
		t.Fatalf("cancel: got %d: %s", rec.Code, rec.Body)
	}
	got := decodeJSON[struct{ Run *runs.Run }](t, rec).Run
	if want := "canceled by api:trigger (alice): wrong build"; got.Reason != want {
		t.Errorf("reason: got %q, want %q", got.Reason, want)
	}
	wantError(t, f.do("POST", "/v1/runs/"+r.ID+"/cancel", triggerToken, map[string]any{"reason": strings.Repeat("x", 300)}), http.StatusBadRequest, "reason")
}
