package phases_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The campaign's seed 1106: pipelines front (worker) and back (api, then worker in the next
// wave) share worker. front's build 510 deploys worker; back's build 99 syncs api and worker;
// back's build 106 syncs them again before 99's Phase 2, so 99 deploys neither (a newer run
// re-synced them); 106's deployment of api fails and its rollback puts back 99's config on
// both. worker, which ran front's 510, must then run 99's config too (redeployed), not carry a
// config no run deploys; api likewise. Both runs' records say so, and what worker runs is
// recorded as 99's build. When that redeploy fails, 106's left says what worker carries
// (99's config) and what it runs (510).
func TestRollbackRedeploysASupersededRunsSync(t *testing.T) {
	for _, redeployFails := range []bool{false, true} {
		t.Run(map[bool]string{false: "redeployed", true: "redeploy fails"}[redeployFails], func(t *testing.T) {
			rollbackOverSupersededSync(t, redeployFails)
		})
	}
}

func rollbackOverSupersededSync(t *testing.T, redeployFails bool) {
	h := newHarness(t)
	back := h.pipelineYAML("back", []string{"api", "worker"}, "on_failure: rollback\n")
	back = strings.Replace(back, "uuid: "+uuidWorker+"\n", "uuid: "+uuidWorker+"\n    wave: 1\n", 1)
	h.start(h.pipelineYAML("front", []string{"worker"}, ""), back)
	front := h.submit("front", orchestrator.Trigger{Build: "510", ImageTag: "v510"})
	if r := h.wait(front); r.Status != runs.StatusSucceeded {
		t.Fatalf("front build 510: %s (%s)", r.Status, r.Reason)
	}
	wantCarries(t, h, uuidWorker, "v510", "510")

	// 106's deployment of api fails; the redeploy of 99's config after it does not.
	h.coolify.SetDeployOutcomes(uuidAPI, coolifytest.Fail, coolifytest.Succeed)
	if redeployFails {
		h.coolify.SetDeployOutcome(uuidWorker, coolifytest.Fail)
	}
	blocker := holdPhase2(t, h)
	waitPhase2 := func(id string) {
		waitUntil(t, 30*time.Second, "run "+id+" to wait for coolify:phase2", func() bool {
			return slices.ContainsFunc(h.events(id), func(e runs.Event) bool {
				return e.Type == runs.EventLockWaiting && e.LockKey == "coolify:phase2"
			})
		})
	}
	x := h.submit("back", orchestrator.Trigger{Build: "99", ImageTag: "v99"})
	waitPhase2(x)
	y := h.submit("back", orchestrator.Trigger{Build: "106", ImageTag: "v106"})
	waitPhase2(y)
	if err := blocker.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	rx, ry := h.wait(x), h.wait(y)

	if rx.Status != runs.StatusSucceeded || !strings.Contains(rx.Reason, "re-synced") {
		t.Errorf("build 99: %s (%q), want succeeded, saying a newer run re-synced its services", rx.Status, rx.Reason)
	}
	for _, name := range []string{"api", "worker"} {
		if st := stepOf(t, rx, runs.Phase2, name); st.Status != runs.StepSuperseded {
			t.Errorf("build 99's %s: %s, want superseded", name, st.Status)
		}
	}
	if ry.Status != runs.StatusFailed {
		t.Fatalf("build 106: %s (%s), want failed", ry.Status, ry.Reason)
	}
	if redeployFails {
		// The old container keeps running: worker carries 99's config and runs 510, as 106's
		// left says.
		if a, _ := h.coolify.App(uuidWorker); a.ImageTag != "v99" || a.DeployedImageTag != "v510" {
			t.Errorf("worker carries %s and runs %s, want v99 and v510", a.ImageTag, a.DeployedImageTag)
		}
		for _, l := range ry.Left {
			if l.Service == "worker" && (l.State != runs.LeftRestored ||
				!strings.Contains(l.Detail, "carries tag v99 again (build 99 of back, run "+x+"), but was not redeployed: it runs build 510 of front, run "+front)) {
				t.Errorf("build 106 left worker %s (%s), want restored, carrying 99's tag and running front's 510", l.State, l.Detail)
			}
		}
		return
	}
	// Every service runs what it carries: 99's config, put back and redeployed.
	wantCarries(t, h, uuidAPI, "v99", "99")
	wantCarries(t, h, uuidWorker, "v99", "99")
	for _, l := range ry.Left {
		if l.State != runs.LeftRestored || !strings.Contains(l.Detail, "carries and runs tag v99 again") {
			t.Errorf("build 106 left %s %s (%s), want restored, carrying and running tag v99", l.Service, l.State, l.Detail)
		}
	}
	run, err := h.store.GetRunning(context.Background(), uuidWorker)
	if err != nil || run.Build != "99" || run.RunID != x || run.Pipeline != "back" || run.ImageTag != "v99" || run.RestoredBy != y {
		t.Errorf("worker runs %+v (%v), want back's build 99 of run %s, tag v99, restored by %s", run, err, x, y)
	}
}
