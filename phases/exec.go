package phases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/tracing"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// execution is one run being executed by this engine.
type execution struct {
	e   *Engine
	run runs.Run // as created; the store has the current state
	p   *config.Pipeline
	cl  Coolify
	log *slog.Logger
	// rec writes the run's record; leases takes and gives back its locks, recording them.
	rec    *recorder
	leases *leases

	// The run's three contexts are kept, not passed, because they are its cancellation
	// handles: the engine stops a run from outside it (Cancel, Shutdown, a supersede, the loss
	// of its ownership), at safe points of work that began long before. The work itself takes
	// the context it runs under as its first argument.
	//
	// ctx is canceled (with a cause) only by abort: a hard stop. Work in a phase runs under
	// it; compensation too.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// waitCtx is canceled when the run is stopped before it entered a phase (supersede,
	// cancel, shutdown): it bounds the wait for coolify:phase1.
	waitCtx    context.Context
	waitCancel context.CancelCauseFunc
	// stopCtx is canceled (with the stop's cause) by every stop request. A lock wait is a
	// safe point: the waits of a run's own work end with it (untilStop), those of its
	// compensation do not.
	stopCtx    context.Context
	stopCancel context.CancelCauseFunc

	// live is the daemon's liveness lease when the run was created, epoch the run's
	// ownership epoch then: the run is this execution's while both hold (ownership.go).
	live  *locks.Lease
	epoch int64

	// span is the run's span (tracing.go), the parent of everything the run does; trace its
	// traceparent, stored with the run for a takeover's span.
	span  trace.Span
	trace string

	mu       sync.Mutex
	disowned error // why the run is no longer this execution's (ownership.go); nil while it is
	stopErr  error // the first stop request, checked at safe points
	inPhase  bool  // entered a phase: it can no longer be superseded
	resolver *secrets.Resolver
	started  map[string]bool // deployment UUIDs this run started
	// winOverride is the run's override of its deploy windows (window.go); nil until asked.
	winOverride *windowOverride
	// decision is the question the run waits on a person for (decision.go).
	decision decisionState

	services []*svcState
	// mobileDone are the mobile steps that wrote, in order (a whole-release rollback puts
	// them back, the last first).
	mobileDone []mobileDone
	done       chan struct{}

	// gate is closed once this run has left Phase 1 (or ended); prevGate is the gate of the
	// run submitted before it, which it waits for before asking for coolify:phase1.
	gate     chan struct{}
	gateOnce sync.Once
	prevGate <-chan struct{}
}

// svcState is what this run did to one service.
type svcState struct {
	svc        config.Service
	snap       *snapshot // what Phase 1 changed, to restore; nil when nothing was written
	fence      int64     // fence of the Phase-1 service lease
	synced     bool      // Phase 1 finished for it
	deployed   bool      // Phase 2 deployed it and it is healthy
	superseded bool      // a newer run re-synced it
	stale      string    // the guard left it: a newer build is on it (the note says which)
	before     runs.Mark // its mark when Phase 1 took its lock (zero if none): the build a restore puts back
	failed     bool      // its Phase-2 step failed
	// stillBuilding: a deployment of the run's own would not end (StillBuildingError); the
	// service's state is unknown, and nothing more is written to it.
	stillBuilding *StillBuildingError
	// beforeRunning is what it ran when Phase 1 took its lock (nil if nothing was
	// recorded): what a rollback's redeploy puts back as running.
	beforeRunning *runs.Running
	// restored and redeployed say what a compensation did (restore); restoreErr why it
	// stopped short.
	restored, redeployed bool
	restoreErr           error
	// beforeOwn is this run's pipeline's mark on it when Phase 1 took its lock (nil if none):
	// what a restore puts back as the pipeline's.
	beforeOwn *runs.Mark
}

func (e *Engine) newExecution(r runs.Run, p *config.Pipeline) *execution {
	x := &execution{
		e: e, run: r, p: p, cl: e.coolifyFor(p),
		log:   e.log.With(slog.String(logRunID, r.ID), slog.String(logPipeline, r.Pipeline)),
		live:  e.liveLease(),
		epoch: max(r.Epoch, 1),
		done:  make(chan struct{}),
		gate:  make(chan struct{}),
	}
	x.rec = &recorder{store: e.d.Store, id: r.ID, log: x.log, owned: x.notOwned}
	x.leases = &leases{locker: e.d.Locker, rec: x.rec, run: r, p: p, log: x.log, watch: x.watchLockWait}
	x.span = e.startRunSpan(r)
	x.trace = tracing.Traceparent(x.span)
	// Every outside request of the run's work, compensation included, passes its gate, and
	// is traced under the run's span.
	base := trace.ContextWithSpan(context.Background(), x.span)
	x.ctx, x.cancel = context.WithCancelCause(outbound.WithGate(base, x.allowed))
	x.waitCtx, x.waitCancel = context.WithCancelCause(x.ctx)
	x.stopCtx, x.stopCancel = context.WithCancelCause(x.ctx)
	for _, s := range p.Services {
		x.services = append(x.services, &svcState{svc: s})
	}
	return x
}

// requestStop asks the run to stop at its next safe point. Before the run entered a phase
// that is at once.
func (x *execution) requestStop(cause error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stopErr == nil {
		x.stopErr = cause
		x.stopCancel(cause)
	}
	if !x.inPhase {
		x.waitCancel(cause)
	}
}

// supersede stops the run if it has not entered a phase yet.
func (x *execution) supersede(byRun string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.inPhase || x.stopErr != nil {
		return
	}
	x.stopErr = fmt.Errorf("%w %s", errSuperseded, byRun)
	x.stopCancel(x.stopErr)
	x.waitCancel(x.stopErr)
}

// untilStop returns ctx, also canceled with the stop's cause once a stop is requested: for
// the lock waits of the run's own work, so a cancel does not wait out a lock's budget (a run
// waiting behind a freeze stops at once). Compensation waits under plain ctx.
func (x *execution) untilStop(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(x.stopCtx, func() { cancel(context.Cause(x.stopCtx)) })
	return ctx, func() { unhook(); cancel(nil) }
}

// abort cancels all work of the run now.
func (x *execution) abort(cause error) {
	x.requestStop(cause)
	x.cancel(cause)
}

// stopping returns the stop request, if any: checked at safe points.
func (x *execution) stopping() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.stopErr
}

// enterPhase marks the run as in a phase (status st, with evs) unless a stop came first. The
// first time, it does so with one store update that finds the run still pending: a daemon
// that superseded the run meanwhile (supersedePending, maybe on another daemon) has ended it
// in the store, and the run stops instead.
func (x *execution) enterPhase(st runs.Status, evs ...runs.Event) error {
	x.mu.Lock()
	stop, in := x.stopErr, x.inPhase
	x.mu.Unlock()
	if stop != nil {
		return stop
	}
	if in {
		x.rec.status(st, evs...)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), finalWriteTimeout)
	defer cancel()
	fn, evs := x.rec.withPending(func(r *runs.Run) { r.Status = st }, evs)
	run, err := x.rec.write(ctx, func(r *runs.Run) error { fn(r); return nil }, evs...)
	if errors.Is(err, runs.ErrEnded) {
		cause := errCanceled
		if cur, gerr := x.e.d.Store.Get(ctx, x.run.ID); gerr == nil && cur.Status == runs.StatusSuperseded {
			cause = fmt.Errorf("%w (%s)", errSuperseded, cur.Reason)
		}
		x.requestStop(cause)
		return x.stopping()
	}
	if err != nil {
		return fmt.Errorf("record the start of %s: %w", st, err)
	}
	x.mu.Lock()
	stop = x.stopErr
	x.inPhase = stop == nil
	x.mu.Unlock()
	if stop != nil {
		return stop
	}
	x.e.report(ctx, run)
	return nil
}

// watchPending stops the run when another daemon ends it in the store while it is pending
// (superseded there: see supersedePending), so it stops waiting for coolify:phase1 at once.
// It returns when the run enters a phase or ctx ends. The store's signal is the main path; a
// slow poll covers a lost one (and the SQLite store, which signals only in its own process).
func (x *execution) watchPending(ctx context.Context) {
	sub, err := x.e.d.Store.Subscribe(ctx, x.run.ID)
	var signal <-chan struct{}
	if err == nil {
		defer sub.Close()
		signal = sub.C()
	}
	poll := time.NewTicker(pendingPoll(x.e.d.PollInterval))
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-signal:
		case <-poll.C:
		}
		x.mu.Lock()
		in := x.inPhase
		x.mu.Unlock()
		if in {
			return
		}
		cur, err := x.e.d.Store.Get(ctx, x.run.ID)
		if err == nil && cur.Status == runs.StatusSuperseded {
			x.requestStop(fmt.Errorf("%w (%s)", errSuperseded, cur.Reason))
			return
		}
	}
}

// pendingPoll is watchPending's fallback interval: a few poll intervals, at most 5s.
func pendingPoll(d time.Duration) time.Duration { return min(5*d, 5*time.Second) }

// recoverPanic, deferred by execute, turns a panic into a failed run (the stack is logged),
// never a dead daemon; the leases the run still holds are released.
func (x *execution) recoverPanic() {
	v := recover()
	if v == nil {
		return
	}
	x.log.LogAttrs(context.Background(), slog.LevelError, "run panicked", slog.Any(logkey.Panic, v), slog.String(logkey.Stack, string(debug.Stack())))
	ctx, cancel := context.WithTimeout(context.Background(), finalWriteTimeout)
	defer cancel()
	x.e.d.Locker.ReleaseAll(ctx, x.run.ID) // finish clears the run's held locks
	x.finish(runs.StatusFailed, fmt.Sprintf("internal error (panic: %v); see the daemon log", v))
	if o := x.e.d.Observer; o != nil {
		o.RunEnded(x.run.Pipeline, runs.StatusFailed)
	}
}

// execute runs the whole pipeline and records how it ended.
func (x *execution) execute() {
	defer close(x.done)
	defer x.cancel(nil)
	defer x.openGate()
	defer x.recoverPanic()
	start := time.Now()
	x.rec.update(func(r *runs.Run) { r.StartedAt, r.Trace = start.UTC(), x.trace }, runs.Event{Type: runs.EventRunStarted,
		Message: fmt.Sprintf("executing on %s", x.e.d.Instance)})

	sources, err := x.e.sourcesFor(x.p)
	if err != nil {
		x.finish(runs.StatusFailed, err.Error())
		return
	}
	x.resolver = secrets.NewResolver(sources)
	defer x.resolver.Forget()

	if x.p.Concurrency == config.ConcurrencySupersede {
		wctx, stop := context.WithCancel(x.waitCtx)
		watched := make(chan struct{})
		go func() { defer close(watched); x.watchPending(wctx) }()
		defer func() { stop(); <-watched }()
	}
	status, reason := x.runPipeline()
	x.finish(status, reason)
	if o := x.e.d.Observer; o != nil && x.notOwned() == nil {
		o.RunEnded(x.run.Pipeline, status)
	}
}

// runPipeline executes the phases and returns the final status and reason.
func (x *execution) runPipeline() (runs.Status, string) {
	// Stale before anything: a run whose every service carries a newer build ends without a
	// call to Coolify.
	if notes := x.allStale(x.ctx); notes != nil {
		for i, s := range x.services {
			x.markStale(s, "", 0, notes[i])
		}
		return x.allStaleOutcome()
	}
	// Every outside system, read before anything is written; the reads hold no lease yet:
	// they name the run, without a fence.
	if status, reason, ok := x.preflightRun(); !ok {
		return status, reason
	}
	if err := x.gateBeforePhase1(); err != nil {
		return x.gateOutcome(err)
	}
	if err := x.mobileSteps(config.WhenBeforePhase1); err != nil {
		x.compensate(runs.Phase1, x.compensationFor(x.stoppedBy(err)))
		return x.outcome(err, "mobile step")
	}
	if err := x.phase1(); err != nil {
		x.compensate(runs.Phase1, x.compensationFor(x.stoppedBy(err)))
		return x.outcome(err, "phase 1")
	}
	if len(x.services) > 0 && len(x.staleServices()) == len(x.services) {
		return x.allStaleOutcome() // every service turned out stale under its lock: nothing written
	}
	if err := x.awaitWindow(runs.Phase2); err != nil {
		x.compensate(runs.Phase1, x.compensationFor(x.stoppedBy(err)))
		return x.outcome(err, "deploy window")
	}
	if err := x.phase2(); err != nil {
		x.undo(err)
		return x.outcome(err, "phase 2")
	}
	if err := x.mobileSteps(config.WhenAfterPhase2); err != nil {
		x.compensate(runs.Phase2, x.compensationFor(x.stoppedBy(err)))
		return x.outcome(err, "mobile step")
	}
	if where, err := x.verified(); err != nil {
		x.undo(err)
		return x.outcome(err, where)
	}
	var superseded []string
	for _, s := range x.services {
		if s.superseded {
			superseded = append(superseded, s.svc.Name)
		}
	}
	var why []string
	if len(superseded) > 0 {
		why = append(why, fmt.Sprintf("not deployed by this run (a newer run re-synced them): %s", strings.Join(superseded, ", ")))
	}
	if stale := x.staleServices(); len(stale) > 0 {
		why = append(why, fmt.Sprintf("stale, left alone (a newer build is on them): %s", strings.Join(stale, ", ")))
	}
	return runs.StatusSucceeded, strings.Join(why, "; ")
}

// stoppedBy reports whether err is the run's stop request (cancel, shutdown) taking effect.
func (x *execution) stoppedBy(err error) bool {
	stop := x.stopping()
	return stop != nil && errors.Is(err, stop)
}

// allStaleOutcome is the end of a run whose every service is stale: superseded, naming
// the newer build on each.
func (x *execution) allStaleOutcome() (runs.Status, string) {
	notes := make([]string, len(x.services))
	for i, s := range x.services {
		notes[i] = s.svc.Name + ": " + s.stale
	}
	return runs.StatusSuperseded, "every service carries a newer build: " + strings.Join(notes, "; ")
}

// outcome maps the error that ended a run to its final status and reason.
func (x *execution) outcome(err error, where string) (runs.Status, string) {
	stop := x.stopping()
	switch {
	case errors.Is(err, locks.ErrLost):
		return runs.StatusFailed, "lock lost: " + err.Error()
	case stop != nil && errors.Is(stop, errSuperseded):
		return runs.StatusSuperseded, stop.Error()
	case stop != nil && errors.Is(stop, errCanceled):
		return runs.StatusCanceled, stop.Error()
	case stop != nil && errors.Is(stop, errShutdown):
		return runs.StatusInterrupted, "daemon shut down: " + err.Error()
	}
	return runs.StatusFailed, fmt.Sprintf("%s: %v", where, err)
}

// finish records the final status (unless the run already ended) with its end event, and
// what the run left each service in when it did not succeed.
func (x *execution) finish(status runs.Status, reason string) {
	if x.notOwned() != nil {
		x.reportDisowned(status, reason)
		endRunSpan(x.span, runs.StatusInterrupted, "no longer this daemon's run: "+x.notOwned().Error())
		return
	}
	defer endRunSpan(x.span, status, reason)
	var left []runs.Left
	if status != runs.StatusSucceeded {
		left = x.leftReport()
	}
	ended, err := x.rec.end(status, reason, left)
	if err != nil && !errors.Is(err, runs.ErrEnded) {
		x.log.LogAttrs(context.Background(), slog.LevelError, "run end not recorded", slog.String(logStatus, string(status)), slog.String(logError, err.Error()))
		return
	}
	level := slog.LevelInfo
	if status != runs.StatusSucceeded {
		level = slog.LevelWarn
	}
	x.log.LogAttrs(context.Background(), level, "run ended", slog.String(logStatus, string(status)), slog.String(logkey.Reason, reason))
	if err == nil {
		x.e.runEnded(ended)
	}
}

// phaseLease takes a phase lock and returns the context work of the phase runs under:
// canceled when the phase lease is lost or the run aborted.
func (x *execution) phaseLease(waitCtx context.Context, phase runs.Phase, key string) (*locks.Lease, context.Context, context.CancelFunc, error) {
	lease, err := x.leases.acquire(waitCtx, phaseLock(phase, key))
	if err != nil {
		return nil, nil, nil, err
	}
	pctx, cancel := lease.Context(withSpan(x.ctx, waitCtx)) // traced under the phase's span
	purpose := coolify.PurposeSync
	if phase == runs.Phase2 {
		purpose = coolify.PurposeDeploy
	}
	return lease, coolify.WithPurpose(pctx, purpose), cancel, nil
}

// openGate lets the next submitted run ask for coolify:phase1.
func (x *execution) openGate() { x.gateOnce.Do(func() { close(x.gate) }) }

// phase1 syncs every service under coolify:phase1.
func (x *execution) phase1() (err error) {
	start := time.Now()
	defer x.openGate()
	sctx, span := stage(x.ctx, "phase 1", runs.Phase1)
	defer func() { endSpan(span, err) }()
	if x.prevGate != nil {
		select {
		case <-x.prevGate:
		case <-x.waitCtx.Done():
			return fmt.Errorf("waiting for the run submitted before: %w", context.Cause(x.waitCtx))
		}
	}
	lease, pctx, cancel, err := x.phaseLease(withSpan(x.waitCtx, sctx), runs.Phase1, orchestrator.Phase1Key)
	if err != nil {
		return err
	}
	defer cancel()
	if err := x.enterPhase(runs.StatusPhase1, runs.Event{Type: runs.EventPhaseStarted, Phase: runs.Phase1, LockKey: lease.Key(), Fence: lease.Fence()}); err != nil {
		_ = x.leases.release(lease, phaseLock(runs.Phase1, orchestrator.Phase1Key))
		return err
	}

	var ferr error
	for _, s := range x.services {
		if ferr = x.stopping(); ferr != nil {
			break
		}
		if ferr = x.task(pctx, runs.Phase1, s.svc.Name, func(ctx context.Context) error { return x.syncService(ctx, s) }); ferr != nil {
			break
		}
	}
	if ferr == nil {
		if err := lease.Err(); err != nil { // lost while the last service finished
			ferr = err
		}
	}
	rerr := x.leases.release(lease, phaseLock(runs.Phase1, orchestrator.Phase1Key))
	if ferr == nil && errors.Is(rerr, locks.ErrLost) {
		ferr = fmt.Errorf("phase 1: %w", rerr)
	}
	x.phaseDone(runs.Phase1, start, ferr)
	return ferr
}

// phase2 deploys every service under coolify:phase2, wave by wave (deployWaves).
func (x *execution) phase2() (err error) {
	start := time.Now()
	if err := x.stopping(); err != nil {
		return err
	}
	sctx, span := stage(x.ctx, "phase 2", runs.Phase2)
	defer func() { endSpan(span, err) }()
	wctx, stopWait := x.untilStop(sctx)
	lease, pctx, cancel, err := x.phaseLease(wctx, runs.Phase2, orchestrator.Phase2Key)
	stopWait()
	if err != nil {
		return err
	}
	defer cancel()
	x.rec.status(runs.StatusPhase2, runs.Event{Type: runs.EventPhaseStarted, Phase: runs.Phase2, LockKey: lease.Key(), Fence: lease.Fence()})

	ferr := x.deployWaves(pctx)
	if ferr == nil {
		if err := lease.Err(); err != nil {
			ferr = err
		}
	}
	rerr := x.leases.release(lease, phaseLock(runs.Phase2, orchestrator.Phase2Key))
	if ferr == nil && errors.Is(rerr, locks.ErrLost) {
		ferr = fmt.Errorf("phase 2: %w", rerr)
	}
	x.phaseDone(runs.Phase2, start, ferr)
	return ferr
}

func (x *execution) phaseDone(phase runs.Phase, start time.Time, err error) {
	msg := "ok"
	if err != nil {
		msg = err.Error()
	}
	x.rec.event(runs.Event{Type: runs.EventPhaseFinished, Phase: phase, Message: msg})
	if o := x.e.d.Observer; o != nil {
		o.PhaseDone(x.run.Pipeline, phase, time.Since(start))
	}
}

func (x *execution) stepDone(phase runs.Phase, st runs.StepStatus, start time.Time) {
	if o := x.e.d.Observer; o != nil {
		o.StepDone(x.run.Pipeline, phase, st, time.Since(start))
	}
}

// leaseErr explains why work under a lease context stopped: the lease's loss when that is
// the cause, else err.
func leaseErr(lease *locks.Lease, ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if lerr := lease.Err(); lerr != nil && errors.Is(lerr, locks.ErrLost) {
		return fmt.Errorf("%w (while: %v)", lerr, err)
	}
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, locks.ErrLost) {
		return fmt.Errorf("%w (while: %v)", cause, err)
	}
	return err
}
