package pacing_test

import (
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/pacing"
)

// Waits are summed per run into one report per interval; Stop reports what is open.
func TestTallyCoalescesPerRun(t *testing.T) {
	reports := make(chan struct {
		id string
		s  pacing.Summary
	}, 10)
	tally := pacing.NewTally(20*time.Millisecond, func(id string, s pacing.Summary) {
		reports <- struct {
			id string
			s  pacing.Summary
		}{id, s}
	})
	tally.Add("r1", pacing.Wait{Priority: outbound.PriorityNormal, Waited: 100 * time.Millisecond})
	tally.Add("r1", pacing.Wait{Priority: outbound.PriorityHigh, Waited: 300 * time.Millisecond})
	tally.Add("", pacing.Wait{Waited: time.Second})
	got := <-reports
	want := pacing.Summary{Calls: 2, Priority: 1, Total: 400 * time.Millisecond, Longest: 300 * time.Millisecond}
	if got.id != "r1" || got.s != want {
		t.Fatalf("report %s %+v, want r1 %+v", got.id, got.s, want)
	}
	tally.Add("r2", pacing.Wait{Waited: time.Millisecond})
	tally.Add("r4", pacing.Wait{Waited: 2 * time.Millisecond})
	tally.Flush("r4") // reports before it returns
	select {
	case got = <-reports:
		if got.id != "r4" || got.s.Total != 2*time.Millisecond {
			t.Fatalf("Flush(r4) reported %s %+v", got.id, got.s)
		}
	default:
		t.Fatal("Flush(r4) returned before reporting")
	}
	tally.Stop()
	tally.Add("r3", pacing.Wait{Waited: time.Millisecond})
	got = <-reports
	if got.id != "r2" || got.s.Calls != 1 {
		t.Fatalf("after Stop: %s %+v, want r2 with one call", got.id, got.s)
	}
}
