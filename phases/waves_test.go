package phases_test

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// waveApps are the applications of the wave tests: name → wave spec in the pipeline.
var waveApps = []struct{ name, spec string }{
	{"w-a", ""}, {"w-b", ""}, {"w-c", ""},
	{"w-d", "after: [w-a]"}, {"w-e", "after: [w-a, w-b]"},
	{"w-f", "after: [w-d]"},
}

func waveUUID(name string) string { return "app-" + name + "-000000000000000" }

// wavesHarness seeds the wave apps in a fake that builds up to builds at once, with
// deployments of run each.
func wavesHarness(t *testing.T, backend string, builds int, run time.Duration) *harness {
	h := newHarnessOn(t, backend, coolifytest.WithConcurrentBuilds(builds),
		coolifytest.WithTiming(coolifytest.Timing{Queued: 5 * time.Millisecond, RunMin: run, RunMax: run}))
	for _, a := range waveApps {
		h.coolify.AddApplication(coolifytest.Application{UUID: waveUUID(a.name), Name: a.name, ImageName: "ghcr.io/acme/" + a.name, ImageTag: "v1"})
	}
	return h
}

// wavesYAML is a pipeline over the wave apps, in order (reversed when reverse is set: the same
// waves, the services listed the other way round), deploying parallel at once.
func (h *harness) wavesYAML(name string, parallel int, reverse bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ncoolify: { url: %s, token: %q }\nphase2: { parallel: %d }\nservices:\n", name, h.coolifyURL, h.coolifyToken, parallel)
	apps := slices.Clone(waveApps)
	if reverse {
		slices.Reverse(apps)
	}
	for _, a := range apps {
		fmt.Fprintf(&b, "  - { name: %s, uuid: %s, image_tag: \"${trigger.image_tag}\", deploy_timeout: 10s", a.name, waveUUID(a.name))
		if a.spec != "" {
			b.WriteString(", " + a.spec)
		}
		b.WriteString(" }\n")
	}
	b.WriteString("locks: { ttl: 30s, phase: { timeout: 30s, max_retries: 0 }, service: { timeout: 30s, max_retries: 0 } }\n")
	return b.String()
}

// waveOf is the effective wave of each wave app.
var waveOf = map[string]int{"w-a": 0, "w-b": 0, "w-c": 0, "w-d": 1, "w-e": 1, "w-f": 2}

// checkExclusive checks, from the fake's own log, that no two requests mutating one
// application overlapped in time, and that every request made under a lease (its run and
// fence headers) acted on one application only: a lease is one service lock, and the work
// under it never strays to another service.
func checkExclusive(t *testing.T, hist coolifytest.History) {
	t.Helper()
	byApp := map[string][]coolifytest.Call{}
	leaseApp := map[string]string{}
	for _, c := range hist.Calls {
		if c.Fence != "" && c.Fence != "0" {
			for _, a := range c.Apps {
				lease := c.Run + "@" + c.Fence
				if prev, ok := leaseApp[lease]; ok && prev != a {
					t.Errorf("lease %s (run %s) acted on %s and %s", c.Fence, c.Run, prev, a)
				}
				leaseApp[lease] = a
			}
		}
		if !c.Mutating() || c.Handled == 0 {
			continue
		}
		for _, a := range c.Apps {
			byApp[a] = append(byApp[a], c)
		}
	}
	for app, calls := range byApp {
		for i := range calls {
			for j := i + 1; j < len(calls); j++ {
				a, b := calls[i], calls[j]
				if a.Start.Before(b.End) && b.Start.Before(a.End) {
					t.Errorf("%s: %s %s (run %s fence %s) overlapped %s %s (run %s fence %s)",
						app, a.Method, a.Path, a.Run, a.Fence, b.Method, b.Path, b.Run, b.Fence)
				}
			}
		}
	}
}

// Phase 2 deploys wave by wave, up to phase2.parallel at once: the waves' deployments never
// overlap one another, and inside the first wave three run together. The fake's own log shows
// one mutator per application at a time.
func TestPhase2DeploysWavesInParallel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := wavesHarness(t, backend, 4, 200*time.Millisecond)
		h.start(h.wavesYAML("waves", 3, false))
		r := h.wait(h.submit("waves", orchestrator.Trigger{Build: "7", ImageTag: "v2"}))
		if r.Status != runs.StatusSucceeded {
			t.Fatalf("run %s: %s (%s)", r.ID, r.Status, r.Reason)
		}
		hist := h.coolify.History()
		checkExclusive(t, hist)
		spanWave := map[int][]coolifytest.Span{}
		for _, s := range hist.Spans {
			name := strings.TrimSuffix(strings.TrimPrefix(s.App, "app-"), "-000000000000000")
			spanWave[waveOf[name]] = append(spanWave[waveOf[name]], s)
		}
		for w := 0; w < 2; w++ {
			for _, early := range spanWave[w] {
				for _, late := range spanWave[w+1] {
					if late.Queued.Before(early.End) {
						t.Errorf("wave %d deployment of %s queued at %s, before wave %d's %s ended at %s",
							w+1, late.App, late.Queued.Format(time.StampMilli), w, early.App, early.End.Format(time.StampMilli))
					}
				}
			}
		}
		if got := coolifytest.MaxInProgress(spanWave[0]); got != 3 {
			t.Errorf("wave 0: at most %d deployments at once, want 3 (parallel 3)", got)
		}
		var waves []string
		for _, e := range h.events(r.ID) {
			if e.Type == runs.EventWaveStarted {
				waves = append(waves, e.Message)
			}
		}
		want := []string{"wave 1 of 3: w-a, w-b, w-c", "wave 2 of 3: w-d, w-e", "wave 3 of 3: w-f"}
		if !slices.Equal(waves, want) {
			t.Errorf("wave events: got %q, want %q", waves, want)
		}
		if s := stepOf(t, r, runs.Phase2, "w-f"); s.Wave != 2 {
			t.Errorf("step w-f: wave %d, want 2", s.Wave)
		}
	})
}

// Coolify builds at most concurrent_builds at once; deployments beyond it wait in its queue.
// With parallel above it, the run still succeeds, and the fake never runs more than
// concurrent_builds.
func TestPhase2ParallelAboveConcurrentBuildsQueues(t *testing.T) {
	// Deployments of a second: the third of a wave is asked for while the first two still
	// build, however slowly the machine schedules the wave's goroutines.
	h := wavesHarness(t, "sqlite", 2, time.Second)
	h.start(h.wavesYAML("waves", 3, false))
	r := h.wait(h.submit("waves", orchestrator.Trigger{Build: "7", ImageTag: "v2"}))
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s: %s (%s)", r.ID, r.Status, r.Reason)
	}
	hist := h.coolify.History()
	if got := coolifytest.MaxInProgress(hist.Spans); got != 2 {
		t.Errorf("at most %d deployments in progress at once, want concurrent_builds 2", got)
	}
	queuedLong := 0
	for _, s := range hist.Spans {
		if s.Start.Sub(s.Queued) >= 100*time.Millisecond {
			queuedLong++
		}
	}
	if queuedLong == 0 {
		t.Error("no deployment waited in Coolify's queue for a build slot")
	}
}

// Two runs of pipelines over the same services, listing them in opposite orders, with
// parallel deploys and a Phase 1 that can overlap the other's Phase 2: neither deadlocks (each
// goroutine holds one service lock at a time, after the phase lock), and the fake's log shows
// one mutator per application at a time.
func TestWavesOfTwoRunsDoNotDeadlock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := wavesHarness(t, backend, 4, 100*time.Millisecond)
		h.start(h.wavesYAML("forward", 3, false), h.wavesYAML("backward", 3, true))
		ids := []string{
			h.submit("forward", orchestrator.Trigger{Build: "1", ImageTag: "v2"}),
			h.submit("backward", orchestrator.Trigger{Build: "1", ImageTag: "v3"}),
		}
		for _, id := range ids {
			if r := h.wait(id); r.Status != runs.StatusSucceeded && r.Status != runs.StatusSuperseded {
				t.Errorf("run %s (%s): %s (%s)", r.ID, r.Pipeline, r.Status, r.Reason)
			}
		}
		checkExclusive(t, h.coolify.History())
	})
}

// A failure in a wave lets the other services of that wave finish, starts no later wave, and
// rolls back every failed service; the reason says which waves ran.
func TestWaveFailureStopsLaterWaves(t *testing.T) {
	h := wavesHarness(t, "sqlite", 4, 100*time.Millisecond)
	h.coolify.SetDeployOutcome(waveUUID("w-d"), coolifytest.Fail)
	h.start(h.wavesYAML("waves", 3, false))
	r := h.wait(h.submit("waves", orchestrator.Trigger{Build: "7", ImageTag: "v2"}))
	if r.Status != runs.StatusFailed {
		t.Fatalf("run %s: %s (%s), want failed", r.ID, r.Status, r.Reason)
	}
	if !strings.Contains(r.Reason, "wave 2 of 3 (waves 3 to 3 not started)") {
		t.Errorf("reason %q does not say which waves ran", r.Reason)
	}
	if s := stepOf(t, r, runs.Phase2, "w-e"); s.Status != runs.StepHealthy {
		t.Errorf("w-e (same wave as the failed w-d): %s, want healthy", s.Status)
	}
	if s := stepOf(t, r, runs.Phase2, "w-f"); s.Status.Done() && s.Status != runs.StepSkipped {
		t.Errorf("w-f (later wave): %s, want not deployed", s.Status)
	}
	if n := len(h.coolify.Deployments(waveUUID("w-f"))); n != 0 {
		t.Errorf("w-f: %d deployments, want none (its wave never started)", n)
	}
	if s := stepOf(t, r, runs.Phase1, "w-f"); s.Status != runs.StepRestored {
		t.Errorf("w-f phase 1: %s, want restored (synced, never deployed)", s.Status)
	}
	if a, _ := h.coolify.App(waveUUID("w-d")); a.ImageTag != "v1" {
		t.Errorf("w-d image tag %q after rollback, want v1", a.ImageTag)
	}
}

// checkExclusive can see the failures it looks for: two overlapping writes to one
// application, one lease acting on two.
func TestCheckExclusiveSeesOverlap(t *testing.T) {
	t0 := time.Now()
	call := func(fence string, from, to int) coolifytest.Call {
		return coolifytest.Call{Method: "POST", Path: "/api/v1/deploy", Apps: []string{"app-1"}, Fence: fence, Handled: 200,
			Start: t0.Add(time.Duration(from) * time.Millisecond), End: t0.Add(time.Duration(to) * time.Millisecond)}
	}
	ft := &testing.T{}
	checkExclusive(ft, coolifytest.History{Calls: []coolifytest.Call{call("1", 0, 10), call("2", 5, 15)}})
	if !ft.Failed() {
		t.Error("two overlapping deploys of one app passed the check")
	}
	stray := &testing.T{}
	checkExclusive(stray, coolifytest.History{Calls: []coolifytest.Call{call("1", 0, 10), {Method: "GET", Apps: []string{"app-2"}, Fence: "1", Start: t0, End: t0}}})
	if !stray.Failed() {
		t.Error("one lease acting on two apps passed the check")
	}
	ok := &testing.T{}
	checkExclusive(ok, coolifytest.History{Calls: []coolifytest.Call{call("1", 0, 10), call("2", 10, 15)}})
	if ok.Failed() {
		t.Error("two deploys one after the other failed the check")
	}
}

// The plan shows the waves in the order they would run, and the parallelism.
func TestPlanShowsWaves(t *testing.T) {
	h := wavesHarness(t, "sqlite", 2, 50*time.Millisecond)
	h.start(h.wavesYAML("waves", 3, true))
	plan, err := h.engine.Plan(t.Context(), "waves", orchestrator.Trigger{Build: "7", ImageTag: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"w-c", "w-b", "w-a"}, {"w-e", "w-d"}, {"w-f"}}
	if !slices.EqualFunc(plan.Waves, want, slices.Equal) || plan.Parallel != 3 {
		t.Errorf("plan: waves %q parallel %d, want %q parallel 3", plan.Waves, plan.Parallel, want)
	}
}

// panicOnDeploy is an Observer with a bug: it panics on the first Phase-2 step while armed.
type panicOnDeploy struct{ armed atomic.Bool }

func (*panicOnDeploy) RunEnded(string, runs.Status)                {}
func (*panicOnDeploy) PhaseDone(string, runs.Phase, time.Duration) {}
func (*panicOnDeploy) RunTakenOver(string, bool)                   {}
func (*panicOnDeploy) DeploymentStillBuilding(string)              {}
func (o *panicOnDeploy) StepDone(_ string, phase runs.Phase, _ runs.StepStatus, _ time.Duration) {
	if phase == runs.Phase2 && o.armed.CompareAndSwap(true, false) {
		panic("observer bug")
	}
}

// A panic in one of a wave's goroutines fails the run, naming the panic, once the wave's other
// services have ended; the engine goes on and the next run succeeds.
func TestPanicInWaveGoroutineFailsTheRun(t *testing.T) {
	h := wavesHarness(t, "sqlite", 4, 50*time.Millisecond)
	obs := &panicOnDeploy{}
	obs.armed.Store(true)
	h.observer = obs
	h.start(h.wavesYAML("waves", 3, false))
	r := h.wait(h.submit("waves", orchestrator.Trigger{Build: "7", ImageTag: "v2"}))
	if r.Status != runs.StatusFailed || !strings.Contains(r.Reason, "observer bug") {
		t.Errorf("run: %s (%q), want failed naming the panic", r.Status, r.Reason)
	}
	if n := len(h.coolify.Deployments(waveUUID("w-f"))); n != 0 {
		t.Errorf("w-f: %d deployments after wave 1 panicked, want none", n)
	}
	if r := h.wait(h.submit("waves", orchestrator.Trigger{Build: "8", ImageTag: "v3"})); r.Status != runs.StatusSucceeded {
		t.Errorf("next run: %s (%s), want succeeded", r.Status, r.Reason)
	}
}
