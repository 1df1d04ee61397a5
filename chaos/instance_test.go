package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Promise 5, the same-instance case: a second daemon started with the ORCH_INSTANCE of a live
// one (whose liveness lease is renewed) refuses to start with an error naming the instance,
// and takes nothing from the first: its run, in the middle of a deployment, goes on and
// succeeds with its leases intact.
func TestSameInstanceRefused(t *testing.T) {
	w := newWorld(t, coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 3 * time.Second, RunMax: 3 * time.Second}))
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML([]svc{{name: "a", uuid: appA}}, "locks: { ttl: 10s }\n")})
	const instance = "chaos-same-1"
	d1 := startDaemon(t, "d1", w.env(instance, dir))
	r1 := d1.trigger("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	waitFor(t, 30*time.Second, "run 1's deployment of a to start", func() bool {
		_, ok := startedDeployment(w.cf, appA, r1.ID)
		return ok
	})
	before := w.heldLocks()

	twin := newDaemon(t, "twin", w.env(instance, dir))
	twin.spawn()
	select {
	case <-twin.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("a second daemon with the live instance %q is still running after 60s; want it to refuse to start\n%s", instance, twin.log)
	}
	if twin.err == nil {
		t.Errorf("the second daemon with instance %q exited 0; want a refusal", instance)
	}
	if log := twin.log.String(); !strings.Contains(log, instance) || !strings.Contains(log, "another daemon with this instance name is running") {
		t.Errorf("the second daemon's refusal does not name the instance %q and say why:\n%s", instance, twin.log)
	}

	got := d1.waitEnded(r1.ID, 60*time.Second)
	if got.Status != runs.StatusSucceeded {
		t.Errorf("the first daemon's run: %q (%s), want succeeded (the twin must take nothing)", got.Status, got.Reason)
	}
	if len(before) == 0 {
		t.Error("no lease held during run 1's deployment; the scenario did not catch the run holding its locks")
	}
	if a, _ := w.cf.App(appA); a.DeployedImageTag != "v2" {
		t.Errorf("a runs %q, want run 1's v2", a.DeployedImageTag)
	}
}
