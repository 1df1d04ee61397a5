package locks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
)

// Lease is a held lock. Its heartbeat renews it at TTL/3 by compare-on-token.
//
// A lease ends exactly once: released by its holder (Err wraps ErrReleased) or lost (Err
// wraps ErrLost) because a renewal found another token or no lease, or renewals kept failing
// until the lease would have expired by the local monotonic clock, measured from before the
// grant or last successful renewal was requested, less a safety margin.
type Lease struct {
	l       *Locker
	owner   string
	ttl     time.Duration
	granted time.Time // local clock, for the held duration
	// renewAt is when the first renewal is due: a third of the TTL after the request that
	// granted the lease was sent (the deadline and the renewals count from it, not from
	// the answer, which a slow backend may deliver late), or a third of what is left of a
	// lease handed over by a release (see Handover), which may be shorter than the TTL.
	renewAt time.Time

	mu       sync.Mutex
	info     Info
	deadline time.Time // local monotonic instant the lease must be presumed expired

	// ctx is the lease's own lifetime, not a caller's context: it is canceled when the
	// lease ends, with Err as its cause, and backs Done and Context.
	ctx context.Context
	end context.CancelCauseFunc
	// ended is the cause the lease ended with, set first thing by the one call of finish
	// that ends it, before anything else is done (ctx is canceled last): Err reads it, so a
	// lease being ended by another goroutine is never reported held.
	ended atomic.Pointer[error]

	// The heartbeat goroutine does not exist while the lease is young: the Locker's
	// starter starts it when the first renewal or the forced-release watch is due (or
	// checkNow at once), so a lease released before that never had one.
	hbDue     time.Time // when the Locker's starter starts the heartbeat
	hbIndex   int       // place in the starter's heap, -1 when out; guarded by the starter's mu
	hbMu      sync.Mutex
	hbStopped bool               // stopHeartbeat was called: never start
	hbCancel  context.CancelFunc // stops the running heartbeat; nil until it starts
	hbDone    chan struct{}      // closed when the running heartbeat returns
	check     chan struct{}      // asks the heartbeat to renew now

	relMu       sync.Mutex // serializes Release
	unconfirmed bool       // Release ended the lease but the backend did not confirm it

	renewErr error // the last failed renewal's error (heartbeat goroutine only)

	ctxMu   sync.Mutex
	derived map[*derivedCtx]struct{} // contexts from Context, canceled when the lease ends
}

type derivedCtx struct{ cancel context.CancelCauseFunc }

// Info returns the lease as granted or last renewed (Token included: it is the holder's).
func (le *Lease) Info() Info {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.info
}

// Key, Fence and Holder are shorthands for Info fields.
func (le *Lease) Key() string    { return le.info.Key }
func (le *Lease) Fence() int64   { return le.info.Fence }
func (le *Lease) Holder() string { return le.info.Holder }

// Done is closed when the lease ends: released or lost. A loss by the local clock closes it
// when the heartbeat notices or Err is called, whichever comes first: on a starved CPU that
// can be after the deadline, so check Err (or use the fence) right before acting on the lease.
func (le *Lease) Done() <-chan struct{} { return le.ctx.Done() }

// Err is nil while held; after Done it wraps ErrReleased or ErrLost (with the reason: expired
// before renewal, replaced by another token, force-released).
//
// Err checks the local deadline itself: once it has passed, the lease is lost and Err says
// so, even if the heartbeat goroutine has not run yet to find out (a process starved of CPU).
// So Err never reports a lease held past the instant it must be presumed expired.
func (le *Lease) Err() error {
	if cause := le.ended.Load(); cause != nil {
		return *cause
	}
	le.mu.Lock()
	deadline := le.deadline
	le.mu.Unlock()
	if time.Now().Before(deadline) {
		return nil
	}
	le.finish(le.lostErr("it expired by the local clock before a renewal confirmed it", nil), true)
	return *le.ended.Load() // this call's cause, or that of a finish that got there first
}

// Context returns a context derived from parent that is canceled when the lease ends, with
// context.Cause(ctx) == le.Err(), so work running under the lease stops when it is lost.
// Calling the CancelFunc releases the context's resources (not the lease).
// The derived context is canceled before Done closes.
func (le *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	dc := &derivedCtx{cancel: cancel}
	le.ctxMu.Lock()
	if err := le.Err(); err != nil {
		le.ctxMu.Unlock()
		cancel(err)
		return ctx, func() { cancel(context.Canceled) }
	}
	if le.derived == nil {
		le.derived = make(map[*derivedCtx]struct{})
	}
	le.derived[dc] = struct{}{}
	le.ctxMu.Unlock()
	return ctx, func() {
		le.ctxMu.Lock()
		delete(le.derived, dc)
		le.ctxMu.Unlock()
		cancel(context.Canceled)
	}
}

// Release stops the heartbeat and deletes the lease by compare-and-delete on its token.
// Releasing twice returns nil; releasing a lost lease returns an error matching ErrLost and
// never removes another holder's lease. When the backend cannot be reached the lease still
// ends (Done closes, Err wraps ErrReleased) and the error wraps ErrUnavailable; calling
// Release again retries the delete, otherwise the lease expires by its TTL.
func (le *Lease) Release(ctx context.Context) error {
	le.relMu.Lock()
	defer le.relMu.Unlock()
	if err := le.Err(); err != nil {
		switch {
		case errors.Is(err, ErrLost):
			return err
		case !le.unconfirmed:
			return nil
		}
	}
	le.stopHeartbeat()
	if err := le.Err(); errors.Is(err, ErrLost) {
		return err // the heartbeat found the loss while we stopped it
	}
	key, token := le.info.Key, le.info.Token
	err := le.l.d.Release(ctx, key, token)
	switch {
	case err == nil:
		le.unconfirmed = false
		le.finish(&releasedError{key: key, fence: le.info.Fence}, false)
		return nil
	case errors.Is(err, ErrNotHeld) && le.unconfirmed:
		le.unconfirmed = false // gone by now (expired): nothing left to release
		return nil
	case errors.Is(err, ErrNotHeld):
		lost := le.lostErr("it had already expired or been replaced when it was released", nil)
		le.finish(lost, true)
		return lost
	default:
		le.unconfirmed = true
		le.finish(&releasedError{key: key, fence: le.info.Fence, unconfirmed: true}, false)
		return fmt.Errorf("release %q (fence %d): %w (retry the release, or let the lease expire by its TTL)", key, le.info.Fence, err)
	}
}

// releasedError is the cause of a released lease. It matches ErrReleased; its text is
// built only when someone reads it, since most releases are never looked at.
type releasedError struct {
	key         string
	fence       int64
	unconfirmed bool // the backend did not confirm the delete
}

func (e *releasedError) Error() string {
	if e.unconfirmed {
		return fmt.Sprintf("lock %q (fence %d): %v (the release was not confirmed; the lease expires by its TTL)",
			e.key, e.fence, ErrReleased)
	}
	return fmt.Sprintf("lock %q (fence %d): %v", e.key, e.fence, ErrReleased)
}

func (e *releasedError) Unwrap() error { return ErrReleased }

// lostErr is the error of a lost lease: the key, fence, reason and cause (may be nil).
func (le *Lease) lostErr(reason string, cause error) error {
	if cause != nil {
		return fmt.Errorf("lock %q (fence %d): %w: %s: %w (the work under it was stopped; rerun it)",
			le.info.Key, le.info.Fence, ErrLost, reason, cause)
	}
	return fmt.Errorf("lock %q (fence %d): %w: %s (the work under it was stopped; rerun it)",
		le.info.Key, le.info.Fence, ErrLost, reason)
}

// finish ends the lease with cause; it reports whether this call ended it. Bookkeeping,
// the log record and the observer come first, then derived contexts are canceled, then
// Done closes: whoever sees Done sees everything else settled.
func (le *Lease) finish(cause error, lost bool) bool {
	if !le.ended.CompareAndSwap(nil, &cause) {
		return false
	}
	// An ended lease is renewed no more: its heartbeat never starts, or is told to stop
	// (not waited for, since finish may run on it). A renewal in flight may still extend
	// the key, which then expires by its TTL.
	le.haltHeartbeat()
	le.l.forget(le)
	if lost {
		le.l.log.Warn("lock lease lost",
			logkey.LockKey, le.info.Key, logkey.Fence, le.info.Fence, logkey.Holder, le.info.Holder,
			logkey.Reason, cause.Error())
	}
	if le.l.obs != nil {
		le.l.obs.Released(le.info.Key, time.Since(le.granted), lost)
	}
	le.ctxMu.Lock()
	for dc := range le.derived {
		dc.cancel(cause)
	}
	le.derived = nil
	le.end(cause)
	le.ctxMu.Unlock()
	return true
}

// checkNow asks the heartbeat to renew at once (to notice a forced release), starting it
// if it is not running yet.
func (le *Lease) checkNow() {
	select {
	case le.check <- struct{}{}:
	default:
	}
	le.l.starter.remove(le)
	le.startHeartbeat()
}

// startHeartbeat runs the heartbeat goroutine, unless it runs already or the lease's
// heartbeat was stopped. It is called by the Locker's starter when hbDue comes, or by
// checkNow.
func (le *Lease) startHeartbeat() {
	le.hbMu.Lock()
	defer le.hbMu.Unlock()
	if le.hbStopped || le.hbCancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	le.hbCancel, le.hbDone = cancel, make(chan struct{})
	le.l.wg.Add(1)
	go func() {
		defer le.l.wg.Done()
		le.heartbeat(ctx)
	}()
}

// stopHeartbeat keeps the heartbeat from starting, or stops it and waits for it to return,
// so that no renewal is in flight afterwards.
func (le *Lease) stopHeartbeat() {
	if done := le.haltHeartbeat(); done != nil {
		<-done
	}
}

// haltHeartbeat keeps the heartbeat from starting, or tells it to stop; it returns the
// channel closed when a running heartbeat has returned, nil if none was started.
func (le *Lease) haltHeartbeat() <-chan struct{} {
	le.hbMu.Lock()
	le.hbStopped = true
	cancel, done := le.hbCancel, le.hbDone
	le.hbMu.Unlock()
	le.l.starter.remove(le)
	if cancel == nil {
		return nil
	}
	cancel()
	return done
}

// heartbeat renews the lease every TTL/3 (counted from the granting request) until ctx ends or the
// lease is lost. It starts when the first renewal or watchAfter is due, whichever comes
// first, or earlier on checkNow; from watchAfter on it also listens for release signals
// on its own key: since only this lease may release it, a signal means a forced release,
// and a renewal confirms the loss at once.
//
// The subscription is made in a goroutine of its own, so that a stalled backend holding the
// Subscribe call can't hold back the renewals — and with them the loss of the lease by the
// local clock — past the lease's deadline. The heartbeat waits for that goroutine on exit.
func (le *Lease) heartbeat(ctx context.Context) {
	defer close(le.hbDone)
	interval := le.ttl / 3
	renew := time.NewTimer(max(time.Until(le.renewAt), 0))
	defer renew.Stop()
	watch := time.NewTimer(max(time.Until(le.hbDue), 0))
	defer watch.Stop()
	type subscribed struct {
		sub Subscription
		err error
	}
	var (
		sub     Subscription
		sigC    <-chan struct{}
		pending chan subscribed // the subscribing goroutine's result, nil when none runs
	)
	defer func() {
		if pending != nil {
			if r := <-pending; r.err == nil {
				_ = r.sub.Close()
			}
		}
		if sub != nil {
			_ = sub.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
		case <-sigC:
		case <-le.check:
		case <-watch.C:
			pending = make(chan subscribed, 1)
			go func(out chan<- subscribed) {
				s, err := le.l.d.Subscribe(ctx, le.info.Key)
				out <- subscribed{s, err}
			}(pending)
			continue
		case r := <-pending:
			pending = nil
			if r.err != nil {
				continue // the periodic renewal still notices a loss
			}
			sub, sigC = r.sub, r.sub.C()
			// A forced release before the subscription was active sent no signal we saw:
			// renew once now to find out.
		}
		next, held := le.renew(ctx, interval)
		if !held {
			return
		}
		renew.Reset(next)
	}
}

// renew makes one renewal and reports whether the lease is still held and when to renew
// next: after interval on success, after a short retry bounded by the local deadline on a
// failure that leaves time.
func (le *Lease) renew(ctx context.Context, interval time.Duration) (time.Duration, bool) {
	if ctx.Err() != nil {
		return 0, false // stopped while a renewal was due
	}
	le.mu.Lock()
	deadline := le.deadline
	key, token, fence := le.info.Key, le.info.Token, le.info.Fence
	le.mu.Unlock()
	if !time.Now().Before(deadline) {
		le.finish(le.lostErr("it expired by the local clock before it could be renewed", le.renewErr), true)
		return 0, false
	}
	sent := time.Now()
	rctx, cancel := context.WithDeadline(ctx, deadline)
	exp, err := le.l.d.Renew(rctx, key, token, le.ttl)
	cancel()
	switch {
	case err == nil:
		le.mu.Lock()
		le.info.ExpiresAt = exp
		le.deadline = localDeadline(sent, le.ttl)
		le.mu.Unlock()
		le.renewErr = nil
		return max(interval-time.Since(sent), 0), true
	case errors.Is(err, ErrNotHeld):
		le.finish(le.lostErr("a renewal found it deleted, replaced or force-released", nil), true)
		return 0, false
	case ctx.Err() != nil:
		return 0, false // stopped by Release or Close
	}
	left := time.Until(deadline)
	if left <= 0 {
		le.finish(le.lostErr("renewals failed until it expired by the local clock", err), true)
		return 0, false
	}
	le.renewErr = err
	le.l.log.Warn("lock renewal failed",
		logkey.LockKey, key, logkey.Fence, fence, logkey.Error, err.Error())
	return max(min(interval/4, maxRenewRetry, left), time.Millisecond), true
}
