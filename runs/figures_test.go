package runs_test

import (
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

func TestDeliveryFigures(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	run := func(pipeline string, created time.Duration, took time.Duration, st runs.Status, rollback, deployed bool) runs.Run {
		c := now.Add(-created)
		r := runs.Run{Pipeline: pipeline, Status: st, CreatedAt: c, StartedAt: c, EndedAt: c.Add(took), Trigger: orchestrator.Trigger{Rollback: rollback}}
		if deployed {
			r.Steps = []runs.Step{{Phase: runs.Phase2, Name: "api", DeploymentUUID: "d"}}
		}
		return r
	}
	rs := []runs.Run{
		run("prod", 6*day, 10*time.Minute, runs.StatusSucceeded, false, true),
		run("prod", 5*day, 20*time.Minute, runs.StatusFailed, false, true),              // failed after deploying
		run("prod", 5*day-time.Hour, 30*time.Minute, runs.StatusSucceeded, false, true), // restores it
		run("prod", 4*day, 5*time.Minute, runs.StatusFailed, false, false),              // failed before deploying: not a change
		run("prod", 3*day, 4*time.Minute, runs.StatusSucceeded, false, true),
		run("prod", 2*day, 6*time.Minute, runs.StatusSucceeded, true, true), // a rollback: the run before failed
		run("prod", 10*day, time.Minute, runs.StatusSucceeded, false, true), // before the window
		run("web", day, 2*time.Minute, runs.StatusSuperseded, false, false),
	}
	got := runs.DeliveryFigures(rs, 7, now)
	if len(got) != 2 || got[0].Pipeline != "prod" || got[1].Pipeline != "web" {
		t.Fatalf("figures = %+v, want prod and web", got)
	}
	p := got[0]
	if p.Deployments != 4 || p.PerDay != 4.0/7 || p.Changes != 5 || p.Failures != 2 || p.ChangeFailureRate != 0.4 {
		t.Errorf("prod = %+v, want 4 deployments (4/7 a day), 5 changes, 2 failures (rate 0.4)", p)
	}
	if p.LeadTime != 8*time.Minute { // median of 10, 30, 4, 6 minutes
		t.Errorf("lead time %s, want 8m", p.LeadTime)
	}
	// The failed run ended 20m after its start (5d ago); the next success, begun 1h after it,
	// ended 30m later: restored in 70m. The rollback restored in its own 6m: median 38m.
	if p.TimeToRestore != 38*time.Minute {
		t.Errorf("time to restore %s, want 38m (the median of 70m and 6m)", p.TimeToRestore)
	}
	if w := got[1]; w.Deployments != 0 || w.Changes != 0 || w.ChangeFailureRate != 0 {
		t.Errorf("web = %+v, want nothing deployed", w)
	}
}
