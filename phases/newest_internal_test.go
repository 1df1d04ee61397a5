package phases

import (
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Which mark makes a run stale, per order.
func TestStandingOlderThanMark(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	run := func(order config.Order, build string, created time.Time) standing {
		p := &config.Pipeline{Name: "prod", Order: order}
		return standingOf(p, runs.Run{Pipeline: "prod", Trigger: orchestrator.Trigger{Build: build}, CreatedAt: created})
	}
	mark := func(pipeline, build string, created time.Time) runs.Mark {
		return runs.Mark{Pipeline: pipeline, Build: build, RunCreated: created, RunID: "r"}
	}
	tests := []struct {
		name string
		s    standing
		m    runs.Mark
		want bool
	}{
		{"default order, newer build", run("", "4", t0), mark("prod", "5", t0), true},
		{"default order, builds compare as numbers", run("", "9", t0), mark("prod", "10", t0), true},
		{"default order, older build", run("", "6", t0), mark("prod", "5", t0), false},
		{"default order, same build (a retry)", run("", "5", t0), mark("prod", "5", t0), false},
		{"default order, non-numeric build orders nothing", run("", "abc", t0), mark("prod", "5", t0), false},
		{"mark without a numeric build", run("", "4", t0), mark("prod", "main-7", t0), false},
		{"another pipeline's mark", run("", "4", t0), mark("other", "5", t0), false},
		{"order none", run(config.OrderNone, "4", t0), mark("prod", "5", t0), false},
		{"order created, later run on it", run(config.OrderCreated, "9", t0), mark("prod", "1", t0.Add(time.Second)), true},
		{"order created, earlier run on it", run(config.OrderCreated, "1", t0.Add(time.Second)), mark("prod", "9", t0), false},
		{"order created, unknown creation", run(config.OrderCreated, "1", t0), mark("prod", "9", time.Time{}), false},
	}
	for _, tt := range tests {
		if got := tt.s.olderThanMark(tt.m); got != tt.want {
			t.Errorf("%s: olderThanMark = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Which pending run survives a later submission under the supersede policy.
func TestStandingOutranks(t *testing.T) {
	s := func(order config.Order, build string, rollback bool) standing {
		return standing{order: order.Effective(build), build: build, rollback: rollback}
	}
	tests := []struct {
		name             string
		pending, arrival standing
		want             bool
	}{
		{"newer build pending", s("", "5", false), s("", "4", false), true},
		{"older build pending", s("", "3", false), s("", "4", false), false},
		{"a rollback arrives", s("", "5", false), s("", "4", true), false},
		{"order created: the later submission wins", s(config.OrderCreated, "5", false), s(config.OrderCreated, "4", false), false},
		{"order none", s(config.OrderNone, "5", false), s(config.OrderNone, "4", false), false},
	}
	for _, tt := range tests {
		if got := tt.pending.outranks(tt.arrival); got != tt.want {
			t.Errorf("%s: outranks = %v, want %v", tt.name, got, tt.want)
		}
	}
}
