package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/config"
)

// Issue 11, item 5: a signed workflow_run of a fork's pull request, on a branch named main,
// must not deploy; nor may a run started by an event the rule does not accept; and
// refs/heads/ is stripped once.
func TestGitHubWebhookOrigin(t *testing.T) {
	f := newFixture(t)
	fork := payload(t, "github-workflow-run-fork-pr.json")
	a := wantHook(t, f, delivery("github", "workflow_run", "fork-1", fork, githubSecret), 202, "ignored")
	if !strings.Contains(a.Reason, `head_repository "mallory/api" is not the repository "acme/api"`) {
		t.Errorf("fork reason: got %q", a.Reason)
	}

	// The same run from the repository's own branch, started by pull_request: not a source
	// the rule accepts (default push).
	own := bytes.Replace(fork, []byte(`"full_name": "mallory/api"`), []byte(`"full_name": "acme/api"`), 1)
	if bytes.Equal(own, fork) {
		t.Fatal("the fork payload has no head repository to replace")
	}
	a = wantHook(t, f, delivery("github", "workflow_run", "own-1", own, githubSecret), 202, "ignored")
	if !strings.Contains(a.Reason, `workflow_run event "pull_request" is not one rules[0] accepts (push)`) {
		t.Errorf("source reason: got %q", a.Reason)
	}

	// A workflow_run without head_repository does not deploy either.
	var noHead bytes.Buffer
	noHead.Write(bytes.Replace(payload(t, "github-workflow-run.json"), []byte(`"head_repository": {`), []byte(`"head_repository_gone": {`), 1))
	wantHook(t, f, delivery("github", "workflow_run", "nohead-1", noHead.Bytes(), githubSecret), 202, "ignored")

	// refs/heads/refs/heads/main is the branch "refs/heads/main", not main.
	push := bytes.Replace(payload(t, "github-push.json"), []byte(`"refs/heads/main"`), []byte(`"refs/heads/refs/heads/main"`), 1)
	a = wantHook(t, f, delivery("github", "push", "twice-1", push, githubSecret), 202, "unmapped")
	if !strings.Contains(a.Reason, `branch="refs/heads/main"`) {
		t.Errorf("unmapped reason: got %q", a.Reason)
	}
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}

	// A rule may accept more sources; a fork's run is still refused.
	f = newFixture(t, func(c *config.Daemon) { c.Webhooks.GitHub.Rules[0].Sources = []string{"push", "pull_request"} })
	wantHook(t, f, delivery("github", "workflow_run", "own-2", own, githubSecret), 202, "triggered")
	wantHook(t, f, delivery("github", "workflow_run", "fork-2", fork, githubSecret), 202, "ignored")
}

// formDelivery is a GitHub delivery from a webhook whose content type is "form" (the default
// when a hook is created): the JSON in the one field payload, the signature over the form.
func formDelivery(event, id string, form []byte, secret string) *http.Request {
	r := delivery("github", event, id, form, secret)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

// TestGitHubFormDelivery: a form-encoded GitHub delivery is verified over the form as sent,
// then read as the JSON of its payload field, as a JSON delivery is; a form without exactly
// one payload field, or whose payload is not a JSON object, is a 400 naming it. The generic
// webhook stays JSON only.
func TestGitHubFormDelivery(t *testing.T) {
	f := newFixture(t)
	form := payload(t, "github-push.form")
	a := wantHook(t, f, formDelivery("push", "form-1", form, githubSecret), 202, "triggered")
	if a.Run.Pipeline != "demo" || a.Run.Trigger.Commit != "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e" || a.Run.Trigger.Params["pusher"] != "octocat" {
		t.Errorf("run: got %+v", a.Run)
	}
	// The same event from a hook set to JSON is the same payload: nothing new starts.
	again := wantHook(t, f, delivery("github", "push", "json-1", payload(t, "github-push.json"), githubSecret), 200, "duplicate")
	if again.Run == nil || again.Run.ID != a.Run.ID {
		t.Errorf("the JSON delivery of the same event: got %+v, want the form's run %s", again, a.Run.ID)
	}

	// The signature covers the form as sent, not the JSON inside it.
	r := formDelivery("push", "form-2", form, githubSecret)
	r.Header.Set("X-Hub-Signature-256", api.Sign([]byte(githubSecret), payload(t, "github-push.json")))
	if e := wantError(t, f.serve(r), 401, ""); e.Error.Code != "bad_signature" {
		t.Errorf("code: got %q, want bad_signature", e.Error.Code)
	}
	for i, c := range []struct{ name, form, field string }{
		{"no payload field", `zen=hello`, "payload"},
		{"empty body", ``, "payload"},
		{"two payload fields", `payload=%7B%7D&payload=%7B%7D`, "payload"},
		{"payload not an object", `payload=%5B1%2C2%5D`, "payload"},
		{"payload not JSON", `payload=event%3Dpush`, "payload"},
		{"malformed form", `payload=%zz`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := wantError(t, f.serve(formDelivery("push", fmt.Sprintf("bad-form-%d", i), []byte(c.form), githubSecret)), 400, c.field)
			if !strings.Contains(e.Error.Message, "payload") && !strings.Contains(e.Error.Message, "form") {
				t.Errorf("message: got %q, want it to name the problem", e.Error.Message)
			}
		})
	}
	gen := delivery("generic", "", "gen-form", []byte(`payload=%7B%7D`), genericSecret)
	gen.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	wantError(t, f.serve(gen), 415, "Content-Type")
	if n := f.runCount(); n != 1 {
		t.Fatalf("runs: got %d, want 1", n)
	}

	// max_body_bytes applies to the body as sent: a form is its URL-encoded JSON, larger.
	json := payload(t, "github-push.json")
	f = newFixture(t, func(c *config.Daemon) { c.MaxBodyBytes = int64(len(json)) + 16 })
	wantError(t, f.serve(formDelivery("push", "form-big", form, githubSecret)), 413, "")
	wantHook(t, f, delivery("github", "push", "json-small", json, githubSecret), 202, "triggered")
}

// withInstallation is body as a GitHub App's hook delivers it: with installation.
func withInstallation(t testing.TB, body []byte) []byte {
	t.Helper()
	out := bytes.Replace(body, []byte("{\n"), []byte("{\n  \"installation\": {\"id\": 4242, \"node_id\": \"MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNDI0Mg==\"},\n"), 1)
	if bytes.Equal(out, body) {
		t.Fatal("payload does not start with {")
	}
	return out
}

// TestGitHubEventThroughTwoHooksRunsOnce: GitHub sends one event to every hook subscribed to
// it under one X-GitHub-Delivery; a GitHub App's delivery adds installation. The event starts
// one run, and the second hook's delivery is a duplicate naming it, whichever comes first
// and when they come at once; replayed under another delivery ID it starts nothing either,
// while the next event does run.
func TestGitHubEventThroughTwoHooksRunsOnce(t *testing.T) {
	f := newFixture(t)
	repoHook := payload(t, "github-workflow-run.json")
	appHook := withInstallation(t, repoHook)
	a := wantHook(t, f, delivery("github", "workflow_run", "72d3162e-cc78-11e3-81ab-4c9367dc0958", repoHook, githubSecret), 202, "triggered")
	again := wantHook(t, f, delivery("github", "workflow_run", "72d3162e-cc78-11e3-81ab-4c9367dc0958", appHook, githubSecret), 200, "duplicate")
	if again.Run == nil || again.Run.ID != a.Run.ID || !strings.Contains(again.Reason, "another webhook") {
		t.Errorf("the App's delivery: got %+v, want the first run %s, the same event through another webhook", again, a.Run.ID)
	}
	// The App's body replayed under a fresh delivery ID: the same event, nothing starts.
	again = wantHook(t, f, delivery("github", "workflow_run", "replayed-1", appHook, githubSecret), 200, "duplicate")
	if again.Run == nil || again.Run.ID != a.Run.ID {
		t.Errorf("replay: got %+v, want the first run %s", again, a.Run.ID)
	}
	// The next event (a new run number, a new delivery ID) runs.
	next := bytes.Replace(repoHook, []byte(`"run_number": 1234`), []byte(`"run_number": 1235`), 1)
	if bytes.Equal(next, repoHook) {
		t.Fatal("the sample workflow_run has no run_number to replace")
	}
	wantHook(t, f, delivery("github", "workflow_run", "8a1c2d3e-cc78-11e3-81ab-4c9367dc0958", withInstallation(t, next), githubSecret), 202, "triggered")
	if n := f.runCount(); n != 2 {
		t.Fatalf("runs: got %d, want 2", n)
	}

	// Both hooks at once, the App's form-encoded: one run.
	f = newFixture(t)
	appForm := []byte("payload=" + url.QueryEscape(string(appHook)))
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, req := range []*http.Request{
		delivery("github", "workflow_run", "9b2d3e4f-cc78-11e3-81ab-4c9367dc0958", repoHook, githubSecret),
		formDelivery("workflow_run", "9b2d3e4f-cc78-11e3-81ab-4c9367dc0958", appForm, githubSecret),
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = f.serve(req).Code
		}()
	}
	wg.Wait()
	slices.Sort(codes)
	if codes[0] != 200 || codes[1] != 202 || f.runCount() != 1 || f.engine.count() != 1 {
		t.Fatalf("answers %v, %d runs stored, %d submitted; want 200 and 202, one run", codes, f.runCount(), f.engine.count())
	}
}
