package phases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/tracing"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// stepLock is one lock a step of a run takes: its key, the phase and step it is taken for,
// and whether it is a phase lock (the phase's budget and holder; its events name no
// service). When start is set, the step's own status follows the wait: waiting_lock (with
// start) while it waits, running (with the wait and the fence) once granted.
type stepLock struct {
	key      string
	phase    runs.Phase
	step     string
	phaseKey bool
	start    time.Time
}

// serviceLock is the lock of service s in a phase; start as in stepLock (zero for a lock no
// step status follows, such as a restore's).
func serviceLock(phase runs.Phase, s config.Service, start time.Time) stepLock {
	return stepLock{key: s.LockKey(), phase: phase, step: s.Name, start: start}
}

// phaseLock is the lock of a phase (coolify:phase1, coolify:phase2).
func phaseLock(phase runs.Phase, key string) stepLock {
	return stepLock{key: key, phase: phase, step: string(phase), phaseKey: true}
}

// mobileLock is the lock of mobile step m's feature; start as in stepLock.
func mobileLock(m config.MobileStep, start time.Time) stepLock {
	return stepLock{key: m.LockKey(), phase: runs.PhaseMobile, step: m.Name, start: start}
}

// service is what the lock's events name as the service: none for a phase lock.
func (sl stepLock) service() string {
	if sl.phaseKey {
		return ""
	}
	return sl.step
}

// leases takes and gives back the locks of one run's steps, and records each wait, grant,
// release and loss in the run's record (rec), with the keys the run holds.
type leases struct {
	locker *locks.Locker
	rec    *recorder
	run    runs.Run         // holder IDs and messages name its pipeline, build and ID
	p      *config.Pipeline // budgets, TTL, on_frozen
	log    *slog.Logger
	// watch announces a wait that lasts past the pipeline's threshold; it returns the
	// function that ends the watch (watchLockWait).
	watch func(key string, start time.Time) (stop func())
}

// quickGrant is how long acquire waits for a grant before it records the wait on its own. A
// lock granted sooner has its wait and its grant recorded in one store write (both events,
// each with its own time): a store write rewrites the whole run, so an uncontended step costs
// one write here instead of four.
const quickGrant = 20 * time.Millisecond

// acquire takes sl, recording the wait and the grant in the event log (and on the step, when
// one follows). The wait is written when quickGrant passes without a grant (a live view then
// shows who waits), else together with the grant or the failure.
func (l *leases) acquire(ctx context.Context, sl stepLock) (*locks.Lease, error) {
	lease, record, err := l.take(ctx, sl)
	if err != nil {
		return nil, err
	}
	record()
	return lease, nil
}

// acquireReading is acquire for a service step whose next Coolify calls are reads: the grant
// is written to the store while the caller makes them. recorded waits for that write; the
// caller calls it before its first mutating call and before any other write of the run
// record (so the grant — the step running, the lock held — is stored before anything is
// changed, and the run's writes keep their order), and once more when the step ends (it
// waits only once).
func (l *leases) acquireReading(ctx context.Context, sl stepLock) (lease *locks.Lease, recorded func(), err error) {
	lease, record, err := l.take(ctx, sl)
	if err != nil {
		return nil, nil, err
	}
	return lease, inBackground(record), nil
}

// take takes sl's key and returns the lease and record, which writes the grant to the store.
// A wait or failure is recorded before it returns (see acquire).
func (l *leases) take(ctx context.Context, sl stepLock) (*locks.Lease, func(), error) {
	budget := l.p.Locks.Service
	if sl.phaseKey {
		budget = l.p.Locks.Phase
	}
	start := time.Now()
	waitEv := runs.Event{Type: runs.EventLockWaiting, Phase: sl.phase, Service: sl.service(), LockKey: sl.key, At: start.UTC()}
	waiting := func(r *runs.Run) {
		if !sl.start.IsZero() {
			withStep(sl.phase, sl.step, func(s *runs.Step) { s.Status, s.StartedAt = runs.StepWaitingLock, sl.start.UTC() })(r)
		}
	}
	endWatch := l.watch(sl.key, start)
	recorded := make(chan struct{})
	timer := time.AfterFunc(quickGrant, func() {
		defer close(recorded)
		ev := waitEv
		info, held := l.holder(ctx, sl.key)
		ev.Message = heldBy(info, held)
		w := waitOf(sl, start, info, held)
		l.rec.update(func(r *runs.Run) { waiting(r); r.Waiting = append(r.Waiting, w) }, ev)
	})
	actx, span := tracing.Child(ctx, "lock wait", trace.WithAttributes(tracing.LockKey.String(sl.key), tracing.Phase.String(string(sl.phase))))
	lease, err := l.locker.Acquire(actx, locks.Request{
		Key: sl.key, Holder: orchestrator.StepHolder(l.run.Pipeline, l.run.Trigger.Build, l.run.ID, sl.step), Owner: l.run.ID,
		Message:      fmt.Sprintf("run %s (%s) %s", l.run.ID, l.run.Pipeline, sl.phase),
		TTL:          l.p.Locks.TTL,
		Budget:       locks.Budget{Timeout: budget.Timeout, MaxRetries: budget.MaxRetries, Backoff: budget.Backoff},
		FailOnFrozen: l.p.Locks.OnFrozen == config.OnFrozenFail,
	})
	waited := time.Since(start)
	if err == nil {
		span.SetAttributes(tracing.LockFence.Int64(lease.Fence()))
	}
	endSpan(span, err)
	endWatch()
	var pending []runs.Event // the wait, unless the timer has recorded it
	if timer.Stop() {
		pending = append(pending, waitEv)
	} else {
		<-recorded
	}
	if err != nil {
		if pending != nil {
			l.rec.update(waiting, pending...)
		} else {
			l.rec.later(dropWait(sl)) // written with the failure the caller records
		}
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		return nil, nil, fmt.Errorf("acquire %q: %w", sl.key, err)
	}
	granted := append(pending, runs.Event{Type: runs.EventLockAcquired, Phase: sl.phase, Service: sl.service(), LockKey: sl.key,
		Fence: lease.Fence(), Message: fmt.Sprintf("waited %s", waited.Round(time.Millisecond))})
	return lease, func() {
		l.rec.update(func(r *runs.Run) {
			if pending != nil {
				waiting(r)
			}
			r.HeldLocks = append(r.HeldLocks, sl.key)
			dropWait(sl)(r)
			if !sl.start.IsZero() {
				withStep(sl.phase, sl.step, func(s *runs.Step) {
					s.Status, s.LockWait, s.Fence = runs.StepRunning, waited, lease.Fence()
				})(r)
			}
		}, granted...)
	}, nil
}

// heldByTimeout bounds heldBy's read: the wait is recorded without a holder rather than late.
const heldByTimeout = time.Second

// holder reads who holds key, for a wait that lasts; false when it cannot be read (the key
// was released meanwhile, or the backend did not answer in time).
func (l *leases) holder(ctx context.Context, key string) (locks.Info, bool) {
	ctx, cancel := context.WithTimeout(ctx, heldByTimeout)
	defer cancel()
	info, err := l.locker.Get(ctx, key)
	return info, err == nil
}

// heldBy says who holds a key (info, when held): "held by <holder> (<message>)", or for an
// operator freeze "frozen by <holder> until <time>: <message>"; "" when unknown.
func heldBy(info locks.Info, held bool) string {
	switch {
	case !held:
		return ""
	case info.Frozen:
		return fmt.Sprintf("frozen by %s until %s: %s", info.Holder, info.ExpiresAt.UTC().Format(time.RFC3339), info.Message)
	case info.Message != "":
		return fmt.Sprintf("held by %s (%s)", info.Holder, info.Message)
	}
	return "held by " + info.Holder
}

// waitOf is the run's record of sl's wait begun at start, on info (when held).
func waitOf(sl stepLock, start time.Time, info locks.Info, held bool) runs.Wait {
	w := runs.Wait{LockKey: sl.key, Phase: sl.phase, Step: sl.step, Since: start.UTC()}
	if !held {
		return w
	}
	w.Holder, w.Message, w.Frozen = info.Holder, info.Message, info.Frozen
	if info.Frozen {
		w.Until = info.ExpiresAt.UTC()
		return w
	}
	w.HeldSince, w.HolderRun = info.AcquiredAt.UTC(), runOfMessage(info.Message)
	return w
}

// runOfMessage is the run ID a step lease's message names ("run <id> (<pipeline>) <phase>",
// as take words it), or "".
func runOfMessage(msg string) string {
	rest, ok := strings.CutPrefix(msg, "run ")
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, " (")
	if !ok || strings.ContainsAny(id, " ") {
		return ""
	}
	return id
}

// dropWait removes sl's wait from the run's record.
func dropWait(sl stepLock) func(*runs.Run) {
	return func(r *runs.Run) {
		r.Waiting = slices.DeleteFunc(r.Waiting, func(w runs.Wait) bool { return w.LockKey == sl.key && w.Step == sl.step && w.Phase == sl.phase })
	}
}

// release gives a lease back and records (with the run's next store write, which follows at
// once in every caller) whether it was released or had been lost.
func (l *leases) release(lease *locks.Lease, sl stepLock) error {
	ctx, cancel := context.WithTimeout(context.Background(), finalWriteTimeout)
	defer cancel()
	err := lease.Release(ctx)
	ev := runs.Event{Type: runs.EventLockReleased, Phase: sl.phase, Service: sl.service(), LockKey: lease.Key(), Fence: lease.Fence()}
	if errors.Is(err, locks.ErrLost) {
		ev.Type, ev.Message = runs.EventLockLost, err.Error()
		l.log.LogAttrs(ctx, slog.LevelWarn, "lease lost", slog.String(logLockKey, lease.Key()), slog.Int64(logFence, lease.Fence()))
	} else if err != nil {
		ev.Message = "release failed (the lease expires by its TTL): " + err.Error()
	}
	key := lease.Key()
	l.rec.later(func(r *runs.Run) {
		r.HeldLocks = slices.DeleteFunc(r.HeldLocks, func(k string) bool { return k == key })
	}, ev)
	return err
}

// isRunsHolder reports whether holder is one of r's step leases.
func isRunsHolder(holder string, r runs.Run) bool {
	return strings.HasPrefix(holder, orchestrator.StepHolderPrefix(r.Pipeline, r.Trigger.Build, r.ID))
}
