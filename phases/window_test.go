package phases_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// steppingClock returns first on its first call and then on every later one: the deploy
// window gate asks it once before Phase 1 and once before Phase 2, so the window can close
// between the phases without a test racing the run.
func steppingClock(first, then time.Time) func() time.Time {
	var mu sync.Mutex
	calls := 0
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return first
		}
		return then
	}
}

// freezeFrom is a pipeline's windows block with one freeze from `from` for a day.
func freezeFrom(from time.Time, outside string) string {
	return "windows:\n  outside: " + outside + "\n  freezes:\n    - { from: \"" + from.UTC().Format(time.RFC3339) +
		"\", to: \"" + from.Add(24*time.Hour).UTC().Format(time.RFC3339) + "\", reason: launch day }\n"
}

// Issue 36, item 3: a run that passed the window gate before Phase 1 is asked again before
// Phase 2; when a freeze opened meanwhile it does not deploy inside it (outside: fail): it
// fails saying so, restores what Phase 1 wrote and starts no deployment.
func TestDenyWindowOpenedAfterPhase1StopsPhase2(t *testing.T) {
	h := newHarness(t)
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	h.now = steppingClock(t0, t0.Add(2*time.Hour))
	h.start(h.pipelineYAML("prod", []string{"api"}, freezeFrom(t0.Add(time.Hour), "fail")))
	id := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	r := h.wait(id)
	if r.Status != runs.StatusFailed || !strings.Contains(r.Reason, "outside the deploy windows before phase2") || !strings.Contains(r.Reason, "launch day") {
		t.Fatalf("run: %s (%s), want failed outside the windows before phase 2", r.Status, r.Reason)
	}
	if ds := h.coolify.Deployments(uuidAPI); len(ds) != 0 {
		t.Errorf("deployments started inside the freeze: %+v", ds)
	}
	if app, _ := h.coolify.App(uuidAPI); app.ImageTag != "v1" {
		t.Errorf("api's image tag after the run: %q, want v1 restored", app.ImageTag)
	}
	synced := false
	for _, ev := range h.events(id) {
		synced = synced || ev.Type == runs.EventServiceSynced
		if ev.Type == runs.EventPhaseStarted && ev.Phase == runs.Phase2 {
			t.Errorf("phase 2 started: %+v", ev)
		}
	}
	if !synced {
		t.Error("phase 1 did not sync the service: the test did not reach the second gate")
	}
}

// Issue 36, item 3: a run outside its windows under outside: wait waits, saying until when,
// holding no lock, between the phases as before Phase 1; a cancel ends the wait.
func TestRunWaitsForTheWindowHoldingNoLock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
		h.now = steppingClock(t0, t0.Add(2*time.Hour))
		h.start(h.pipelineYAML("prod", []string{"api"}, freezeFrom(t0.Add(time.Hour), "wait")))
		id := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
		ev := h.waitEvent(id, runs.EventWindowClosed, "")
		if want := t0.Add(25 * time.Hour).Format(time.RFC3339); ev.Phase != runs.Phase2 || ev.Data[runs.DataUntil] != want ||
			!strings.Contains(ev.Message, "waiting, holding no lock") {
			t.Errorf("window.closed: %+v, want phase 2, until %s", ev, want)
		}
		held, err := h.locker.List(context.Background(), "coolify:")
		if err != nil {
			t.Fatal(err)
		}
		if len(held) != 0 {
			t.Errorf("a run waiting for its window holds %+v", held)
		}
		if _, err := h.engine.Cancel(context.Background(), id, "api:ops", "not today"); err != nil {
			t.Fatal(err)
		}
		if r := h.wait(id); r.Status != runs.StatusCanceled {
			t.Errorf("run after cancel: %s (%s)", r.Status, r.Reason)
		}
		if ds := h.coolify.Deployments(uuidAPI); len(ds) != 0 {
			t.Errorf("deployments started: %+v", ds)
		}
	})
}

// Issue 36, item 3: plan shows the windows' verdict; outside them it is a problem saying
// what a run would do, so `plan` exits non-zero.
func TestPlanShowsTheWindowVerdict(t *testing.T) {
	h := newHarness(t)
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	h.now = func() time.Time { return t0 }
	h.start(h.pipelineYAML("open", []string{"api"}, freezeFrom(t0.Add(time.Hour), "fail")),
		h.pipelineYAML("frozen", []string{"worker"}, freezeFrom(t0.Add(-time.Hour), "wait")))
	p, err := h.engine.Plan(context.Background(), "open", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Window != "inside the deploy windows" || p.WouldFail {
		t.Errorf("plan inside the windows: window %q, problems %v", p.Window, p.Problems)
	}
	p, err = h.engine.Plan(context.Background(), "frozen", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	until := t0.Add(23 * time.Hour).Format(time.RFC3339)
	if !strings.Contains(p.Window, "launch day") || !strings.Contains(p.Window, "until "+until) || !p.WouldFail ||
		len(p.Problems) != 1 || !strings.Contains(p.Problems[0], "a run would wait, holding no lock") {
		t.Errorf("plan in a freeze: window %q, problems %v", p.Window, p.Problems)
	}
}

// Issue 36, item 3: with override_second_person, an override of the windows by one person
// only asks: the run keeps waiting, the same person asking again is refused, an override
// without a reason is refused; a second person's override lets the run go ahead at once.
func TestWindowOverrideNeedsASecondPerson(t *testing.T) {
	h := newHarness(t)
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	h.now = func() time.Time { return t0 }
	h.start(h.pipelineYAML("prod", []string{"api"}, freezeFrom(t0.Add(-time.Hour), "wait")+"  override_second_person: true\n"))
	id := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	if ev := h.waitEvent(id, runs.EventWindowClosed, ""); ev.Phase != runs.Phase1 {
		t.Fatalf("window.closed: %+v, want before phase 1", ev)
	}
	ctx := context.Background()
	if _, _, err := h.engine.OverrideWindow(ctx, id, "api:ops", ""); !errors.Is(err, orchestrator.ErrInvalid) {
		t.Errorf("override without a reason: %v, want ErrInvalid", err)
	}
	if _, granted, err := h.engine.OverrideWindow(ctx, id, "api:ops", "hotfix for INC-7"); err != nil || granted {
		t.Fatalf("first override: granted %v, %v; want asked, not granted", granted, err)
	}
	if _, granted, err := h.engine.OverrideWindow(ctx, id, "api:ops", "really"); !errors.Is(err, orchestrator.ErrSecondPerson) || granted {
		t.Errorf("the same person again: granted %v, %v; want ErrSecondPerson", granted, err)
	}
	if r, err := h.store.Get(ctx, id); err != nil || r.Status.Terminal() || wrote(h) {
		t.Fatalf("after one person's override the run went on: %s, %v", r.Status, err)
	}
	if _, granted, err := h.engine.OverrideWindow(ctx, id, "api:alice", "confirmed"); err != nil || !granted {
		t.Fatalf("second person's override: granted %v, %v", granted, err)
	}
	if r := h.wait(id); r.Status != runs.StatusSucceeded {
		t.Fatalf("run after the override: %s (%s)", r.Status, r.Reason)
	}
	var by []string
	for _, ev := range h.events(id) {
		if ev.Type == runs.EventWindowOverride {
			by = append(by, ev.Data[runs.DataBy]+": "+ev.Data[runs.DataReason])
		}
	}
	if strings.Join(by, ", ") != "api:ops: hotfix for INC-7, api:alice: confirmed" {
		t.Errorf("window.override events: %v", by)
	}
}

// wrote reports whether the fake Coolify saw any write.
func wrote(h *harness) bool {
	for _, r := range h.coolify.Requests() {
		if r.Method != "GET" {
			return true
		}
	}
	return false
}
