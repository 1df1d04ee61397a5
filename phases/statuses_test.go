package phases_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/deploystatus"
	"github.com/deploy-orchestrator/orchestrator/github"
	"github.com/deploy-orchestrator/orchestrator/github/githubtest"
	"github.com/deploy-orchestrator/orchestrator/phases"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// withGitHubStatuses gives h's engine a reporter telling gh, its loop running until the test
// ends.
func withGitHubStatuses(h *harness, gh *githubtest.Server) {
	h.env["GITHUB_TOKEN"] = gh.Token
	h.reporter = func(ps map[string]*config.Pipeline) phases.Reporter {
		rp := deploystatus.New(deploystatus.Options{Store: h.store, Pipelines: ps, Owner: "test-instance",
			Client: func(p *config.Pipeline, _ string) (deploystatus.Host, error) {
				return github.New(p.Statuses.GitHub.URL, github.Token(p.Statuses.GitHub.Token.Reveal()))
			},
			Poll: 20 * time.Millisecond, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, RequestTimeout: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { rp.Run(ctx) })
		h.t.Cleanup(func() { cancel(); wg.Wait() })
		return rp
	}
}

// TestStatusesNeverHoldARun (issue 35): a Git host that answers nothing (every request
// hangs, and the reporter waits for it as long as it takes) holds no run back: the run ends
// with no state told, and the host hears every state, in order, once it answers again.
func TestStatusesNeverHoldARun(t *testing.T) {
	const sha = "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e"
	h := newHarness(t)
	gh := githubtest.NewServer(t)
	gh.AddRepo("acme/api", sha)
	gh.SetLatency(time.Hour)
	withGitHubStatuses(h, gh)
	h.start(h.pipelineYAML("prod", []string{"api", "worker"},
		"statuses:\n  github: { repo: acme/api, url: \""+gh.URL+"\", token: \"${GITHUB_TOKEN}\", environment: production }\n"))
	id := h.submit("prod", orchestrator.Trigger{Build: "7", ImageTag: "v2", Commit: sha})
	r := h.wait(id)
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s: %s", r.Status, r.Reason)
	}
	if ds := gh.Deployments("acme/api"); len(ds) != 0 {
		t.Fatalf("the host, answering nothing, shows %d deployments when the run ended", len(ds))
	}

	gh.SetLatency(0)
	gh.HTTP.CloseClientConnections() // the requests hanging fail; the reporter sends them again
	deadline := time.Now().Add(30 * time.Second)
	var states []string
	for time.Now().Before(deadline) {
		if ds := gh.Deployments("acme/api"); len(ds) == 1 {
			if states = ds[0].States; len(states) == 3 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if want := []string{"queued", "in_progress", "success"}; !slices.Equal(states, want) {
		t.Errorf("states once the host answered = %v, want %v", states, want)
	}
}
