package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Promise 1 in the crash paths: deployments take 8 s, longer than the 3 s lease TTL, and the
// daemon running one is killed with kill -9 in the middle of it. Whether it comes back at once
// (and releases its leftover leases at start) or never does (and its leases simply expire),
// a second daemon's run of the same pipeline must not write to an application while the
// dead run's deployment of it is still in progress: it cancels that deployment or waits for
// it. The world's checks read that from the fake's own history; this test adds that the
// orphaned deployment is not left unnoticed, that the dead run ends interrupted with no step
// left running, and that the new run succeeds.
func TestKillDuringLongDeploy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
	}{{"restarted at once", true}, {"never restarted", false}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 8 * time.Second, RunMax: 8 * time.Second}))
			dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML([]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}},
				"locks:\n  ttl: 3s\n  phase: { timeout: 120s }\n  service: { timeout: 120s }\n")})
			d1 := startDaemon(t, "d1", w.env("chaos-long-1", dir))
			d2 := startDaemon(t, "d2", w.env("chaos-long-2", dir))

			r1 := d1.trigger("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
			var dep coolifytest.Deployment
			// Started on Coolify and recorded in the run (killed between the two, the dead run
			// could not say which deployment was its own: the survivor's guard still cancels it).
			waitFor(t, 30*time.Second, "run 1's deployment of a to start and be recorded", func() bool {
				var ok bool
				dep, ok = startedDeployment(w.cf, appA, r1.ID)
				r := d1.run(r1.ID)
				st := r.Step(runs.Phase2, "a")
				return ok && st != nil && st.DeploymentUUID == dep.UUID
			})
			d1.kill()
			if tc.restart {
				d1.restart()
			}
			r2 := d2.trigger("prod", orchestrator.Trigger{Build: "2", ImageTag: "v3"})
			if got := d2.waitEnded(r2.ID, 120*time.Second); got.Status != runs.StatusSucceeded {
				t.Errorf("run 2: %q (%s), want succeeded", got.Status, got.Reason)
			}

			// The dead run's deployment was canceled or waited for, not forgotten: it ended, and
			// run 2's first write to a came after it ended.
			final, _ := w.cf.Deployment(dep.UUID)
			if final.FinishedAt.IsZero() {
				t.Errorf("run 1's deployment %s of a is still %q after run 2 ended", dep.UUID, final.Status)
			}
			// The dead run is taken over (by its restarted daemon, or by the survivor once its
			// liveness lease expires): interrupted, with no step left running or pending.
			var got runs.Run
			waitFor(t, 60*time.Second, "run 1 to read interrupted on the surviving daemon", func() bool {
				got = d2.run(r1.ID)
				return got.Status == runs.StatusInterrupted
			})
			if !strings.Contains(got.Reason, "chaos-long-1") {
				t.Errorf("run 1 reads interrupted (%s), want a reason naming the dead daemon chaos-long-1", got.Reason)
			}
			// Each service's state as the dead run left it: a's deployment was canceled; b
			// was synced and never deployed.
			left := map[string]string{}
			for _, l := range got.Left {
				left[l.Service] = l.State
			}
			if left["a"] != runs.LeftDeployCanceled || left["b"] != runs.LeftSyncedNotDeployed {
				t.Errorf("run 1 left %+v, want a %s and b %s", got.Left, runs.LeftDeployCanceled, runs.LeftSyncedNotDeployed)
			}
			for _, st := range got.Steps {
				switch st.Status {
				case runs.StepRunning, runs.StepPending, runs.StepWaitingLock:
					t.Errorf("interrupted run 1: %s step %s is still %q", st.Phase, st.Name, st.Status)
				}
			}
			for _, app := range []string{appA, appB} {
				if a, _ := w.cf.App(app); a.DeployedImageTag != "v3" || a.DeployedEnv["BUILD"] != "2" {
					t.Errorf("%s runs tag %q with BUILD=%q, want run 2's v3 and 2", app, a.DeployedImageTag, a.DeployedEnv["BUILD"])
				}
			}
		})
	}
}

// Promise 4 with deployments that take long enough for other runs' syncs to queue up behind
// them: two daemons, two pipelines sharing service b, eight runs triggered back to back. Each
// deployment runs the config of the run that started it (the world's checks), and each
// service ends running exactly the tag and BUILD of the last run that synced it, read from
// the fake's history and tied to that run's trigger here.
func TestNewestConfigWins(t *testing.T) {
	w := newWorld(t, coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: time.Second, RunMax: 2 * time.Second}))
	budgets := "locks:\n  ttl: 30s\n  phase: { timeout: 180s, max_retries: 3 }\n  service: { timeout: 180s, max_retries: 3 }\n"
	dir := pipelineDir(t, map[string]string{
		"api": w.pipelineYAML([]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}}, budgets+"concurrency: supersede\n"),
		"web": w.pipelineYAML([]svc{{name: "b", uuid: appB}, {name: "c", uuid: appC}}, budgets+"concurrency: queue\n"),
	})
	d1 := startDaemon(t, "d1", w.env("chaos-newest-1", dir))
	d2 := startDaemon(t, "d2", w.env("chaos-newest-2", dir))

	build := map[string]string{} // run id → trigger build
	type submitted struct {
		d  *daemon
		id string
	}
	var all []submitted
	for i := range 8 {
		d, pipeline := d1, "api"
		if i%2 == 1 {
			d, pipeline = d2, "web"
		}
		b := fmt.Sprint(200 + i)
		r := d.trigger(pipeline, orchestrator.Trigger{Build: b, ImageTag: "v" + b})
		build[r.ID] = b
		all = append(all, submitted{d, r.ID})
	}
	for _, s := range all {
		got := s.d.waitEnded(s.id, 180*time.Second)
		if got.Status != runs.StatusSucceeded && got.Status != runs.StatusSuperseded {
			t.Errorf("run %s (%s) ended %q: %s", got.ID, got.Pipeline, got.Status, got.Reason)
		}
	}

	h := w.cf.History()
	for _, app := range []string{appA, appB, appC} {
		st := h.Apps[app]
		b, ok := build[st.LastWriter]
		if !ok {
			t.Errorf("%s was last synced by %q, not one of the runs", app, st.LastWriter)
			continue
		}
		if st.Running.ImageTag != "v"+b || st.Running.Env["BUILD"] != b {
			t.Errorf("%s runs tag %q BUILD=%q; the last run that synced it (%s) asked for v%s and %s",
				app, st.Running.ImageTag, st.Running.Env["BUILD"], st.LastWriter, b, b)
		}
	}
	deployed := 0
	for _, s := range h.Spans {
		if s.Status == "finished" {
			deployed++
			if b := build[s.Run]; s.Config.ImageTag != "v"+b || s.Config.Env["BUILD"] != b {
				t.Errorf("deployment %s of %s by run %s (build %s) ran tag %q BUILD=%q",
					s.Deployment, s.App, s.Run, b, s.Config.ImageTag, s.Config.Env["BUILD"])
			}
		}
	}
	if deployed == 0 {
		t.Error("no deployment finished")
	}
}
