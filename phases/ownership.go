package phases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// One owner per run. A run is executed by the daemon that created it for as long as that
// daemon holds the liveness lease it held then; once that lease is lost (the daemon was cut
// off from the store, or frozen, past liveness_ttl), the other daemons presume it dead and
// one of them takes the run over: it advances the run's ownership epoch (runs.Run.Epoch)
// before it touches anything, cancels what still runs, releases the run's leases and ends the
// run interrupted, recording what each service was left in.
//
// The execution keeps its side of that bargain at the one place every outside request passes
// (execution.allowed, the outbound.Gate in the context of all of the run's work, compensation
// included):
//
//   - Every request, reads included, goes out only while the daemon's liveness lease of the
//     run's creation is held by the local monotonic clock. The lease is declared lost before
//     it can expire in the store, and a takeover waits for it to expire there, so a request
//     that passes this check cannot follow a takeover, unless the clock stood still while the
//     process did (a suspended VM) or the request was already on the wire.
//   - Every write (any method but GET and HEAD) also first reads, in the store, that the run
//     has not ended and is still at the execution's epoch: that catches the suspended VM. A
//     cancel of the run's own deployment after its service lease was lost (cancelOrphan) is
//     the one write sent on the liveness lease alone, since the store is then most likely
//     unreachable and the cancel must not wait for it.
//
// An execution that finds its run no longer its own is disowned: its work is canceled at
// once, it writes nothing more anywhere (no request, no run record, no audit entry, no
// notification), the leases it holds are released (compare-and-delete on their own tokens),
// and it logs what it did not do. The engine stops every execution when it loses its liveness
// lease, before it takes the lease again (keepLive), and then takes over, like any other
// daemon would, those of its runs that nobody took over meanwhile.

// ErrNotOwned: the run is no longer this execution's. Another daemon took it over, it
// ended, or this daemon lost the liveness lease it held when the run was created.
var ErrNotOwned = errors.New("run is no longer this daemon's")

// ownershipTimeout bounds the store read that confirms a write: a write that cannot be
// confirmed in time is not sent (the step fails as on any failed call).
const ownershipTimeout = 10 * time.Second

type protectiveKey struct{}

// protective marks the calls of ctx as protective: a cancel of the run's own deployment, sent
// on the liveness lease alone (see above).
func protective(ctx context.Context) context.Context {
	return context.WithValue(ctx, protectiveKey{}, true)
}

func isProtective(ctx context.Context) bool {
	v, _ := ctx.Value(protectiveKey{}).(bool)
	return v
}

// allowed is the outbound.Gate of the run's work: see the comment at the top of this file.
func (x *execution) allowed(ctx context.Context, method string) error {
	if err := x.ownedHere(); err != nil {
		return err
	}
	if method == http.MethodGet || method == http.MethodHead || isProtective(ctx) {
		return nil
	}
	if err := x.confirmOwner(ctx); err != nil {
		return err
	}
	return x.ownedHere() // the store's answer took time: look at the clock again
}

// ownedHere is the check that costs no round trip: the run was not disowned, and the
// liveness lease of its creation is held by the local clock.
func (x *execution) ownedHere() error {
	if err := x.notOwned(); err != nil {
		return err
	}
	if x.live == nil { // an engine that was never started holds no liveness lease
		return nil
	}
	if err := x.live.Err(); err != nil {
		cause := fmt.Errorf("%w: daemon %s lost its liveness lease (%v), so the other daemons presume it dead",
			ErrNotOwned, x.e.d.Instance, err)
		x.disown(cause, "")
		return cause
	}
	return nil
}

// confirmOwner reads, in the store, that the run has not ended and is still at this
// execution's epoch.
func (x *execution) confirmOwner(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ownershipTimeout)
	defer cancel()
	o, err := x.e.d.Store.Owner(ctx, x.run.ID)
	if err != nil {
		return fmt.Errorf("confirm that run %s is still this daemon's before writing: %w", x.run.ID, err)
	}
	var cause error
	switch {
	case o.Epoch != x.epoch:
		cause = fmt.Errorf("%w: daemon %s took it over at %s", ErrNotOwned, orUnknown(o.TakenOverBy), o.TakenOverAt.Format(time.RFC3339Nano))
	case o.Status.Terminal():
		cause = fmt.Errorf("%w: it ended %s", ErrNotOwned, o.Status)
	default:
		return nil
	}
	x.disown(cause, o.TakenOverBy)
	return cause
}

// notOwned returns why the run was disowned, nil while it is this execution's.
func (x *execution) notOwned() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.disowned
}

// disown stops the execution for good: the run is no longer its own (cause says why; by is
// the daemon that took it over, when known). Its work is canceled at once; the engine takes
// the run over itself once it holds its liveness lease again, unless another daemon has.
func (x *execution) disown(cause error, by string) {
	x.mu.Lock()
	first := x.disowned == nil
	if first {
		x.disowned = cause
	}
	x.mu.Unlock()
	if !first {
		return
	}
	x.e.noteDisowned(x.run)
	if by != "" && by != x.e.d.Instance {
		x.e.reportTakenOver(x.run, by, false)
	}
	x.abort(cause)
}

// reportDisowned logs, once the disowned execution has stopped, what it did not do. It
// releases nothing and writes nothing: the leases were released where they were taken, and
// the run's end is its takeover's to record.
func (x *execution) reportDisowned(status runs.Status, reason string) {
	var notDone []string
	for _, st := range x.services {
		switch {
		case st.stale != "" || st.superseded || st.deployed:
		case st.snap != nil && st.snap.written():
			notDone = append(notDone, st.svc.Name+": deploy or restore (it may carry this run's config)")
		case st.synced:
			notDone = append(notDone, st.svc.Name+": deploy")
		default:
			notDone = append(notDone, st.svc.Name+": sync")
		}
	}
	notDone = append(notDone, fmt.Sprintf("recording the run's end (it would have been %s: %s)", status, reason))
	x.log.LogAttrs(context.Background(), slog.LevelWarn, "run stopped: no longer this daemon's; its takeover records what it left",
		slog.String(logError, x.notOwned().Error()), slog.String(logkey.NotDone, strings.Join(notDone, "; ")))
}

// noteDisowned records run r as one whose execution stopped because this daemon no longer
// owned it: the next takeover of this instance's leftovers (keepLive, then the watch) ends
// it, unless another daemon did.
func (e *Engine) noteDisowned(r runs.Run) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.disowned[r.ID] = r
	e.leftovers = true
}

// reportTakenOver says that another daemon (by) took over run r of this one, or that this
// daemon took over its own run after it had lost its liveness lease (self): a log line with
// both daemons, and the metric. Once per run.
func (e *Engine) reportTakenOver(r runs.Run, by string, self bool) {
	e.mu.Lock()
	done := e.reported[r.ID]
	e.reported[r.ID] = true
	e.mu.Unlock()
	if done {
		return
	}
	e.log.LogAttrs(context.Background(), slog.LevelWarn, "run taken over", slog.String(logRunID, r.ID),
		slog.String(logPipeline, r.Pipeline), slog.String(logkey.Instance, e.d.Instance), slog.String(logkey.TakenOverBy, by))
	if o := e.d.Observer; o != nil {
		o.RunTakenOver(r.Pipeline, self)
	}
}

// stopOwned stops every execution of this engine, because the daemon lost its liveness
// lease: each is disowned (cause) and waited for, until ctx ends.
func (e *Engine) stopOwned(ctx context.Context, cause error) {
	e.mu.Lock()
	e.cutOff = true
	all := make([]*execution, 0, len(e.execs))
	for _, x := range e.execs {
		all = append(all, x)
	}
	e.mu.Unlock()
	for _, x := range all {
		x.disown(cause, "")
	}
	for _, x := range all {
		select {
		case <-x.done:
		case <-ctx.Done():
			return
		}
	}
}

// takeOverDisowned takes over the runs whose executions stopped because this daemon no
// longer owned them, as any daemon would take over a dead one's: those another daemon
// already ended are left alone, and said to be taken over. It is called once this daemon
// holds its liveness lease again; what it cannot finish (Coolify or the store down) the
// watch tries again.
func (e *Engine) takeOverDisowned(ctx context.Context) {
	e.mu.Lock()
	e.cutOff = false
	e.mu.Unlock()
	if _, err := e.takeover(ctx, e.d.Instance, e.restartReason(), true); err != nil {
		if ctx.Err() == nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "stopped runs not taken over yet; trying again", slog.String(logError, err.Error()))
		}
		return
	}
	e.mu.Lock()
	e.leftovers = false
	e.mu.Unlock()
	e.forgetEndedDisowned(ctx)
}

// forgetEndedDisowned drops the disowned runs that have ended, saying so of those another
// daemon took over.
func (e *Engine) forgetEndedDisowned(ctx context.Context) {
	e.mu.Lock()
	left := make([]runs.Run, 0, len(e.disowned))
	for _, r := range e.disowned {
		left = append(left, r)
	}
	e.mu.Unlock()
	for _, r := range left {
		cur, err := e.d.Store.Get(ctx, r.ID)
		switch {
		case errors.Is(err, runs.ErrNotFound): // gone with the store's data: nothing to take over
		case err != nil || !cur.Status.Terminal():
			continue
		case cur.TakenOverBy != "" && cur.TakenOverBy != e.d.Instance:
			e.reportTakenOver(cur, cur.TakenOverBy, false)
		}
		e.mu.Lock()
		delete(e.disowned, r.ID)
		delete(e.reported, r.ID)
		e.mu.Unlock()
	}
}

// disownedReason is the reason a takeover of this daemon's own disowned run records.
func (e *Engine) disownedReason() string {
	return fmt.Sprintf("daemon %s lost its liveness lease (cut off from the store, or stopped, for longer than liveness_ttl %s) and stopped the run; it took the run over itself once it held the lease again",
		e.d.Instance, e.d.LivenessTTL)
}

// leftover reports whether run r of this instance is one for this daemon to take over: no
// execution of this life runs it, and it was created in a previous life or its execution
// was disowned. Runs of this life that have no execution yet (Submit stores a run before it
// starts it) are not.
func (e *Engine) leftover(r runs.Run) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.execs[r.ID]; x != nil {
		select {
		case <-x.done: // it has stopped, and is on its way out of execs
		default:
			return false
		}
	}
	_, disowned := e.disowned[r.ID]
	return disowned || r.CreatedAt.Before(e.startedAt)
}
