package pacing

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// RunEvents tells each run how long its Coolify calls waited for the rate budget: the waits
// of calls made under a run's trace (coolify.WithTrace) are summed (Tally) into
// coolify.paced events of that run, at most one per interval. The run store it wraps (Store)
// writes a run's open sum before the event that ends the run, so the sum never follows the
// run's last word; Stop writes every sum still open.
type RunEvents struct {
	tally *Tally
}

// NewRunEvents returns a RunEvents writing its events to store, logging at debug level an
// event it could not write (the run goes on without it).
func NewRunEvents(store runs.Store, interval time.Duration, log *slog.Logger) *RunEvents {
	return &RunEvents{tally: NewTally(interval, func(runID string, s Summary) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := store.Append(ctx, runID, pacedEvent(s)); err != nil {
			log.LogAttrs(ctx, slog.LevelDebug, "coolify.paced event not written",
				slog.String(logkey.RunID, runID), slog.String(logkey.Error, err.Error()))
		}
	})}
}

// pacedEvent is the coolify.paced event of a run's summed waits.
func pacedEvent(s Summary) runs.Event {
	return runs.Event{Type: runs.EventCoolifyPaced,
		Message: fmt.Sprintf("%d Coolify calls waited %s for the rate budget (longest %s, %d priority)",
			s.Calls, s.Total.Round(time.Millisecond), s.Longest.Round(time.Millisecond), s.Priority),
		Data: map[string]string{
			runs.DataCalls: strconv.Itoa(s.Calls), runs.DataPriorityCalls: strconv.Itoa(s.Priority),
			runs.DataWaitedMS: strconv.FormatInt(s.Total.Milliseconds(), 10), runs.DataLongestMS: strconv.FormatInt(s.Longest.Milliseconds(), 10),
		}}
}

// OnWait counts a wait toward the run of ctx's trace; it is the pool's Options.OnWait.
func (e *RunEvents) OnWait(ctx context.Context, w Wait) {
	if runID, _, ok := trace.From(ctx); ok {
		e.tally.Add(runID, w)
	}
}

// Store returns st writing a run's open sum first when the events it is given end the run:
// the engine's run store.
func (e *RunEvents) Store(st runs.Store) runs.Store { return pacedStore{Store: st, tally: e.tally} }

// Stop writes every open sum and ignores later waits.
func (e *RunEvents) Stop() { e.tally.Stop() }

// pacedStore is a run store that, before it writes the event that ends a run, has the run's
// open coolify.paced sum written, so that sum never follows the run's last word.
type pacedStore struct {
	runs.Store
	tally *Tally
}

func (s pacedStore) flushBeforeEnd(id string, evs []runs.Event) {
	for _, ev := range evs {
		if ev.Type.EndsRun() {
			s.tally.Flush(id)
			return
		}
	}
}

// Update flushes the run's paced sum first when evs end the run.
func (s pacedStore) Update(ctx context.Context, id string, fn func(*runs.Run) error, evs ...runs.Event) (runs.Run, error) {
	s.flushBeforeEnd(id, evs)
	return s.Store.Update(ctx, id, fn, evs...)
}

// Append flushes the run's paced sum first when evs end the run.
func (s pacedStore) Append(ctx context.Context, id string, evs ...runs.Event) ([]runs.Event, error) {
	s.flushBeforeEnd(id, evs)
	return s.Store.Append(ctx, id, evs...)
}
