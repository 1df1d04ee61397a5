package api_test

import (
	"bytes"
	"strings"
	"testing"

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
