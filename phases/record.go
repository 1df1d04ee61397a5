package phases

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// finalWriteTimeout bounds the store writes that record how a run ended, which must happen
// even when the run's own context is gone.
const finalWriteTimeout = 15 * time.Second

// Pauses between two tries of a run-record write that found the store unavailable: the
// first, doubled after each try up to the last.
const (
	storeRetryFirst = 100 * time.Millisecond
	storeRetryMax   = 2 * time.Second
)

// recorder owns every write of one run's record: a change of the run with the events that
// say so, changes queued to go with the next write, and the run's end. Writes are retried
// while the store is unavailable (a Redis failover refuses writes for a few seconds, and one
// refused write must not leave a run recorded in a phase after it ended). Once the run is no
// longer this daemon's (owned reports why), it writes nothing more: the run is its takeover's.
type recorder struct {
	store runs.Store
	id    string
	log   *slog.Logger
	owned func() error

	mu      sync.Mutex
	pending []record
}

// record is a change of the run record and its events.
type record struct {
	fn  func(*runs.Run)
	evs []runs.Event
}

// write applies fn to the stored run and appends evs, trying again while the store is
// unavailable (runs.ErrUnavailable) until ctx ends.
func (rc *recorder) write(ctx context.Context, fn func(*runs.Run) error, evs ...runs.Event) (runs.Run, error) {
	pause := storeRetryFirst
	for {
		if err := rc.owned(); err != nil {
			return runs.Run{}, err
		}
		r, err := rc.store.Update(ctx, rc.id, fn, evs...)
		if err == nil || !errors.Is(err, runs.ErrUnavailable) {
			return r, err
		}
		if ctxtime.Sleep(ctx, pause) != nil {
			return r, err
		}
		pause = min(2*pause, storeRetryMax)
	}
}

// update applies fn to the stored run (after the queued changes) and appends events; a
// failure is logged, not fatal: the run's record lags, the work goes on.
func (rc *recorder) update(fn func(*runs.Run), evs ...runs.Event) {
	ctx, cancel := context.WithTimeout(context.Background(), finalWriteTimeout)
	defer cancel()
	fn, evs = rc.withPending(fn, evs)
	_, err := rc.write(ctx, func(r *runs.Run) error { fn(r); return nil }, evs...)
	if err != nil && !errors.Is(err, runs.ErrEnded) && !errors.Is(err, ErrNotOwned) {
		rc.log.LogAttrs(ctx, slog.LevelWarn, "run record not updated", slog.String(logError, err.Error()))
	}
}

// later queues a change that need not be stored at once because another write follows
// closely (a lock release, before the step's outcome or the next step's lock): it is written
// with the run's next store write, before that write's own change, its events keeping the
// time they were queued. Every store write rewrites the whole run.
func (rc *recorder) later(fn func(*runs.Run), evs ...runs.Event) {
	now := time.Now().UTC()
	for i := range evs {
		if evs[i].At.IsZero() {
			evs[i].At = now
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.pending = append(rc.pending, record{fn: fn, evs: evs})
}

// withPending takes the queued changes: fn and evs preceded by them. fn may be nil.
func (rc *recorder) withPending(fn func(*runs.Run), evs []runs.Event) (func(*runs.Run), []runs.Event) {
	rc.mu.Lock()
	queued := rc.pending
	rc.pending = nil
	rc.mu.Unlock()
	var all []runs.Event
	for _, q := range queued {
		all = append(all, q.evs...)
	}
	return func(r *runs.Run) {
		for _, q := range queued {
			q.fn(r)
		}
		if fn != nil {
			fn(r)
		}
	}, append(all, evs...)
}

// step changes one step of the run record.
func (rc *recorder) step(phase runs.Phase, name string, fn func(*runs.Step), evs ...runs.Event) {
	rc.update(withStep(phase, name, fn), evs...)
}

// status sets the run's status.
func (rc *recorder) status(st runs.Status, evs ...runs.Event) {
	rc.update(func(r *runs.Run) { r.Status = st }, evs...)
}

// fail records a step that failed with err.
func (rc *recorder) fail(phase runs.Phase, name string, err error) {
	rc.step(phase, name, func(step *runs.Step) {
		step.Status, step.EndedAt, step.Error = runs.StepFailed, time.Now().UTC(), err.Error()
	}, runs.Event{Type: runs.EventServiceFailed, Phase: phase, Service: name, Message: err.Error()})
}

// event appends events without changing the run.
func (rc *recorder) event(evs ...runs.Event) { rc.update(func(*runs.Run) {}, evs...) }

// end records the run's final status and reason, with left (when not nil), every step not
// done marked skipped, and the end event, and returns the run as written. It is the one
// write a run cannot do without (a record left running while its daemon lives is never
// taken over): it is retried through a store failover for finalWriteTimeout.
func (rc *recorder) end(status runs.Status, reason string, left []runs.Left) (runs.Run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), finalWriteTimeout)
	defer cancel()
	now := time.Now().UTC()
	pending, evs := rc.withPending(nil, []runs.Event{{Type: runs.EndEvent(status), Message: reason}})
	return rc.write(ctx, func(r *runs.Run) error {
		pending(r)
		r.Status, r.Reason, r.EndedAt, r.HeldLocks, r.Waiting = status, reason, now, nil, nil
		if left != nil {
			r.Left = left
		}
		for i := range r.Steps {
			if !r.Steps[i].Status.Done() {
				r.Steps[i].Status = runs.StepSkipped
			}
		}
		return nil
	}, evs...)
}

// withStep returns an update that applies fn to one step of the run (added if missing).
func withStep(phase runs.Phase, name string, fn func(*runs.Step)) func(*runs.Run) {
	return func(r *runs.Run) {
		s := r.Step(phase, name)
		if s == nil {
			r.SetStep(runs.Step{Phase: phase, Name: name})
			s = r.Step(phase, name)
		}
		fn(s)
	}
}

// createRun creates run in (as Store.Create), trying again while the store is unavailable,
// for up to finalWriteTimeout: a Redis failover refuses writes for a few seconds, and with
// locks.min_replicas a creation the replicas did not confirm is reported unavailable although
// it may have been written. The run's ID is fixed before the first try, so that every try is
// the same run: a try that finds it written (by an earlier try whose answer said unavailable)
// confirms it by rewriting it unchanged, and one that finds it gone (lost in a failover)
// writes it again. Without this, a creation written but not confirmed would stay queued under
// a daemon that answered 503 and never runs it.
func (e *Engine) createRun(ctx context.Context, in runs.Run) (runs.Run, bool, error) {
	in.CreatedAt = time.Now().UTC()
	in.ID = runs.NewID(in.CreatedAt)
	ctx, cancel := context.WithTimeout(ctx, finalWriteTimeout)
	defer cancel()
	pause := storeRetryFirst
	for {
		r, created, err := e.d.Store.Create(ctx, in)
		if errors.Is(err, runs.ErrConflict) || (err == nil && !created && r.ID == in.ID) {
			// Written by an earlier try (its ID, or its idempotency key naming it).
			r, err = e.d.Store.Update(ctx, in.ID, func(*runs.Run) error { return nil })
			created = err == nil
		}
		if err == nil || !errors.Is(err, runs.ErrUnavailable) {
			return r, created, err
		}
		if ctxtime.Sleep(ctx, pause) != nil {
			return r, false, err
		}
		pause = min(2*pause, storeRetryMax)
	}
}
