package chaos

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// cancelRequest returns the fake's completed cancel request of deployment dep, if any.
func cancelRequest(cf *coolifytest.Server, dep string) (coolifytest.Request, bool) {
	for _, r := range cf.RequestsTo("POST /deployments/{uuid}/cancel") {
		if strings.Contains(r.Path, dep) {
			return r, true
		}
	}
	return coolifytest.Request{}, false
}

// Scenario 3: Redis stalls (SIGSTOP) for longer than the lease TTL while a deployment runs,
// and a second daemon's run is waiting for the same service's key. The holder cannot renew;
// by its own monotonic clock it declares the lease lost within the TTL of the stall — so
// before Redis could expire the key and grant it to the waiter — cancels the deployment it
// no longer guards, and the run ends failed with "lock lost". Redis comes back after a fixed
// stall of TTL + 2 s whatever the holder did; the waiting run then deploys, and none of its
// writes reaches Coolify before the first holder's cancel did.
func TestRedisStalledPastTTL(t *testing.T) {
	w := newWorld(t)
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML(
		[]svc{{name: "a", uuid: appA}}, "locks: { ttl: 3s }\non_failure: rollback\n")})
	// The daemons' liveness leases outlast the stall: this is the lock lease's promise. A
	// daemon that loses its liveness lease too stops its runs for a takeover instead
	// (TestCutOffDaemonActsOnNothingTakenOver).
	env := func(instance string) map[string]string {
		e := w.env(instance, dir)
		e["ORCH_LIVENESS_TTL"] = "15s"
		return e
	}
	d1 := startDaemon(t, "d1", env("chaos-stall-1"))
	d2 := startDaemon(t, "d2", env("chaos-stall-2"))

	w.cf.SetDeployOutcome(appA, coolifytest.Hang)
	r1 := d1.trigger("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	var dep coolifytest.Deployment
	waitFor(t, 30*time.Second, "run 1's deployment of a to start", func() bool {
		var ok bool
		dep, ok = startedDeployment(w.cf, appA, r1.ID)
		return ok
	})
	w.cf.SetDeployOutcome(appA, coolifytest.Succeed) // the rollback's redeploy may finish

	// The second daemon's run waits, holding nothing (a lease it held would be lost in the
	// stall too): the test holds coolify:phase1 with the pipeline's TTL and lets it lapse in
	// the stall, so that run 2 gets it, and then a's key, once Redis answers again.
	lk := w.locker()
	if err := lk.RegisterNamespace("coolify:"); err != nil {
		t.Fatal(err)
	}
	if _, err := lk.Acquire(t.Context(), locks.Request{Key: "coolify:phase1", Holder: "chaos-test", Owner: "chaos-test", TTL: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	r2 := d2.trigger("prod", orchestrator.Trigger{Build: "2", ImageTag: "v3"})
	waitFor(t, 30*time.Second, "run 2 to wait for coolify:phase1", func() bool {
		info, err := lk.Get(t.Context(), "coolify:phase1")
		return err == nil && info.Waiters > 0
	})

	const ttl, stall = 3 * time.Second, 3*time.Second + 2*time.Second
	w.redis.Pause()
	paused := time.Now()
	time.Sleep(stall) // the fault itself: Redis answers nothing for this long, whatever happens meanwhile
	w.redis.Resume()
	cancel, ok := cancelRequest(w.cf, dep.UUID)
	if !ok {
		t.Fatalf("run 1 did not cancel its deployment %s during a %s Redis stall (TTL %s)", dep.UUID, stall, ttl)
	}
	// The cancel came within the TTL of the stall: the lease was given up by the holder's
	// clock before Redis (once it answers again) could expire it and grant it to run 2.
	if lag := cancel.Start.Sub(paused); lag > ttl {
		t.Errorf("the deployment was canceled %s after Redis stalled; want within the %s TTL", lag, ttl)
	}

	got := d1.waitEnded(r1.ID, 60*time.Second)
	if got.Status != runs.StatusFailed || !strings.HasPrefix(got.Reason, "lock lost") {
		t.Errorf("run 1: %q (%s), want failed with a reason starting \"lock lost\"", got.Status, got.Reason)
	}
	if d, _ := w.cf.Deployment(dep.UUID); d.Status != "cancelled-by-user" && d.Status != "cancelled" {
		t.Errorf("run 1's deployment %s ends %q, want cancelled", dep.UUID, d.Status)
	}

	if got := d2.waitEnded(r2.ID, 60*time.Second); got.Status != runs.StatusSucceeded {
		t.Fatalf("run 2 on the other daemon: %q (%s), want succeeded", got.Status, got.Reason)
	}
	for _, r := range requestsOf(w.cf, r2.ID) {
		if r.Method != http.MethodGet && r.Start.Before(cancel.End) {
			t.Errorf("run 2 called %s %s at %s, before run 1's cancel of its deployment reached Coolify (%s)", r.Method, r.Path, r.Start, cancel.End)
		}
	}
	if a, _ := w.cf.App(appA); a.DeployedImageTag != "v3" {
		t.Errorf("a runs %q, want v3", a.DeployedImageTag)
	}
}

// Scenario 5: Coolify answers 500 and 502 in bursts, throttles the deploy with 429 and a
// Retry-After, and hangs a deployment. The client retries and waits as told; the hung
// deployment is canceled at the service's deploy_timeout; the run fails naming the service
// and why, and rolls the whole release back.
func TestCoolifyFaults(t *testing.T) {
	w := newWorld(t)
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML(
		[]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB, deployTimeout: "3s"}},
		"locks: { ttl: 30s }\non_failure: rollback\n")})
	d := startDaemon(t, "d1", w.env("chaos-faults-1", dir))

	w.cf.FailNext(2, coolifytest.Fault{Method: http.MethodGet, Route: "/applications/{uuid}", Status: http.StatusInternalServerError})
	w.cf.FailNext(1, coolifytest.Fault{Method: http.MethodGet, Route: "/applications/{uuid}/envs", Status: http.StatusBadGateway})
	w.cf.FailNext(2, coolifytest.Fault{Method: http.MethodPost, Route: "/deploy", Status: http.StatusTooManyRequests, RetryAfter: time.Second})
	w.cf.SetDeployOutcome(appB, coolifytest.Hang)

	r := d.trigger("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	var hung coolifytest.Deployment
	waitFor(t, 60*time.Second, "b's deployment to start", func() bool {
		var ok bool
		hung, ok = startedDeployment(w.cf, appB, r.ID)
		return ok
	})
	w.cf.SetDeployOutcome(appB, coolifytest.Succeed) // the rollback's redeploy of v1 may finish
	got := d.waitEnded(r.ID, 60*time.Second)

	if got.Status != runs.StatusFailed || !strings.Contains(got.Reason, "deploy b") {
		t.Errorf("run: %q (%s), want failed naming service b", got.Status, got.Reason)
	}
	if !strings.Contains(got.Reason, "3s") {
		t.Errorf("run reason %q does not say the deployment ran past its 3s deploy_timeout", got.Reason)
	}
	if st := got.Step(runs.Phase2, "b"); st == nil || st.Status != runs.StepFailed || st.Error == "" {
		t.Errorf("phase-2 step b: %+v, want failed with an error", st)
	}
	if st := got.Step(runs.Phase2, "a"); st == nil || st.Status != runs.StepHealthy {
		t.Errorf("phase-2 step a: %+v, want healthy (a deployed before b hung)", st)
	}

	// The hung deployment was canceled at its deadline, not before.
	c, ok := cancelRequest(w.cf, hung.UUID)
	if !ok {
		t.Fatalf("the hung deployment %s was never canceled", hung.UUID)
	}
	var deployed time.Time
	for _, q := range requestsOf(w.cf, r.ID) {
		if q.Route == "POST /deploy" && q.DeploymentUUID == hung.UUID {
			deployed = q.End
		}
	}
	if wait := c.Start.Sub(deployed); wait < 3*time.Second || wait > 3*time.Second+3*time.Second {
		t.Errorf("the hung deployment was canceled %s after it was queued; want at its 3s deploy_timeout (within a 2s poll)", wait)
	}

	// Every injected fault was followed by a retry of the same route that succeeded, and the
	// retry after a 429 waited for its Retry-After.
	reqs := requestsOf(w.cf, r.ID)
	faults := 0
	for i, q := range reqs {
		if q.Fault == "" {
			continue
		}
		faults++
		var next *coolifytest.Request
		for j := i + 1; j < len(reqs); j++ {
			if reqs[j].Route == q.Route && reqs[j].Path == q.Path {
				next = &reqs[j]
				break
			}
		}
		if next == nil {
			t.Errorf("%s %s answered %d (injected) and was never retried", q.Method, q.Path, q.Status)
			continue
		}
		if q.Status == http.StatusTooManyRequests {
			if gap := next.Start.Sub(q.End); gap < time.Second-10*time.Millisecond {
				t.Errorf("retry of %s came %s after a 429 with Retry-After: 1; want at least 1s", q.Route, gap)
			}
		}
	}
	if faults != 5 {
		t.Errorf("the run met %d injected faults, want 5 (2×500, 1×502, 2×429)", faults)
	}

	// Rollback returns the whole release: b and a (which deployed fine before b hung) are
	// back on v1 with BUILD=0 and run it.
	for _, app := range []string{appA, appB} {
		if st, _ := w.cf.App(app); st.ImageTag != "v1" || st.DeployedImageTag != "v1" {
			t.Errorf("%s after rollback: tag %q deployed %q, want v1 and v1", app, st.ImageTag, st.DeployedImageTag)
		}
		if v, _ := w.cf.EnvValue(app, "BUILD", false); v != "0" {
			t.Errorf("%s's BUILD after rollback = %q, want 0", app, v)
		}
	}
	if held := w.heldLocks(); len(held) != 0 {
		t.Errorf("locks still held after the run ended: %+v", held)
	}
}

// Scenario 7: SIGTERM while Phase 1 is writing. The daemon stops taking runs, lets the current
// service step finish, compensates what Phase 1 changed, releases every lock, records the run
// as interrupted and exits 0.
func TestSIGTERMDuringPhase1(t *testing.T) {
	w := newWorld(t)
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML(
		[]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}, {name: "c", uuid: appC}}, "locks: { ttl: 10m }\n")})
	d := startDaemon(t, "d1", w.env("chaos-term-1", dir))
	// Slow writes keep the run in Phase 1 long enough to be caught there.
	w.cf.SetRouteLatency(http.MethodPatch, "", 300*time.Millisecond, 300*time.Millisecond)

	r := d.trigger("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	waitFor(t, 30*time.Second, "run to write a's env in Phase 1", func() bool {
		for _, q := range requestsOf(w.cf, r.ID) {
			if q.Method == http.MethodPatch && strings.Contains(q.Path, appA) {
				return true
			}
		}
		return false
	})
	if err := d.term(30 * time.Second); err != nil {
		t.Errorf("daemon exit after SIGTERM: %v, want 0", err)
	}
	if !strings.Contains(d.log.String(), `"msg":"daemon stopped"`) {
		t.Errorf("daemon log lacks the clean stop")
	}

	// Read the run and the locks straight from Redis: the daemon is gone.
	got, err := w.store().Get(t.Context(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != runs.StatusInterrupted || !strings.HasPrefix(got.Reason, "daemon shut down") {
		t.Errorf("run after SIGTERM: %q (%s), want interrupted by the shutdown", got.Status, got.Reason)
	}
	if len(got.HeldLocks) != 0 {
		t.Errorf("run record still lists held locks %v", got.HeldLocks)
	}
	for _, l := range w.heldLocks() {
		t.Errorf("after a graceful shutdown %s is still held by %s", l.Key, l.Holder)
	}
	for _, q := range requestsOf(w.cf, r.ID) {
		if q.Route == "POST /deploy" {
			t.Errorf("the run deployed (%s) although it was stopped in Phase 1", q.RawQuery)
		}
	}
	// Compensated: every service carries what it had before the run.
	for _, app := range []string{appA, appB, appC} {
		a, _ := w.cf.App(app)
		v, _ := w.cf.EnvValue(app, "BUILD", false)
		if a.ImageTag != "v1" || v != "0" {
			t.Errorf("%s after the interrupted run: tag %q BUILD=%q, want v1 and 0 (restored)", app, a.ImageTag, v)
		}
	}
}
