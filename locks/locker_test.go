package locks_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
	"github.com/deploy-orchestrator/orchestrator/internal/testutil"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// faulty wraps the real SQLite driver to inject backend failures the real one cannot be
// made to produce on demand.
type faulty struct {
	locks.Driver
	failRenew   atomic.Bool
	failTry     atomic.Bool
	failRelease atomic.Int32 // number of Release calls to fail
	tries       atomic.Int32
	renews      atomic.Int32
	// renewGate, when set before the Locker first renews, holds every renewal until it is
	// closed, whatever its context says: a heartbeat that does not get to run. renewHeld
	// gets a value each time a renewal starts waiting on it.
	renewGate chan struct{}
	renewHeld chan struct{}
}

var errInjected = errors.New("injected: connection refused")

func (f *faulty) TryAcquire(ctx context.Context, g locks.Grant) (locks.Info, error) {
	f.tries.Add(1)
	if f.failTry.Load() {
		return locks.Info{}, fmt.Errorf("acquire %q: %w: %w", g.Key, locks.ErrUnavailable, errInjected)
	}
	return f.Driver.TryAcquire(ctx, g)
}

func (f *faulty) Renew(ctx context.Context, key, token string, ttl time.Duration) (time.Time, error) {
	f.renews.Add(1)
	if f.renewGate != nil {
		f.renewHeld <- struct{}{}
		<-f.renewGate
	}
	if f.failRenew.Load() {
		return time.Time{}, fmt.Errorf("renew %q: %w: %w", key, locks.ErrUnavailable, errInjected)
	}
	return f.Driver.Renew(ctx, key, token, ttl)
}

func (f *faulty) Release(ctx context.Context, key, token string) error {
	if f.failRelease.Add(-1) >= 0 {
		return fmt.Errorf("release %q: %w: %w", key, locks.ErrUnavailable, errInjected)
	}
	return f.Driver.Release(ctx, key, token)
}

// recorder is an Observer that keeps what it was told.
type recorder struct {
	mu     sync.Mutex
	events []string
	// stall, when set, holds every Released of a lost lease until it is closed: the lease
	// is then half way through ending (its cause set, its context not yet canceled).
	stall chan struct{}
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
}
func (r *recorder) Acquired(key string, waited time.Duration) { r.add("acquired " + key) }
func (r *recorder) Released(key string, held time.Duration, lost bool) {
	r.add(fmt.Sprintf("released %s lost=%v", key, lost))
	if r.stall != nil && lost {
		<-r.stall
	}
}
func (r *recorder) ForceReleased(key string) { r.add("forced " + key) }
func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

type fixture struct {
	f   *faulty
	l   *locks.Locker
	obs *recorder
	log *testutil.SyncBuffer
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	d, err := sqlitelock.Open(filepath.Join(t.TempDir(), "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	fx := fixture{f: &faulty{Driver: d}, obs: &recorder{}, log: &testutil.SyncBuffer{}}
	fx.l = locks.New(fx.f, locks.Options{
		PollInterval: 50 * time.Millisecond,
		Logger:       slog.New(slog.NewJSONHandler(fx.log, nil)),
		Observer:     fx.obs,
	})
	t.Cleanup(func() {
		if err := fx.l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return fx
}

var quick = locks.Budget{Timeout: 2 * time.Second}

func TestLeaseLostWhenRenewalsFailUntilLocalExpiry(t *testing.T) {
	fx := newFixture(t)
	ctx := t.Context()
	const ttl = 300 * time.Millisecond
	before := time.Now()
	le, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:a", Holder: "p#1/a", TTL: ttl, Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	work, cancel := le.Context(ctx)
	defer cancel()
	fx.f.failRenew.Store(true)
	select {
	case <-le.Done():
	case <-time.After(3 * ttl):
		t.Fatalf("lease still held %s after renewals started failing (TTL %s)", time.Since(before), ttl)
	}
	lostAfter := time.Since(before)
	// Lost no later than the TTL (less the margin) by the local clock, measured from before
	// the grant: never after the backend may have let someone else in.
	if lostAfter < ttl*9/10 {
		t.Errorf("lost after %s, before the lease could have expired (TTL %s)", lostAfter, ttl)
	}
	err = le.Err()
	if !errors.Is(err, locks.ErrLost) || !errors.Is(err, locks.ErrUnavailable) {
		t.Errorf("Err: got %v, want ErrLost wrapping the renewal failure", err)
	}
	if !strings.Contains(err.Error(), `"svc:a"`) {
		t.Errorf("Err does not name the key: %v", err)
	}
	if !errors.Is(context.Cause(work), locks.ErrLost) {
		t.Errorf("work context cause: got %v, want ErrLost", context.Cause(work))
	}
	if n := fx.f.renews.Load(); n < 2 {
		t.Errorf("renewal attempts before giving up: got %d, want retries", n)
	}
	logs := fx.log.String()
	for _, want := range []string{`"msg":"lock renewal failed"`, `"msg":"lock lease lost"`, `"lock_key":"svc:a"`, `"fence":`, `"holder":"p#1/a"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
	if tok := le.Info().Token; tok == "" || strings.Contains(logs, tok) {
		t.Errorf("the log shows the lease token")
	}
	if err := le.Release(ctx); !errors.Is(err, locks.ErrLost) {
		t.Errorf("release after loss: got %v, want ErrLost", err)
	}
	want := []string{"acquired svc:a", "released svc:a lost=true"}
	if got := fx.obs.list(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("observer: got %v, want %v", got, want)
	}
}

// TestErrSaysLostPastLocalDeadline: a holder that looks at Err after its lease's local
// deadline is told the lease is lost, even though the heartbeat that would find out has not
// come back (its renewal is held past the deadline, as on a CPU too busy to run it): Err
// never reports a lease held after the backend may have let someone else in. The lease's
// heartbeat stops then, and Release reports the loss.
// While one goroutine ends a lease past its local deadline (here held half way, in the
// observer), Err on another never reports it held: a run's work that asks in that instant
// must not act on a lease that is gone (seen: a daemon woken from SIGSTOP sent a request in
// the instant its heartbeat was ending the lease).
func TestErrSaysLostWhileAnotherGoroutineEndsIt(t *testing.T) {
	fx := newFixture(t)
	gate := make(chan struct{})
	fx.f.renewGate, fx.f.renewHeld = gate, make(chan struct{}, 1)
	fx.obs.stall = make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate); close(fx.obs.stall) }) }
	t.Cleanup(open)
	ctx := t.Context()
	const ttl = 60 * time.Millisecond
	sent := time.Now()
	le, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:s", Holder: "p#1/s", TTL: ttl, Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	<-fx.f.renewHeld // the heartbeat's first renewal, at TTL/3, is stuck
	if err := sleepUntil(ctx, sent.Add(ttl)); err != nil {
		t.Fatal(err)
	}
	ending := make(chan error, 1)
	go func() { ending <- le.Err() }() // ends the lease, and stalls in the observer
	for !slices.Contains(fx.obs.list(), "released svc:s lost=true") {
		time.Sleep(time.Millisecond) // polling the observer, which has no signal of its own
	}
	if err := le.Err(); !errors.Is(err, locks.ErrLost) {
		t.Errorf("Err while another goroutine ends the lease past its deadline: got %v, want ErrLost", err)
	}
	open()
	if err := <-ending; !errors.Is(err, locks.ErrLost) {
		t.Errorf("Err of the goroutine that ended it: got %v, want ErrLost", err)
	}
}

func TestErrSaysLostPastLocalDeadline(t *testing.T) {
	fx := newFixture(t)
	gate := make(chan struct{})
	fx.f.renewGate, fx.f.renewHeld = gate, make(chan struct{}, 1)
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the Locker's Close, which waits for the heartbeat
	ctx := t.Context()
	const ttl = 60 * time.Millisecond
	sent := time.Now()
	le, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:s", Holder: "p#1/s", TTL: ttl, Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	work, cancel := le.Context(ctx)
	defer cancel()
	<-fx.f.renewHeld // the heartbeat's first renewal, at TTL/3, is stuck
	if err := le.Err(); err != nil {
		t.Fatalf("Err before the deadline: %v", err)
	}
	// Past the TTL itself, measured from before the request: the lease is gone by any clock.
	if err := sleepUntil(ctx, sent.Add(ttl)); err != nil {
		t.Fatal(err)
	}
	err = le.Err()
	if !errors.Is(err, locks.ErrLost) {
		t.Fatalf("Err %s after the grant was requested (TTL %s), with the heartbeat stuck: got %v, want ErrLost",
			time.Since(sent), ttl, err)
	}
	select {
	case <-le.Done():
	default:
		t.Error("Err reported the loss but Done is open")
	}
	if !errors.Is(context.Cause(work), locks.ErrLost) {
		t.Errorf("work context cause: got %v, want ErrLost", context.Cause(work))
	}
	open() // the stuck renewal comes back; the heartbeat must not go on
	if err := le.Release(ctx); !errors.Is(err, locks.ErrLost) {
		t.Errorf("release after the loss: got %v, want ErrLost", err)
	}
	if got := fx.obs.list(); strings.Join(got, ",") != "acquired svc:s,released svc:s lost=true" {
		t.Errorf("observer: got %v, want one grant and one loss", got)
	}
}

// sleepUntil waits until the local clock reaches at, or ctx ends.
func sleepUntil(ctx context.Context, at time.Time) error {
	return ctxtime.Sleep(ctx, time.Until(at))
}

func TestLeaseSurvivesShortRenewalOutage(t *testing.T) {
	fx := newFixture(t)
	ctx := t.Context()
	const ttl = 900 * time.Millisecond
	le, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:b", Holder: "p#1/b", TTL: ttl, Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	fx.f.failRenew.Store(true)
	// Wait for the first renewal (at TTL/3) to fail, then let the next retry succeed.
	for fx.f.renews.Load() < 1 {
		select {
		case <-le.Done():
			t.Fatalf("lost during a short outage: %v", le.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	fx.f.failRenew.Store(false)
	select {
	case <-le.Done():
		t.Fatalf("lost during a short outage: %v", le.Err())
	case <-time.After(ttl):
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
}

func TestAcquireUnavailable(t *testing.T) {
	fx := newFixture(t)
	fx.f.failTry.Store(true)
	b := locks.Budget{Timeout: 50 * time.Millisecond, MaxRetries: 2, Backoff: []time.Duration{time.Millisecond}}
	_, err := fx.l.Acquire(t.Context(), locks.Request{Key: "svc:c", Holder: "p#1/c", Budget: b})
	if !errors.Is(err, locks.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if errors.Is(err, locks.ErrBudgetExhausted) {
		t.Errorf("a backend outage reported as budget exhaustion: %v", err)
	}
	if !strings.Contains(err.Error(), `"svc:c"`) || !strings.Contains(err.Error(), "3 attempt(s)") {
		t.Errorf("error does not name the key and attempts: %v", err)
	}
	if got := fx.f.tries.Load(); got != 3 {
		t.Errorf("TryAcquire calls: got %d, want 3 (one per attempt)", got)
	}
	// The backend coming back within the budget is fine.
	fx.f.failTry.Store(true)
	time.AfterFunc(30*time.Millisecond, func() { fx.f.failTry.Store(false) })
	b.Backoff = []time.Duration{100 * time.Millisecond}
	le, err := fx.l.Acquire(t.Context(), locks.Request{Key: "svc:c", Holder: "p#1/c", Budget: b})
	if err != nil {
		t.Fatalf("acquire after the backend came back: %v", err)
	}
	if err := le.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseUnconfirmedCanBeRetried(t *testing.T) {
	fx := newFixture(t)
	ctx := t.Context()
	le, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:d", Holder: "p#1/d", Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	fx.f.failRelease.Store(1)
	err = le.Release(ctx)
	if !errors.Is(err, locks.ErrUnavailable) {
		t.Fatalf("release during an outage: got %v, want ErrUnavailable", err)
	}
	select {
	case <-le.Done():
	default:
		t.Fatal("lease not ended by an unconfirmed release")
	}
	if !errors.Is(le.Err(), locks.ErrReleased) {
		t.Errorf("Err: got %v, want ErrReleased", le.Err())
	}
	if _, err := fx.l.Get(ctx, "svc:d"); err != nil {
		t.Fatalf("the unconfirmed release should have left the lease in the backend: %v", err)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("retried release: %v", err)
	}
	if _, err := fx.l.Get(ctx, "svc:d"); !errors.Is(err, locks.ErrNotFound) {
		t.Errorf("after the retried release: got %v, want ErrNotFound", err)
	}
	if err := le.Release(ctx); err != nil {
		t.Errorf("third release: got %v, want nil", err)
	}
}

func TestCloseEndsLeasesAndRefusesAcquire(t *testing.T) {
	d, err := sqlitelock.Open(filepath.Join(t.TempDir(), "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	l := locks.New(d, locks.Options{})
	le, err := l.Acquire(t.Context(), locks.Request{Key: "svc:e", Holder: "p#1/e", Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := le.Context(t.Context())
	defer cancel()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(le.Err(), locks.ErrLost) {
		t.Errorf("lease after Close: got %v, want ErrLost", le.Err())
	}
	if ctx.Err() == nil {
		t.Error("lease context not canceled by Close")
	}
	if _, err := l.Acquire(t.Context(), locks.Request{Key: "svc:f", Holder: "p#1/f", Budget: quick}); !errors.Is(err, locks.ErrUnavailable) {
		t.Errorf("acquire after Close: got %v, want ErrUnavailable", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestLeaseContext(t *testing.T) {
	fx := newFixture(t)
	ctx := t.Context()
	le, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:g", Holder: "p#1/g", Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	// Canceling a derived context does not touch the lease.
	c1, cancel1 := le.Context(ctx)
	cancel1()
	if c1.Err() == nil || le.Err() != nil {
		t.Fatalf("after canceling the derived context: ctx %v, lease %v", c1.Err(), le.Err())
	}
	c2, cancel2 := le.Context(ctx)
	defer cancel2()
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-c2.Done()
	if cause := context.Cause(c2); !errors.Is(cause, locks.ErrReleased) {
		t.Errorf("cause after release: got %v, want ErrReleased", cause)
	}
	// A context derived after the end is canceled at once.
	c3, cancel3 := le.Context(ctx)
	defer cancel3()
	select {
	case <-c3.Done():
	case <-time.After(time.Second):
		t.Error("context derived from an ended lease is not canceled")
	}
}

func TestAcquireValidation(t *testing.T) {
	fx := newFixture(t)
	for _, r := range []locks.Request{
		{Holder: "p#1/a"},
		{Key: "svc:a"},
		{Key: "svc:a", Holder: "p#1/a", TTL: -time.Second},
		{Key: "svc:a", Holder: "p#1/a", TTL: time.Millisecond},
		{Key: "svc:a", Holder: "p#1/a", Budget: locks.Budget{MaxRetries: 2}},
		{Key: "svc:a", Holder: "p#1/a", Budget: locks.Budget{Timeout: time.Second, MaxRetries: -1}},
		{Key: "svc:a", Holder: "p#1/a", Budget: locks.Budget{Timeout: time.Second, Backoff: []time.Duration{-1}}},
	} {
		if _, err := fx.l.Acquire(t.Context(), r); !errors.Is(err, locks.ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", r, err)
		}
	}
	if n := fx.f.tries.Load(); n != 0 {
		t.Errorf("invalid requests reached the backend %d times", n)
	}
}

func TestSameOwnerSameKeyRefused(t *testing.T) {
	fx := newFixture(t)
	le, err := fx.l.Acquire(t.Context(), locks.Request{Key: "svc:h", Holder: "p#1/h", Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(t.Context())
	// The same run taking the key again would wait for itself until its budget ran out.
	if _, err := fx.l.Acquire(t.Context(), locks.Request{Key: "svc:h", Holder: "p#1/h2", Budget: quick}); !errors.Is(err, locks.ErrInvalid) {
		t.Errorf("second acquire by the same run: got %v, want ErrInvalid", err)
	}
}

func TestNoNamespacesAllowsAnyKey(t *testing.T) {
	fx := newFixture(t)
	a, err := fx.l.Acquire(t.Context(), locks.Request{Key: "coolify:x", Holder: "p#1/a", Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(t.Context())
	b, err := fx.l.Acquire(t.Context(), locks.Request{Key: "anything", Holder: "p#1/b", Budget: quick})
	if err != nil {
		t.Fatalf("with no namespace registered: %v", err)
	}
	defer b.Release(t.Context())
	if err := fx.l.RegisterNamespace(""); !errors.Is(err, locks.ErrInvalid) {
		t.Errorf("empty namespace: got %v, want ErrInvalid", err)
	}
}

func TestNamespaceErrorsNameBoth(t *testing.T) {
	fx := newFixture(t)
	if err := fx.l.RegisterNamespace("coolify:"); err != nil {
		t.Fatal(err)
	}
	err := fx.l.RegisterNamespace("coolify:prod:")
	if !errors.Is(err, locks.ErrNamespace) || !strings.Contains(err.Error(), `"coolify:prod:"`) || !strings.Contains(err.Error(), `"coolify:"`) {
		t.Errorf("overlap error does not name both prefixes: %v", err)
	}
}

func TestObserverAndForceRelease(t *testing.T) {
	fx := newFixture(t)
	ctx := t.Context()
	le, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:i", Holder: "p#1/i", TTL: time.Minute, Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.l.ForceRelease(ctx, locks.ForceRequest{Key: "svc:i", Fence: le.Fence(), Reason: "test", LockDelay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-le.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("a lease force-released through its own Locker did not end at once")
	}
	want := "acquired svc:i,forced svc:i,released svc:i lost=true"
	got := fx.obs.list()
	// The loss may be recorded before or after the forced release returns.
	if len(got) != 3 || got[0] != "acquired svc:i" || !strings.Contains(strings.Join(got, ","), "forced svc:i") || !strings.Contains(strings.Join(got, ","), "released svc:i lost=true") {
		t.Errorf("observer: got %v, want %s", got, want)
	}
}

func TestHeldErrorMessages(t *testing.T) {
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	cur := locks.Info{Key: "coolify:phase1", Holder: "prod#12/phase1", Fence: 7, AcquiredAt: at, ExpiresAt: at.Add(time.Minute), Message: "syncing", Token: "secret-token"}
	for _, tc := range []struct {
		err  *locks.HeldError
		want []string
	}{
		{&locks.HeldError{Key: "coolify:phase1", Reason: locks.ErrBudgetExhausted, Current: cur, Attempts: 4, Waited: 247 * time.Second},
			[]string{`lock "coolify:phase1"`, "budget exhausted", "4 attempt(s)", `"prod#12/phase1"`, "fence 7", "syncing", "orchestrator locks release"}},
		{&locks.HeldError{Key: "coolify:phase1", Reason: locks.ErrFrozen, Current: cur}, []string{"frozen", "--lift"}},
		{&locks.HeldError{Key: "coolify:phase1", Reason: locks.ErrStale, Current: cur}, []string{"changed", "list the locks again"}},
		{&locks.HeldError{Key: "coolify:x", Reason: locks.ErrHeld, Current: locks.Info{ClosedUntil: at}}, []string{"closed after a forced release"}},
	} {
		msg := tc.err.Error()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%q lacks %q", msg, w)
			}
		}
		if strings.Contains(msg, "secret-token") {
			t.Errorf("%q shows the token", msg)
		}
		if !errors.Is(tc.err, locks.ErrHeld) || !errors.Is(tc.err, tc.err.Reason) {
			t.Errorf("%v does not match ErrHeld and its reason", tc.err)
		}
	}
}

// TestDefaultBudget: a request without a budget waits under Options.DefaultBudget for its
// key (the Locker knows no key names of its own).
func TestDefaultBudget(t *testing.T) {
	d, err := sqlitelock.Open(filepath.Join(t.TempDir(), "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	l := locks.New(d, locks.Options{DefaultBudget: func(key string) locks.Budget {
		asked = append(asked, key)
		return locks.Budget{} // no timeout: refused as invalid, which shows it was used
	}})
	defer l.Close()
	_, err = l.Acquire(context.Background(), locks.Request{Key: "x:phase1", Holder: "p#1/phase1"})
	if !errors.Is(err, locks.ErrInvalid) || len(asked) == 0 || asked[0] != "x:phase1" {
		t.Errorf("acquire without a budget: got %v, asked %v; want ErrInvalid from the default budget asked for x:phase1", err, asked)
	}
}

// TestIdleWaiterDoesNotPoll: a waiter whose release signal has not come makes no backend
// calls beyond its first try and the one right after subscribing, until its slow fallback
// poll, the holder's expiry, or the release signal; the signal then wakes it.
func TestIdleWaiterDoesNotPoll(t *testing.T) {
	d, err := sqlitelock.Open(filepath.Join(t.TempDir(), "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	f := &faulty{Driver: d}
	l := locks.New(f, locks.Options{PollInterval: time.Minute})
	defer l.Close()
	ctx := t.Context()
	holder, err := l.Acquire(ctx, locks.Request{Key: "svc:idle", Holder: "p#1/h", TTL: time.Minute, Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	f.tries.Store(0)
	done := make(chan error, 1)
	go func() {
		le, err := l.Acquire(ctx, locks.Request{Key: "svc:idle", Holder: "p#2/w", Budget: locks.Budget{Timeout: time.Minute}})
		if err == nil {
			err = le.Release(ctx)
		}
		done <- err
	}()
	for {
		info, err := l.Get(ctx, "svc:idle")
		if err == nil && info.Waiters == 1 && f.tries.Load() >= 2 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // an idle stretch: no calls may happen in it
	if got := f.tries.Load(); got != 2 {
		t.Errorf("TryAcquire calls of an idle waiter: got %d, want 2 (first try, and again once subscribed)", got)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
	if got := f.tries.Load(); got != 3 {
		t.Errorf("TryAcquire calls in all: got %d, want 3", got)
	}
}

// TestYoungLeaseStartsNoHeartbeat: a lease released before its first renewal or watch is
// due never started a heartbeat goroutine, so an uncontended acquire and release spawns
// none.
func TestYoungLeaseStartsNoHeartbeat(t *testing.T) {
	fx := newFixture(t)
	ctx := t.Context()
	le, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:young", Holder: "p#1/y", TTL: time.Minute, Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Only meaningful if the release came before the heartbeat was due.
	if held := time.Since(acquired); held < locks.WatchAfter && locks.HeartbeatStarted(le) {
		t.Errorf("a lease released after %s started its heartbeat; want none before %s", held, locks.WatchAfter)
	}
	if !errors.Is(le.Err(), locks.ErrReleased) || !strings.Contains(le.Err().Error(), `lock "svc:young" (fence `) {
		t.Errorf("Err: got %v, want ErrReleased naming the key and fence", le.Err())
	}
}

// TestForceReleaseWakesYoungLease: a forced release through the Locker starts the
// heartbeat of a lease too young to have one, so the loss is confirmed at once.
func TestForceReleaseWakesYoungLease(t *testing.T) {
	fx := newFixture(t)
	ctx := t.Context()
	le, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:wake", Holder: "p#1/w", TTL: time.Hour, Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.l.ForceRelease(ctx, locks.ForceRequest{Key: "svc:wake", Fence: le.Fence(), Reason: "test", LockDelay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if !locks.HeartbeatStarted(le) {
		t.Error("ForceRelease returned without starting the evicted lease's heartbeat")
	}
	select {
	case <-le.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the evicted lease did not end")
	}
	if !errors.Is(le.Err(), locks.ErrLost) {
		t.Errorf("Err: got %v, want ErrLost", le.Err())
	}
}

// TestShortLeaseAfterLongOneIsRenewed: heartbeats start when each lease needs one, not in
// the order leases were granted: a short lease granted after a long one is renewed in
// time and stays held over many of its TTLs.
func TestShortLeaseAfterLongOneIsRenewed(t *testing.T) {
	fx := newFixture(t)
	ctx := t.Context()
	long, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:long", Holder: "p#1/l", TTL: time.Hour, Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	// Short enough to be lost by the local clock before the long lease's heartbeat is due
	// (WatchAfter), long enough that a renewal at TTL/3 has two TTL/3 of slack on a busy CPU.
	const ttl = 300 * time.Millisecond
	if ttl >= locks.WatchAfter*9/10 {
		t.Fatalf("ttl %s must end before the long lease's heartbeat is due (%s)", ttl, locks.WatchAfter)
	}
	short, err := fx.l.Acquire(ctx, locks.Request{Key: "svc:short", Holder: "p#2/s", TTL: ttl, Budget: quick})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-short.Done():
		t.Fatalf("the short lease ended: %v", short.Err())
	case <-time.After(5 * ttl): // its whole life would be far behind it without renewals
	}
	if n := fx.f.renews.Load(); n < 3 {
		t.Errorf("renewals over 5 TTLs of the short lease: got %d, want at least 3", n)
	}
	for _, le := range []*locks.Lease{short, long} {
		if err := le.Release(ctx); err != nil {
			t.Errorf("release %s: %v", le.Key(), err)
		}
	}
}
