package chaos

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/github/githubtest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// TestStatusesAfterKill (issue 35): a daemon killed (kill -9) between two updates of a run's
// GitHub deployment (queued told, the rest not: the host hangs) leaves them in the run
// store's outbox; restarted, it tells them, in order, to the one deployment.
func TestStatusesAfterKill(t *testing.T) {
	const sha = "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e"
	w := newWorld(t)
	gh := githubtest.NewServer(t)
	gh.AddRepo("acme/api", sha)
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML([]svc{{name: "a", uuid: appA}},
		"statuses:\n  github: { repo: acme/api, url: \""+gh.URL+"\", token: \"${GITHUB_TOKEN}\", environment: production }\n")})
	env := w.env("chaos-statuses-1", dir)
	env["GITHUB_TOKEN"] = gh.Token
	d := startDaemon(t, "d1", env)

	states := func() []string {
		if ds := gh.Deployments("acme/api"); len(ds) == 1 {
			return ds[0].States
		}
		return nil
	}
	// The run waits for coolify:phase1 while queued is told; then the host hangs and the run
	// goes on, its next states waiting in the outbox.
	lease, err := w.locker().Acquire(context.Background(), locks.Request{Key: orchestrator.Phase1Key, Holder: "test/blocker"})
	if err != nil {
		t.Fatal(err)
	}
	r := d.trigger("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2", Commit: sha})
	waitFor(t, 30*time.Second, "queued told", func() bool { return len(states()) == 1 })
	gh.SetLatency(time.Hour)
	t.Cleanup(func() { gh.SetLatency(0) }) // runs before the daemon stops: let a hung answer go
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := d.waitEnded(r.ID, 60*time.Second); got.Status != runs.StatusSucceeded {
		t.Fatalf("run: %s (%s)", got.Status, got.Reason)
	}
	d.kill()
	if got := states(); !slices.Equal(got, []string{"queued"}) {
		t.Fatalf("states before the restart = %v, want [queued]: the scenario did not catch the daemon between two updates", got)
	}

	gh.SetLatency(0)
	d.restart()
	waitFor(t, 30*time.Second, "the missing states told after the restart", func() bool { return len(states()) >= 3 })
	// Delivery is at least once: the hung in_progress may also land when the host lets it go,
	// so a state may repeat, but none is lost and the order holds.
	if got, want := slices.Compact(states()), []string{"queued", "in_progress", "success"}; !slices.Equal(got, want) {
		t.Errorf("states = %v, want %v (repeats aside)", states(), want)
	}
	if n := len(gh.Deployments("acme/api")); n != 1 {
		t.Errorf("deployments = %d, want 1", n)
	}
}
