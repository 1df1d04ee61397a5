package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Scenario 2: two daemons on one Redis, 20 runs of two pipelines that share a service,
// triggered alternately on both. Per service, the requests made under one lease (one run's
// Phase-1 or Phase-2 step, told apart by the X-Orchestrator-Run and -Fence headers the fake
// records) never interleave with another lease's; every run ends succeeded — possibly with
// steps superseded by a newer run's sync — or superseded before it started; and each
// service ends up running the config last synced to it.
func TestTwoDaemonsTwentyRuns(t *testing.T) {
	w := newWorld(t)
	budgets := "locks:\n  ttl: 30s\n  phase: { timeout: 120s, max_retries: 3 }\n  service: { timeout: 120s, max_retries: 3 }\n"
	dir := pipelineDir(t, map[string]string{
		"api": w.pipelineYAML([]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}}, budgets+"concurrency: queue\n"),
		"web": w.pipelineYAML([]svc{{name: "b", uuid: appB}, {name: "c", uuid: appC}}, budgets+"concurrency: supersede\n"),
	})
	d1 := startDaemon(t, "d1", w.env("chaos-two-1", dir))
	d2 := startDaemon(t, "d2", w.env("chaos-two-2", dir))

	type submitted struct {
		d   *daemon
		run runs.Run
	}
	var all []submitted
	for i := range 20 {
		d, pipeline := d1, "api"
		if i%2 == 1 {
			d, pipeline = d2, "web"
		}
		build := strconv.Itoa(100 + i)
		all = append(all, submitted{d, d.trigger(pipeline, orchestrator.Trigger{Build: build, ImageTag: "v" + build})})
	}

	ended := make([]runs.Run, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
			defer cancel()
			if _, err := s.d.events(ctx, s.run.ID); err != nil {
				t.Errorf("run %s on %s: %v", s.run.ID, s.d.name, err)
			}
		})
		_ = i
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	counts := map[runs.Status]int{}
	for i, s := range all {
		ended[i] = s.d.run(s.run.ID)
		r := ended[i]
		counts[r.Status]++
		switch r.Status {
		case runs.StatusSucceeded:
			for _, st := range r.Steps {
				if st.Phase == runs.Phase2 && st.Status != runs.StepHealthy && st.Status != runs.StepSuperseded {
					t.Errorf("succeeded run %s (%s): phase-2 step %s is %q", r.ID, r.Pipeline, st.Name, st.Status)
				}
			}
		case runs.StatusSuperseded:
			if r.Pipeline != "web" {
				t.Errorf("run %s of %s (concurrency: queue) was superseded: %s", r.ID, r.Pipeline, r.Reason)
			}
		default:
			t.Errorf("run %s (%s) on %s ended %q: %s", r.ID, r.Pipeline, s.d.name, r.Status, r.Reason)
		}
	}
	t.Logf("run outcomes: %v; deployments: %d", counts, len(w.cf.Deployments("")))

	apps := []string{appA, appB, appC}
	// No run is lost: what a service carries now is what it runs.
	for _, app := range apps {
		a, _ := w.cf.App(app)
		v, _ := w.cf.EnvValue(app, "BUILD", false)
		if a.ImageTag == "v1" || a.ImageTag != a.DeployedImageTag || a.DeployedEnv["BUILD"] != v || "v"+v != a.ImageTag {
			t.Errorf("%s carries tag %q BUILD=%q but runs tag %q BUILD=%q; want the last synced config deployed",
				app, a.ImageTag, v, a.DeployedImageTag, a.DeployedEnv["BUILD"])
		}
	}
	if held := w.heldLocks(); len(held) != 0 {
		t.Errorf("locks held after every run ended: %+v", held)
	}
}

// Scenario 4: Redis restarts empty in the middle of a run. The run's leases are gone, so it
// stops and fails (its record is gone too: Redis without persistence keeps no runs); the fences handed out afterwards are still above every
// fence seen before (the driver seeds them from the server's clock), as the fake's
// X-Orchestrator-Fence headers show. And Phase 2 refuses to act on a service whose recorded
// fence is newer than its own lease's.
func TestRedisRestartedEmpty(t *testing.T) {
	w := newWorld(t, coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 1500 * time.Millisecond, RunMax: 1500 * time.Millisecond}))
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML(
		[]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}}, "locks: { ttl: 30s }\n")})
	d := startDaemon(t, "d1", w.env("chaos-restart-1", dir))

	r1 := d.trigger("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	waitFor(t, 30*time.Second, "run 1's deployment of a to start", func() bool {
		_, ok := startedDeployment(w.cf, appA, r1.ID)
		return ok
	})
	var before int64
	for _, q := range w.cf.Requests() {
		if f, _ := strconv.ParseInt(q.Fence, 10, 64); f > before {
			before = f
		}
	}
	if before == 0 {
		t.Fatal("no fenced request before the restart")
	}
	w.redis.Restart()
	restarted := time.Now()

	// Run 1 notices at the next renewal of a lease (the tokens are gone) and stops: failed,
	// when its own lease goes first, or stopped for a takeover, when the daemon's liveness
	// lease does (its daemon may be presumed dead). Its record went with Redis, so the
	// daemon's log and the fake's are the witnesses.
	waitFor(t, 30*time.Second, "run 1 to stop after the restart", func() bool {
		for _, l := range strings.Split(d.log.String(), "\n") {
			if !strings.Contains(l, r1.ID) {
				continue
			}
			// The record is gone with Redis, so the end is logged as not recorded.
			if strings.Contains(l, `"msg":"run ended"`) || strings.Contains(l, `"msg":"run end not recorded"`) {
				return strings.Contains(l, `"status":"failed"`)
			}
			if strings.Contains(l, `"msg":"run stopped: no longer this daemon's`) {
				return true
			}
		}
		return false
	})
	for _, q := range requestsOf(w.cf, r1.ID) {
		if q.Route == "POST /deploy" && strings.Contains(q.RawQuery, appB) {
			t.Errorf("run 1 deployed b after losing its leases to the restart")
		}
	}

	// The daemon stops its runs and takes its liveness lease again before it takes new ones
	// (503 meanwhile): trigger as a CI job would, until accepted.
	r2, _ := triggerUntilAccepted(t, d, "prod", orchestrator.Trigger{Build: "2", ImageTag: "v3"}, restarted)
	if got := d.waitEnded(r2.ID, 60*time.Second); got.Status != runs.StatusSucceeded {
		t.Fatalf("run 2 after the restart: %q (%s), want succeeded", got.Status, got.Reason)
	}
	n := 0
	for _, q := range w.cf.Requests() {
		if q.Fence == "" || q.Start.Before(restarted) || q.RunID == r1.ID {
			continue
		}
		n++
		if f, _ := strconv.ParseInt(q.Fence, 10, 64); f <= before {
			t.Errorf("after the restart %s %s carried fence %d, not above %d seen before it", q.Method, q.Path, f, before)
		}
	}
	if n == 0 {
		t.Error("run 2 made no fenced request")
	}

	// A recorded fence newer than the lease's: hold coolify:phase2 so run 3 syncs and then
	// waits, record a mark on a with a fence from the future, then let run 3 go.
	lk := w.locker()
	if err := lk.RegisterNamespace("coolify:"); err != nil {
		t.Fatal(err)
	}
	hold, err := lk.Acquire(t.Context(), locks.Request{Key: "coolify:phase2", Holder: "chaos-test", Owner: "chaos-test", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	r3 := d.trigger("prod", orchestrator.Trigger{Build: "3", ImageTag: "v4"})
	waitFor(t, 30*time.Second, "run 3 to wait for coolify:phase2", func() bool {
		info, err := lk.Get(t.Context(), "coolify:phase2")
		return err == nil && info.Waiters > 0 && d.run(r3.ID).Status == runs.StatusPhase1
	})
	const future = int64(1) << 62
	w.allowLeftSynced(appA, "", "run 3 must not touch a once a newer fence is recorded on it, not even to restore it")
	if _, err := w.store().PutMark(t.Context(), runs.Mark{UUID: appA, RunID: "intruder", Fence: future, Phase: runs.Phase2, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := hold.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := d.waitEnded(r3.ID, 60*time.Second)
	if got.Status != runs.StatusFailed || !strings.Contains(got.Reason, "newer fence") || !strings.Contains(got.Reason, fmt.Sprint(future)) {
		t.Errorf("run 3: %q (%s), want failed refusing a's fence %d", got.Status, got.Reason, future)
	}
	for _, q := range requestsOf(w.cf, r3.ID) {
		if q.Route == "POST /deploy" {
			t.Errorf("run 3 deployed (%s) despite a's newer recorded fence", q.RawQuery)
		}
	}
}
