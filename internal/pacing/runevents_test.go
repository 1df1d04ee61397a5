package pacing

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// recordingStore records the events appended, in order; the rest of runs.Store is not used.
type recordingStore struct {
	runs.Store
	mu  sync.Mutex
	evs []runs.Event
}

func (s *recordingStore) Append(_ context.Context, _ string, evs ...runs.Event) ([]runs.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, evs...)
	return evs, nil
}

func (s *recordingStore) types() []runs.EventType {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []runs.EventType
	for _, e := range s.evs {
		out = append(out, e.Type)
	}
	return out
}

// The waits of a run's calls become one coolify.paced event, written before the event that
// ends the run even when the interval has not passed; waits outside a run count for none.
func TestRunEventsWritesTheSumBeforeTheRunEnds(t *testing.T) {
	st := &recordingStore{}
	e := NewRunEvents(st, time.Hour, slog.New(slog.DiscardHandler))
	defer e.Stop()
	ctx := trace.With(context.Background(), "run-1", 7)
	e.OnWait(ctx, Wait{Waited: 300 * time.Millisecond})
	e.OnWait(ctx, Wait{Waited: 500 * time.Millisecond, Priority: outbound.PriorityHigh})
	e.OnWait(context.Background(), Wait{Waited: time.Second}) // no run
	if _, err := e.Store(st).Append(ctx, "run-1", runs.Event{Type: runs.EventRunSucceeded}); err != nil {
		t.Fatal(err)
	}
	got := st.types()
	if len(got) != 2 || got[0] != runs.EventCoolifyPaced || got[1] != runs.EventRunSucceeded {
		t.Fatalf("events: %v, want coolify.paced then run.succeeded", got)
	}
	paced := st.evs[0]
	if paced.Data[runs.DataCalls] != "2" || paced.Data[runs.DataPriorityCalls] != "1" ||
		paced.Data[runs.DataWaitedMS] != "800" || paced.Data[runs.DataLongestMS] != "500" {
		t.Errorf("paced event: %+v", paced)
	}
}
