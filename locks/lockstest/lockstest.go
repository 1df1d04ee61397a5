// Package lockstest is the one conformance suite of the lock contract. Every backend runs
// it: a locks.Driver passes when a locks.Locker over it keeps mutual exclusion, refuses
// non-owners, lets the next holder in after expiry, signals lost leases, issues fences
// that only grow, serves waiters first-come-first-served, spends budgets as configured,
// returns promptly on cancellation, guards forced release, freeze and lock-delay, and leaks
// no goroutine. (The backends keep no audit trail: callers record operator actions in the
// run store's audit log, runs.AuditLog.)
//
// A backend's test calls Run with a [Backend]: Open returns a client (a Driver) of a named
// keyspace, and Stall, when the backend can be made to stop answering, does that (the suite
// closes each Driver through its Locker):
//
//	func TestConformance(t *testing.T) {
//		dir := t.TempDir()
//		lockstest.Run(t, lockstest.Backend{Open: func(t *testing.T, space string) locks.Driver {
//			d, err := sqlitelock.Open(filepath.Join(dir, space+".db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return d
//		}})
//	}
//
// The suite uses millisecond TTLs and budgets and takes a few seconds per backend.
package lockstest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deploy-orchestrator/orchestrator/locks"
)

// PollInterval is the Locker fallback poll the suite uses: long enough that a test
// which passes only thanks to polling shows up as slow, short enough to keep the suite fast.
const PollInterval = 200 * time.Millisecond

// Backend is what the suite needs of a lock backend.
type Backend struct {
	// Open returns a new client of keyspace space: the suite names a fresh, empty keyspace
	// for each subtest, and opens it more than once where it needs several clients (as of
	// several daemons) on the same keys.
	Open func(t *testing.T, space string) locks.Driver
	// Stall, when set, makes the backend stop answering — requests hang, as with a server
	// that is paused — until resume is called. The suite uses it to show that a holder
	// declares its lease lost by its own clock. nil: the backend cannot be stalled (then
	// LostWhenBackendStalls checks nothing and says so).
	Stall func(t *testing.T) (resume func())
}

// Run runs the conformance suite against b.
func Run(t *testing.T, b Backend) {
	ignore := goleak.IgnoreCurrent()
	var spaces atomic.Int64
	s := &suite{backend: b}
	s.open = func(t *testing.T) (string, locks.Driver) {
		space := fmt.Sprintf("lockstest%d", spaces.Add(1))
		return space, b.Open(t, space)
	}
	s.newDriver = func(t *testing.T) locks.Driver {
		_, d := s.open(t)
		return d
	}
	tests := []struct {
		name string
		f    func(t *testing.T)
	}{
		{"MutualExclusion", s.mutualExclusion},
		{"NonOwnerRefused", s.nonOwnerRefused},
		{"ReleaseTwiceAndAfterExpiry", s.releaseTwiceAndAfterExpiry},
		{"ExpiryLetsNextHolderIn", s.expiryLetsNextHolderIn},
		{"RenewExtends", s.renewExtends},
		{"HeartbeatKeepsLeaseAlive", s.heartbeatKeepsLeaseAlive},
		{"LostWhenDeleted", s.lostWhenDeleted},
		{"LostWhenReplaced", s.lostWhenReplaced},
		{"FencesIncrease", s.fencesIncrease},
		{"FIFO", s.fifo},
		{"QueuePlaceKept", s.queuePlaceKept},
		{"WakeOnRelease", s.wakeOnRelease},
		{"BudgetArithmetic", s.budgetArithmetic},
		{"Cancellation", s.cancellation},
		{"ForceRelease", s.forceRelease},
		{"ForceNoticedBySignal", s.forceNoticedBySignal},
		{"LockDelay", s.lockDelay},
		{"Freeze", s.freeze},
		{"HolderFormat", s.holderFormat},
		{"ListAndGet", s.listAndGet},
		{"Namespaces", s.namespaces},
		{"LateGrantNotBelieved", s.lateGrantNotBelieved},
		{"TwoClientsContend", s.twoClientsContend},
		{"RenewAfterTakeoverFails", s.renewAfterTakeoverFails},
		{"LostWhenBackendStalls", s.lostWhenBackendStalls},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.f)
	}
	if !t.Failed() {
		goleak.VerifyNone(t, ignore)
	}
}

type suite struct {
	backend Backend
	// open returns a client of a fresh keyspace and the keyspace's name.
	open func(t *testing.T) (string, locks.Driver)
	// newDriver returns a client of a fresh keyspace.
	newDriver func(t *testing.T) locks.Driver
}

// env is one subtest's backend: the raw driver (to act behind a Locker's back) and a
// Locker over it.
type env struct {
	d locks.Driver
	l *locks.Locker
}

func (s *suite) env(t *testing.T) env {
	t.Helper()
	d := s.newDriver(t)
	l := locks.New(d, locks.Options{PollInterval: PollInterval, LockDelay: 100 * time.Millisecond})
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close locker: %v", err)
		}
	})
	return env{d: d, l: l}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// quick is a budget for tests that expect a grant soon.
var quick = locks.Budget{Timeout: 3 * time.Second, MaxRetries: 0}

func req(key, holder string) locks.Request {
	return locks.Request{Key: key, Holder: holder, TTL: 2 * time.Second, Budget: quick}
}

func mustAcquire(t *testing.T, l *locks.Locker, r locks.Request) *locks.Lease {
	t.Helper()
	le, err := l.Acquire(ctxT(t), r)
	if err != nil {
		t.Fatalf("acquire %q as %q: %v", r.Key, r.Holder, err)
	}
	return le
}

func mustRelease(t *testing.T, le *locks.Lease) {
	t.Helper()
	if err := le.Release(ctxT(t)); err != nil {
		t.Fatalf("release %q: %v", le.Key(), err)
	}
}

// waitDone waits for a lease to end, failing after limit.
func waitDone(t *testing.T, le *locks.Lease, limit time.Duration) {
	t.Helper()
	select {
	case <-le.Done():
	case <-time.After(limit):
		t.Fatalf("lease %q (fence %d) did not end within %s", le.Key(), le.Fence(), limit)
	}
}

// eventually polls cond every few milliseconds until it holds, failing after limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *suite) mutualExclusion(t *testing.T) {
	e := s.env(t)
	const workers, rounds = 8, 6
	var (
		inside  atomic.Int32
		mu      sync.Mutex
		fences  []int64
		wg      sync.WaitGroup
		errs    = make(chan error, workers)
		counter int // guarded by the lock itself; -race reports a violation
	)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				r := locks.Request{Key: "test:mutex", Holder: fmt.Sprintf("w%d#%d/step", w, i), TTL: 5 * time.Second,
					Budget: locks.Budget{Timeout: 30 * time.Second}}
				le, err := e.l.Acquire(t.Context(), r)
				if err != nil {
					errs <- err
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("%d holders inside the critical section", n)
				}
				counter++
				mu.Lock()
				fences = append(fences, le.Fence())
				mu.Unlock()
				inside.Add(-1)
				if err := le.Release(t.Context()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if counter != workers*rounds {
		t.Errorf("critical sections: got %d, want %d", counter, workers*rounds)
	}
	if !slices.IsSorted(fences) || len(slices.Compact(slices.Clone(fences))) != len(fences) {
		t.Errorf("fences in grant order are not strictly increasing: %v", fences)
	}
}

func (s *suite) nonOwnerRefused(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	le := mustAcquire(t, e.l, req("test:owner", "p#1/a"))
	if err := e.d.Release(ctx, "test:owner", "not-the-token"); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("release with a foreign token: got %v, want ErrNotHeld", err)
	}
	if _, err := e.d.Renew(ctx, "test:owner", "not-the-token", time.Minute); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("renew with a foreign token: got %v, want ErrNotHeld", err)
	}
	if _, err := e.d.Renew(ctx, "test:free", "not-the-token", time.Minute); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("renew of a free key: got %v, want ErrNotHeld", err)
	}
	got, err := e.l.Get(ctx, "test:owner")
	if err != nil {
		t.Fatalf("get after refused release: %v", err)
	}
	if got.Holder != "p#1/a" || got.Fence != le.Fence() {
		t.Errorf("after refused release: got holder %q fence %d, want %q fence %d", got.Holder, got.Fence, "p#1/a", le.Fence())
	}
	if got.Token != "" {
		t.Errorf("Locker.Get shows the token")
	}
	if le.Err() != nil {
		t.Errorf("lease ended after a foreign release: %v", le.Err())
	}
	// Another holder cannot get it while it is held.
	r := req("test:owner", "p#2/b")
	r.Budget = locks.Budget{Timeout: 20 * time.Millisecond}
	if _, err := e.l.Acquire(ctx, r); !errors.Is(err, locks.ErrBudgetExhausted) {
		t.Errorf("second holder: got %v, want ErrBudgetExhausted", err)
	}
	mustRelease(t, le)
}

func (s *suite) releaseTwiceAndAfterExpiry(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	le := mustAcquire(t, e.l, req("test:twice", "p#1/a"))
	mustRelease(t, le)
	if err := le.Release(ctx); err != nil {
		t.Errorf("second release: got %v, want nil", err)
	}
	if !errors.Is(le.Err(), locks.ErrReleased) || errors.Is(le.Err(), locks.ErrLost) {
		t.Errorf("Err after release: got %v, want ErrReleased (not ErrLost)", le.Err())
	}
	// A grant whose TTL passed cannot release the next holder's lease.
	old, err := e.d.TryAcquire(ctx, locks.Grant{Key: "test:twice", Token: "old-token", Holder: "p#2/old", TTL: 30 * time.Millisecond})
	if err != nil {
		t.Fatalf("raw grant: %v", err)
	}
	next := mustAcquire(t, e.l, req("test:twice", "p#3/new"))
	if next.Fence() <= old.Fence {
		t.Errorf("fence after expiry: got %d, want > %d", next.Fence(), old.Fence)
	}
	if err := e.d.Release(ctx, "test:twice", "old-token"); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("late release by the expired holder: got %v, want ErrNotHeld", err)
	}
	if got, err := e.l.Get(ctx, "test:twice"); err != nil || got.Holder != "p#3/new" {
		t.Errorf("after late release: got %+v, %v; want holder p#3/new", got, err)
	}
	mustRelease(t, next)
}

func (s *suite) expiryLetsNextHolderIn(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	const ttl = 150 * time.Millisecond
	granted := time.Now()
	if _, err := e.d.TryAcquire(ctx, locks.Grant{Key: "test:expiry", Token: "crashed", Holder: "p#1/crashed", TTL: ttl}); err != nil {
		t.Fatalf("raw grant: %v", err)
	}
	le := mustAcquire(t, e.l, req("test:expiry", "p#2/next"))
	if waited := time.Since(granted); waited < ttl-10*time.Millisecond {
		t.Errorf("granted %s after the crashed holder's grant, before its %s TTL ran out", waited, ttl)
	}
	mustRelease(t, le)
}

func (s *suite) renewExtends(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	info, err := e.d.TryAcquire(ctx, locks.Grant{Key: "test:renew", Token: "tok", Holder: "p#1/a", TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("raw grant: %v", err)
	}
	exp, err := e.d.Renew(ctx, "test:renew", "tok", 5*time.Second)
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if !exp.After(info.ExpiresAt.Add(time.Second)) {
		t.Errorf("renewed expiry %s is not later than the granted %s", exp, info.ExpiresAt)
	}
	time.Sleep(200 * time.Millisecond) // past the original TTL
	got, err := e.d.Get(ctx, "test:renew")
	if err != nil {
		t.Fatalf("get after the original TTL: %v (renew did not extend the lease)", err)
	}
	if got.Fence != info.Fence {
		t.Errorf("fence changed by renew: got %d, want %d", got.Fence, info.Fence)
	}
	if err := e.d.Release(ctx, "test:renew", "tok"); err != nil {
		t.Errorf("release: %v", err)
	}
	if _, err := e.d.Renew(ctx, "test:renew", "tok", time.Second); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("renew after release: got %v, want ErrNotHeld", err)
	}
}

func (s *suite) heartbeatKeepsLeaseAlive(t *testing.T) {
	e := s.env(t)
	r := req("test:heartbeat", "p#1/a")
	// Renewals come every TTL/3; the rest of the TTL is slack for a loaded machine (a renewal
	// that comes too late by the local clock rightly counts as a loss, so a TTL of a few
	// hundred milliseconds made this flaky under -race on 2 busy cores).
	r.TTL = time.Second
	le := mustAcquire(t, e.l, r)
	select {
	case <-le.Done():
		t.Fatalf("lease ended under a working heartbeat: %v", le.Err())
	case <-time.After(5 * r.TTL / 2):
	}
	got, err := e.l.Get(ctxT(t), "test:heartbeat")
	if err != nil || got.Fence != le.Fence() {
		t.Fatalf("after 2.5 TTLs: got %+v, %v; want our fence %d", got, err, le.Fence())
	}
	mustRelease(t, le)
}

func (s *suite) lostWhenDeleted(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	r := req("test:deleted", "p#1/a")
	r.TTL = 300 * time.Millisecond
	le := mustAcquire(t, e.l, r)
	work, cancel := le.Context(ctx)
	defer cancel()
	// Behind the Locker's back: the raw driver, not Locker.ForceRelease.
	if _, err := e.d.ForceRelease(ctx, locks.ForceRequest{Key: r.Key, Fence: le.Fence(), Reason: "test", By: "suite", LockDelay: time.Millisecond}); err != nil {
		t.Fatalf("force release: %v", err)
	}
	waitDone(t, le, 2*r.TTL)
	if !errors.Is(le.Err(), locks.ErrLost) {
		t.Errorf("Err: got %v, want ErrLost", le.Err())
	}
	select {
	case <-work.Done():
	case <-time.After(time.Second):
		t.Fatal("lease context not canceled after loss")
	}
	if cause := context.Cause(work); !errors.Is(cause, locks.ErrLost) {
		t.Errorf("context cause: got %v, want ErrLost", cause)
	}
	if err := le.Release(ctx); !errors.Is(err, locks.ErrLost) {
		t.Errorf("release of a lost lease: got %v, want ErrLost", err)
	}
}

func (s *suite) lostWhenReplaced(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	r := req("test:replaced", "p#1/a")
	r.TTL = 300 * time.Millisecond
	le := mustAcquire(t, e.l, r)
	if _, err := e.d.ForceRelease(ctx, locks.ForceRequest{Key: r.Key, Holder: "p#1/a", Reason: "test", By: "suite", LockDelay: time.Millisecond}); err != nil {
		t.Fatalf("force release: %v", err)
	}
	var other locks.Info
	eventually(t, time.Second, "grant to the intruder", func() bool {
		var err error
		other, err = e.d.TryAcquire(ctx, locks.Grant{Key: r.Key, Token: "intruder", Holder: "p#2/intruder", TTL: 5 * time.Second})
		return err == nil
	})
	waitDone(t, le, 2*r.TTL)
	if !errors.Is(le.Err(), locks.ErrLost) {
		t.Errorf("Err: got %v, want ErrLost", le.Err())
	}
	if err := le.Release(ctx); !errors.Is(err, locks.ErrLost) {
		t.Errorf("release of a replaced lease: got %v, want ErrLost", err)
	}
	got, err := e.d.Get(ctx, r.Key)
	if err != nil || got.Fence != other.Fence {
		t.Errorf("the replaced lease's release touched the intruder: got %+v, %v", got, err)
	}
}

func (s *suite) fencesIncrease(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	var fences []int64
	for i := range 3 {
		le := mustAcquire(t, e.l, req("test:fence", fmt.Sprintf("p#%d/a", i)))
		fences = append(fences, le.Fence())
		mustRelease(t, le)
	}
	// After a forced release and lock-delay.
	le := mustAcquire(t, e.l, req("test:fence", "p#10/a"))
	fences = append(fences, le.Fence())
	if _, err := e.l.ForceRelease(ctx, locks.ForceRequest{Key: "test:fence", Fence: le.Fence(), Reason: "test", LockDelay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	le = mustAcquire(t, e.l, req("test:fence", "p#11/a"))
	fences = append(fences, le.Fence())
	mustRelease(t, le)
	// After a freeze.
	fr, err := e.l.Freeze(ctx, locks.FreezeRequest{Key: "test:fence", Message: "m", By: "suite", Until: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	fences = append(fences, fr.Fence)
	if _, err := e.l.Unfreeze(ctx, "test:fence"); err != nil {
		t.Fatal(err)
	}
	le = mustAcquire(t, e.l, req("test:fence", "p#12/a"))
	fences = append(fences, le.Fence())
	mustRelease(t, le)
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences do not strictly increase: %v", fences)
		}
	}
	// Fences are per key.
	le = mustAcquire(t, e.l, req("test:fence-other", "p#1/a"))
	if le.Fence() < 1 {
		t.Errorf("first fence of a key: got %d, want >= 1", le.Fence())
	}
	mustRelease(t, le)
}

func (s *suite) fifo(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	const key, n = "test:fifo", 5
	holder := mustAcquire(t, e.l, req(key, "p#0/holder"))
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			le, err := e.l.Acquire(ctx, req(key, fmt.Sprintf("p#%d/w", i)))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			if err := le.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		// Start the next waiter only once this one is queued.
		eventually(t, 2*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool {
			info, err := e.l.Get(ctx, key)
			return err == nil && info.Waiters == i
		})
	}
	mustRelease(t, holder)
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	want := []int{1, 2, 3, 4, 5}
	if !slices.Equal(got, want) {
		t.Errorf("grant order: got %v, want %v", got, want)
	}
}

// queuePlaceKept: a waiter keeps its place in the queue across many fallback polls (each
// refreshes its ticket before the ticket's deadline), ahead of a waiter that came later.
func (s *suite) queuePlaceKept(t *testing.T) {
	d := s.newDriver(t)
	const poll = 150 * time.Millisecond // tickets live 3 polls
	l := locks.New(d, locks.Options{PollInterval: poll})
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithCancel(ctxT(t))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // on a failure, before waiting for the waiters
	r := req("test:place", "p#0/holder")
	r.TTL = time.Minute
	holder := mustAcquire(t, l, r)
	order := make(chan string, 2)
	wait := func(name string) {
		r := req("test:place", "p#1/"+name)
		r.Owner = name
		r.Budget = locks.Budget{Timeout: 30 * time.Second}
		le, err := l.Acquire(ctx, r)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			order <- "error"
			return
		}
		order <- name
		if err := le.Release(ctx); err != nil {
			t.Errorf("%s release: %v", name, err)
		}
	}
	wg.Go(func() { wait("first") })
	eventually(t, 2*time.Second, "first queued", func() bool {
		info, err := l.Get(ctx, "test:place")
		return err == nil && info.Waiters == 1
	})
	time.Sleep(8 * poll) // several ticket lifetimes
	wg.Go(func() { wait("second") })
	eventually(t, 2*time.Second, "second queued", func() bool {
		info, err := l.Get(ctx, "test:place")
		return err == nil && info.Waiters == 2
	})
	mustRelease(t, holder)
	if got := []string{<-order, <-order}; !slices.Equal(got, []string{"first", "second"}) {
		t.Errorf("grant order: got %v, want [first second]", got)
	}
	wg.Wait() // their releases, before cancel
}

// wakeOnRelease: with the fallback poll a minute away and the holder's TTL longer than
// that, only the driver's release signal can wake the waiter.
func (s *suite) wakeOnRelease(t *testing.T) {
	d := s.newDriver(t)
	l := locks.New(d, locks.Options{PollInterval: time.Minute})
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxT(t)
	r := req("test:wake", "p#0/holder")
	r.TTL = 5 * time.Minute
	holder := mustAcquire(t, l, r)
	got := make(chan error, 1)
	go func() {
		r := req("test:wake", "p#1/waiter")
		r.Budget = locks.Budget{Timeout: 2 * time.Minute}
		le, err := l.Acquire(ctx, r)
		if err == nil {
			err = le.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 2*time.Second, "waiter queued", func() bool {
		info, err := l.Get(ctx, "test:wake")
		return err == nil && info.Waiters == 1
	})
	released := time.Now()
	mustRelease(t, holder)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by the release signal")
	}
	t.Logf("waiter granted %s after the release", time.Since(released).Round(time.Microsecond))
}

func (s *suite) budgetArithmetic(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	holder := mustAcquire(t, e.l, req("test:budget", "p#0/holder"))
	defer mustRelease(t, holder)
	b := locks.Budget{Timeout: 40 * time.Millisecond, MaxRetries: 2, Backoff: []time.Duration{20 * time.Millisecond, 50 * time.Millisecond}}
	r := req("test:budget", "p#1/late")
	r.Budget = b
	start := time.Now()
	_, err := e.l.Acquire(ctx, r)
	took := time.Since(start)
	var he *locks.HeldError
	if !errors.As(err, &he) || !errors.Is(err, locks.ErrBudgetExhausted) {
		t.Fatalf("got %v, want a *HeldError matching ErrBudgetExhausted", err)
	}
	if he.Attempts != 3 {
		t.Errorf("attempts: got %d, want 3", he.Attempts)
	}
	if want := b.MaxWait(); took < want || he.Waited < want {
		t.Errorf("took %s (reported %s), want at least 3×40ms + 20ms + 50ms = %s", took, he.Waited, want)
	}
	if he.Current.Holder != "p#0/holder" || he.Current.Fence != holder.Fence() {
		t.Errorf("current holder: got %q fence %d, want %q fence %d", he.Current.Holder, he.Current.Fence, "p#0/holder", holder.Fence())
	}
	if he.Current.Token != "" {
		t.Error("the budget error carries the holder's token")
	}
	if info, err := e.l.Get(ctx, "test:budget"); err != nil || info.Waiters != 0 {
		t.Errorf("waiters after the budget ran out: got %d (%v), want 0", info.Waiters, err)
	}
	// Defaults: "phase" keys get the phase budget, others the service budget.
	if got := locks.PhaseBudget.MaxWait(); got != 4*60*time.Second+(1+2+4)*time.Second {
		t.Errorf("PhaseBudget.MaxWait: got %s", got)
	}
	if got := locks.ServiceBudget.MaxWait(); got != 3*30*time.Second+(1+2)*time.Second {
		t.Errorf("ServiceBudget.MaxWait: got %s", got)
	}
}

func (s *suite) cancellation(t *testing.T) {
	e := s.env(t)
	holder := mustAcquire(t, e.l, req("test:cancel", "p#0/holder"))
	defer mustRelease(t, holder)
	for _, tc := range []struct {
		name string
		want error
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"canceled", context.Canceled, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}},
		{"deadline", context.DeadlineExceeded, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), 50*time.Millisecond)
		}},
	} {
		ctx, cancel := tc.ctx()
		r := req("test:cancel", "p#1/"+tc.name)
		r.Budget = locks.Budget{Timeout: 10 * time.Second, MaxRetries: 3}
		start := time.Now()
		_, err := e.l.Acquire(ctx, r)
		cancel()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		if errors.Is(err, locks.ErrBudgetExhausted) {
			t.Errorf("%s: cancellation reported as budget exhaustion: %v", tc.name, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: returned %s after start, want promptly after 50ms", tc.name, took)
		}
	}
	if info, err := e.l.Get(ctxT(t), "test:cancel"); err != nil || info.Waiters != 0 {
		t.Errorf("waiters after cancellation: got %d (%v), want 0", info.Waiters, err)
	}
}

func (s *suite) forceRelease(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	r := req("test:force", "p#1/a")
	r.TTL = 10 * time.Second // the loss must come from the forced release, not a renewal
	le := mustAcquire(t, e.l, r)
	for _, tc := range []struct {
		name string
		fr   locks.ForceRequest
		want error
	}{
		{"stale fence", locks.ForceRequest{Key: r.Key, Fence: le.Fence() + 1, Reason: "x"}, locks.ErrStale},
		{"stale holder", locks.ForceRequest{Key: r.Key, Holder: "p#0/old", Reason: "x"}, locks.ErrStale},
		{"no reason", locks.ForceRequest{Key: r.Key, Fence: le.Fence()}, locks.ErrInvalid},
		{"fence and holder", locks.ForceRequest{Key: r.Key, Fence: le.Fence(), Holder: "p#1/a", Reason: "x"}, locks.ErrInvalid},
		{"neither", locks.ForceRequest{Key: r.Key, Reason: "x"}, locks.ErrInvalid},
		{"free key", locks.ForceRequest{Key: "test:force-free", Fence: 1, Reason: "x"}, locks.ErrNotFound},
	} {
		_, err := e.l.ForceRelease(ctx, tc.fr)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		var he *locks.HeldError
		if tc.want == locks.ErrStale {
			if !errors.As(err, &he) || he.Current.Holder != "p#1/a" || he.Current.Fence != le.Fence() {
				t.Errorf("%s: the refusal does not name the current holder: %v", tc.name, err)
			}
		}
	}
	if le.Err() != nil {
		t.Fatalf("refused forced releases ended the lease: %v", le.Err())
	}
	evicted, err := e.l.ForceRelease(ctx, locks.ForceRequest{Key: r.Key, Fence: le.Fence(), Reason: "crashed", By: "ops"})
	if err != nil {
		t.Fatalf("force release: %v", err)
	}
	if evicted.Holder != "p#1/a" || evicted.Fence != le.Fence() || evicted.Token != "" {
		t.Errorf("evicted: got %+v", evicted)
	}
	waitDone(t, le, time.Second)
	if !errors.Is(le.Err(), locks.ErrLost) {
		t.Errorf("evicted lease Err: got %v, want ErrLost", le.Err())
	}
}

// forceNoticedBySignal: a holder whose lease is force-released behind its back (as by an
// operator in another process) learns of it from the release signal, within the
// lock-delay, long before its next renewal.
func (s *suite) forceNoticedBySignal(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	r := req("test:watch", "p#1/a")
	r.TTL = 30 * time.Second // next renewal after 10s
	le := mustAcquire(t, e.l, r)
	time.Sleep(time.Second) // the lease is old enough to listen to its key
	forced := time.Now()
	if _, err := e.d.ForceRelease(ctx, locks.ForceRequest{Key: r.Key, Fence: le.Fence(), Reason: "test", By: "suite", LockDelay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, le, 3*time.Second)
	if !errors.Is(le.Err(), locks.ErrLost) {
		t.Errorf("Err: got %v, want ErrLost", le.Err())
	}
	t.Logf("forced release noticed after %s", time.Since(forced).Round(time.Millisecond))
}

func (s *suite) lockDelay(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	le := mustAcquire(t, e.l, req("test:delay", "p#1/a"))
	const delay = 250 * time.Millisecond
	forced := time.Now()
	if _, err := e.l.ForceRelease(ctx, locks.ForceRequest{Key: "test:delay", Holder: "p#1/a", Reason: "crashed", LockDelay: delay}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Get(ctx, "test:delay"); !errors.Is(err, locks.ErrNotFound) {
		t.Errorf("get during lock-delay: got %v, want ErrNotFound", err)
	}
	_, err := e.d.TryAcquire(ctx, locks.Grant{Key: "test:delay", Token: "x", Holder: "p#2/eager", TTL: time.Second})
	var he *locks.HeldError
	if !errors.As(err, &he) || he.Current.ClosedUntil.IsZero() {
		t.Errorf("grant during lock-delay: got %v, want a *HeldError with ClosedUntil", err)
	}
	next := mustAcquire(t, e.l, req("test:delay", "p#3/next"))
	if waited := time.Since(forced); waited < delay-10*time.Millisecond {
		t.Errorf("granted %s after the forced release, inside the %s lock-delay", waited, delay)
	}
	mustRelease(t, next)
	waitDone(t, le, time.Second)
}

func (s *suite) freeze(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	const key = "test:freeze"
	fr, err := e.l.Freeze(ctx, locks.FreezeRequest{Key: key, Message: "release freeze", By: "ops", Until: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatalf("freeze: %v", err)
	}
	if !fr.Frozen || fr.Token != "" {
		t.Errorf("freeze info: got %+v", fr)
	}
	got, err := e.l.Get(ctx, key)
	if err != nil || !got.Frozen || got.Message != "release freeze" {
		t.Errorf("get of a frozen key: got %+v, %v", got, err)
	}
	// FailOnFrozen fails at once.
	r := req(key, "p#1/a")
	r.FailOnFrozen = true
	start := time.Now()
	_, err = e.l.Acquire(ctx, r)
	if !errors.Is(err, locks.ErrFrozen) {
		t.Errorf("FailOnFrozen: got %v, want ErrFrozen", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("FailOnFrozen took %s, want at once", took)
	}
	// Otherwise the run waits within its budget...
	r = req(key, "p#2/a")
	r.Budget = locks.Budget{Timeout: 30 * time.Millisecond}
	_, err = e.l.Acquire(ctx, r)
	var he *locks.HeldError
	if !errors.As(err, &he) || !errors.Is(err, locks.ErrBudgetExhausted) || !he.Current.Frozen {
		t.Errorf("waiting on a freeze: got %v, want ErrBudgetExhausted naming the freeze", err)
	}
	// ...and gets the key when the freeze is lifted.
	got2 := make(chan error, 1)
	go func() {
		le, err := e.l.Acquire(ctx, req(key, "p#3/a"))
		if err == nil {
			err = le.Release(ctx)
		}
		got2 <- err
	}()
	eventually(t, 2*time.Second, "waiter queued", func() bool {
		info, err := e.l.Get(ctx, key)
		return err == nil && info.Waiters == 1
	})
	if _, err := e.l.Freeze(ctx, locks.FreezeRequest{Key: key, Message: "again", Until: time.Now().Add(time.Minute)}); !errors.Is(err, locks.ErrHeld) {
		t.Errorf("freeze of a frozen key: got %v, want ErrHeld", err)
	}
	if _, err := e.l.Unfreeze(ctx, key); err != nil {
		t.Fatalf("unfreeze: %v", err)
	}
	if err := <-got2; err != nil {
		t.Errorf("waiter after unfreeze: %v", err)
	}
	if _, err := e.l.Unfreeze(ctx, key); !errors.Is(err, locks.ErrNotFound) {
		t.Errorf("unfreeze of a free key: got %v, want ErrNotFound", err)
	}
	// Freeze of a held key is refused; a freeze expires by itself.
	le := mustAcquire(t, e.l, req(key, "p#4/a"))
	if _, err := e.l.Freeze(ctx, locks.FreezeRequest{Key: key, Message: "m", Until: time.Now().Add(time.Minute)}); !errors.Is(err, locks.ErrHeld) {
		t.Errorf("freeze of a held key: got %v, want ErrHeld", err)
	}
	mustRelease(t, le)
	if _, err := e.l.Freeze(ctx, locks.FreezeRequest{Key: key, Message: "short", Until: time.Now().Add(100 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	le = mustAcquire(t, e.l, req(key, "p#5/a"))
	mustRelease(t, le)
	if _, err := e.l.Freeze(ctx, locks.FreezeRequest{Key: key, Message: "m", Until: time.Now().Add(-time.Second)}); !errors.Is(err, locks.ErrInvalid) {
		t.Errorf("freeze in the past: got %v, want ErrInvalid", err)
	}
	if _, err := e.l.Freeze(ctx, locks.FreezeRequest{Key: key, Until: time.Now().Add(time.Minute)}); !errors.Is(err, locks.ErrInvalid) {
		t.Errorf("freeze without a message: got %v, want ErrInvalid", err)
	}
}

// holderFormat pins what every backend shows as a lease's holder, so the API, the CLI and
// the dashboard read the same on each: an acquired lease shows the request's Holder as
// given; a freeze by alice shows "operator:alice" ("operator:unknown" when nobody is
// named); a forced release names the evicted lease by the holder it showed (what the
// caller's audit record keeps).
func (s *suite) holderFormat(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	const key = "test:holder"
	holderOf := func(what string) string {
		t.Helper()
		got, err := e.l.Get(ctx, key)
		if err != nil {
			t.Fatalf("get %s: %v", what, err)
		}
		list, err := e.l.List(ctx, key)
		if err != nil || len(list) != 1 || list[0].Holder != got.Holder {
			t.Errorf("list %s: got %+v, %v; want one lease held by %q", what, list, err, got.Holder)
		}
		return got.Holder
	}
	check := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got holder %q, want %q", what, got, want)
		}
	}

	le := mustAcquire(t, e.l, locks.Request{Key: key, Holder: "prod#12/api", Owner: "run-12", TTL: 10 * time.Second, Budget: quick})
	check("lease", le.Holder(), "prod#12/api")
	check("get of an acquired key", holderOf("acquired"), "prod#12/api")
	_, err := e.l.Acquire(ctx, locks.Request{Key: key, Holder: "prod#13/api", Budget: locks.Budget{Timeout: 20 * time.Millisecond}})
	var he *locks.HeldError
	if !errors.As(err, &he) {
		t.Fatalf("acquire of a held key: got %v, want a *HeldError", err)
	}
	check("acquire refused by a lease", he.Current.Holder, "prod#12/api")
	evicted, err := e.l.ForceRelease(ctx, locks.ForceRequest{Key: key, Holder: "prod#12/api", Reason: "crashed", By: "alice", LockDelay: time.Millisecond})
	if err != nil {
		t.Fatalf("force release by holder: %v", err)
	}
	check("evicted lease", evicted.Holder, "prod#12/api")
	waitDone(t, le, time.Second)

	var fr locks.Info
	eventually(t, time.Second, "lock-delay over", func() bool {
		fr, err = e.l.Freeze(ctx, locks.FreezeRequest{Key: key, Message: "release freeze", By: "alice", Until: time.Now().Add(time.Minute)})
		return err == nil
	})
	check("freeze by alice", fr.Holder, "operator:alice")
	check("get of a frozen key", holderOf("frozen"), "operator:alice")
	r := req(key, "prod#14/api")
	r.FailOnFrozen = true
	_, err = e.l.Acquire(ctx, r)
	if !errors.As(err, &he) || !errors.Is(err, locks.ErrFrozen) {
		t.Fatalf("acquire of a frozen key: got %v, want ErrFrozen", err)
	}
	check("acquire refused by a freeze", he.Current.Holder, "operator:alice")
	_, err = e.l.Freeze(ctx, locks.FreezeRequest{Key: key, Message: "again", By: "bob", Until: time.Now().Add(time.Minute)})
	if !errors.As(err, &he) {
		t.Fatalf("freeze of a frozen key: got %v, want a *HeldError", err)
	}
	check("freeze refused by a freeze", he.Current.Holder, "operator:alice")
	evicted, err = e.l.ForceRelease(ctx, locks.ForceRequest{Key: key, Holder: "operator:alice", Reason: "stuck", By: "bob", LockDelay: time.Millisecond})
	if err != nil {
		t.Fatalf("force release of a freeze by its holder: %v", err)
	}
	check("evicted freeze", evicted.Holder, "operator:alice")

	eventually(t, time.Second, "lock-delay over", func() bool {
		fr, err = e.l.Freeze(ctx, locks.FreezeRequest{Key: key, Message: "anonymous", Until: time.Now().Add(time.Minute)})
		return err == nil
	})
	check("freeze by nobody named", fr.Holder, "operator:unknown")
	check("get of an anonymous freeze", holderOf("frozen anonymously"), "operator:unknown")
	lifted, err := e.l.Unfreeze(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	check("lifted freeze", lifted.Holder, "operator:unknown")
	if lifted.Fence != fr.Fence || !lifted.Frozen || lifted.Message != "anonymous" || lifted.Token != "" {
		t.Errorf("lifted freeze: got %+v, want the freeze (fence %d, message, no token)", lifted, fr.Fence)
	}
}

func (s *suite) listAndGet(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	if _, err := e.l.Get(ctx, "test:list-none"); !errors.Is(err, locks.ErrNotFound) {
		t.Errorf("get of a free key: got %v, want ErrNotFound", err)
	}
	r := req("test:list-b", "p#1/b")
	r.Message = "syncing"
	b := mustAcquire(t, e.l, r)
	a := mustAcquire(t, e.l, req("test:list-a", "p#1/a"))
	other := mustAcquire(t, e.l, req("zzz:other", "p#2/z"))
	infos, err := e.l.List(ctx, "test:")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, i := range infos {
		keys = append(keys, i.Key)
		if i.Token != "" {
			t.Errorf("List shows the token of %q", i.Key)
		}
	}
	if want := []string{"test:list-a", "test:list-b"}; !slices.Equal(keys, want) {
		t.Fatalf("List(\"test:\"): got %v, want %v", keys, want)
	}
	got := infos[1]
	if got.Holder != "p#1/b" || got.Fence != b.Fence() || got.Message != "syncing" ||
		got.AcquiredAt.IsZero() || !got.ExpiresAt.After(got.AcquiredAt) {
		t.Errorf("listed lease: got %+v", got)
	}
	all, err := e.l.List(ctx, "")
	if err != nil || len(all) != 3 {
		t.Errorf("List(\"\"): got %d leases (%v), want 3", len(all), err)
	}
	for _, le := range []*locks.Lease{a, b, other} {
		mustRelease(t, le)
	}
	if infos, err := e.l.List(ctx, ""); err != nil || len(infos) != 0 {
		t.Errorf("List after releases: got %v, %v", infos, err)
	}
	if err := e.l.Ping(ctx); err != nil {
		t.Errorf("ping: %v", err)
	}
}

func (s *suite) namespaces(t *testing.T) {
	e := s.env(t)
	ctx := ctxT(t)
	if err := e.l.RegisterNamespace("coolify:"); err != nil {
		t.Fatal(err)
	}
	if err := e.l.RegisterNamespace("mobile:"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"coolify:", "coolify:x", "co", "mobile:flagsmith:"} {
		err := e.l.RegisterNamespace(p)
		if !errors.Is(err, locks.ErrNamespace) {
			t.Errorf("register %q: got %v, want ErrNamespace", p, err)
		}
	}
	if _, err := e.l.Acquire(ctx, req("other:x", "p#1/a")); !errors.Is(err, locks.ErrNamespace) {
		t.Errorf("key outside the namespaces: got %v, want ErrNamespace", err)
	}
	phase := mustAcquire(t, e.l, locks.Request{Key: "coolify:phase1", Holder: "p#1/phase1", Owner: "p#1", TTL: time.Second, Budget: quick})
	svc := mustAcquire(t, e.l, locks.Request{Key: "coolify:svc-1", Holder: "p#1/svc-1", Owner: "p#1", TTL: time.Second, Budget: quick})
	if got, want := e.l.Held("p#1"), []string{"coolify:phase1", "coolify:svc-1"}; !slices.Equal(got, want) {
		t.Errorf("Held: got %v, want %v", got, want)
	}
	mob := locks.Request{Key: "mobile:flagsmith:version_state", Holder: "p#1/mobile", TTL: time.Second, Budget: quick}
	if _, err := e.l.Acquire(ctx, mob); !errors.Is(err, locks.ErrNamespace) {
		t.Errorf("mobile key while holding coolify keys: got %v, want ErrNamespace", err)
	}
	// Another run may take the mobile key meanwhile.
	other := mustAcquire(t, e.l, locks.Request{Key: "mobile:flagsmith:version_state", Holder: "p#2/mobile", TTL: time.Second, Budget: quick})
	mustRelease(t, other)
	mustRelease(t, svc)
	mustRelease(t, phase)
	if got := e.l.Held("p#1"); len(got) != 0 {
		t.Errorf("Held after release: got %v, want none", got)
	}
	le := mustAcquire(t, e.l, mob) // owner "p#1" from the holder
	mustRelease(t, le)
}

// locker returns a Locker over d, closed when the test ends.
func locker(t *testing.T, d locks.Driver) *locks.Locker {
	t.Helper()
	l := locks.New(d, locks.Options{PollInterval: PollInterval, LockDelay: time.Millisecond})
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close locker: %v", err)
		}
	})
	return l
}

// twoClientsContend: two Lockers, each over its own client of one keyspace (two daemons on
// one backend), take turns on a key; a critical section that notices a second holder inside
// never does, and the fences of the grants only grow.
func (s *suite) twoClientsContend(t *testing.T) {
	space, d1 := s.open(t)
	lockers := []*locks.Locker{locker(t, d1), locker(t, s.backend.Open(t, space))}
	const workers, rounds = 6, 5
	var (
		inside  atomic.Int32
		mu      sync.Mutex
		fences  []int64
		holders []string
		wg      sync.WaitGroup
		errs    = make(chan error, workers*rounds)
	)
	for w := range workers {
		l := lockers[w%2]
		wg.Go(func() {
			for i := range rounds {
				le, err := l.Acquire(t.Context(), locks.Request{Key: "test:two", Holder: fmt.Sprintf("w%d#%d/c%d", w, i, w%2),
					TTL: 5 * time.Second, Budget: locks.Budget{Timeout: 30 * time.Second}})
				if err != nil {
					errs <- err
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("%d holders inside the critical section (%s among them)", n, le.Holder())
				}
				for range 50 { // stay inside a while, so an overlapping holder has time to show up
					runtime.Gosched()
					if n := inside.Load(); n != 1 {
						errs <- fmt.Errorf("%d holders inside the critical section (%s among them)", n, le.Holder())
						break
					}
				}
				mu.Lock()
				fences = append(fences, le.Fence())
				holders = append(holders, le.Holder())
				mu.Unlock()
				inside.Add(-1)
				if err := le.Release(t.Context()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !slices.IsSorted(fences) || len(slices.Compact(slices.Clone(fences))) != len(fences) {
		t.Errorf("fences in grant order are not strictly increasing: %v (holders %v)", fences, holders)
	}
	clients := map[byte]bool{}
	for _, h := range holders {
		clients[h[len(h)-1]] = true
	}
	if len(clients) != 2 {
		t.Errorf("grants went to clients %v, want both", clients)
	}
}

// renewAfterTakeoverFails: once a lease has expired and another client holds the key, the
// first holder's renewal fails with ErrNotHeld and leaves the new holder's lease alone.
func (s *suite) renewAfterTakeoverFails(t *testing.T) {
	space, d1 := s.open(t)
	d2 := s.backend.Open(t, space)
	locker(t, d1) // closes d1 at the end
	locker(t, d2)
	ctx := ctxT(t)
	const key = "test:takeover"
	if _, err := d1.TryAcquire(ctx, locks.Grant{Key: key, Token: "first", Holder: "c1/a", TTL: 50 * time.Millisecond}); err != nil {
		t.Fatalf("first grant: %v", err)
	}
	var second locks.Info
	eventually(t, 3*time.Second, "the second client's grant after the first lease expired", func() bool {
		var err error
		second, err = d2.TryAcquire(ctx, locks.Grant{Key: key, Token: "second", Holder: "c2/b", TTL: 5 * time.Second})
		return err == nil
	})
	if _, err := d1.Renew(ctx, key, "first", 5*time.Second); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("renewal by the first holder after the takeover: got %v, want ErrNotHeld", err)
	}
	if err := d1.Release(ctx, key, "first"); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("release by the first holder after the takeover: got %v, want ErrNotHeld", err)
	}
	got, err := d2.Get(ctx, key)
	if err != nil || got.Fence != second.Fence || got.Holder != "c2/b" {
		t.Errorf("the second holder's lease after the first one's renewal: %+v, %v; want fence %d of c2/b", got, err, second.Fence)
	}
	if _, err := d2.Renew(ctx, key, "second", 5*time.Second); err != nil {
		t.Errorf("the second holder cannot renew: %v", err)
	}
}

// lostWhenBackendStalls: a backend that stops answering cannot renew the lease; the holder
// declares it lost by its own clock while the backend is still stalled, so before the lease
// could expire there and be granted to someone else.
func (s *suite) lostWhenBackendStalls(t *testing.T) {
	if s.backend.Stall == nil {
		t.Log("this backend cannot be stalled; nothing checked")
		return
	}
	l := locker(t, s.newDriver(t))
	le := mustAcquire(t, l, locks.Request{Key: "test:stall", Holder: "p#1/a", TTL: time.Second, Budget: quick})
	resume := s.backend.Stall(t)
	resumed := false
	defer func() {
		if !resumed {
			resume()
		}
	}()
	select {
	case <-le.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the lease was not declared lost within 10s of a stalled backend (TTL 1s)")
	}
	if !errors.Is(le.Err(), locks.ErrLost) {
		t.Errorf("Err after the stall: got %v, want ErrLost", le.Err())
	}
	resumed = true
	resume()
	// Once the backend answers again the key is free (the lease expired there too) and the
	// lost lease's release cannot touch the next holder.
	next := mustAcquire(t, l, locks.Request{Key: "test:stall", Holder: "p#2/b", TTL: 5 * time.Second, Budget: quick})
	if err := le.Release(ctxT(t)); !errors.Is(err, locks.ErrLost) {
		t.Errorf("release of the lost lease: got %v, want ErrLost", err)
	}
	if err := next.Err(); err != nil || next.Fence() <= le.Fence() {
		t.Errorf("the next holder: fence %d (lost lease %d), err %v", next.Fence(), le.Fence(), err)
	}
	mustRelease(t, next)
}

// slowGrants answers the first TryAcquire that the backend granted only after delay: the
// grant arrives after the lease it names must be presumed expired.
type slowGrants struct {
	locks.Driver
	delay time.Duration
	once  sync.Once
	late  atomic.Int64 // fence of the late grant
}

func (d *slowGrants) TryAcquire(ctx context.Context, g locks.Grant) (locks.Info, error) {
	info, err := d.Driver.TryAcquire(ctx, g)
	if err == nil {
		d.once.Do(func() {
			d.late.Store(info.Fence)
			time.Sleep(d.delay)
		})
	}
	return info, err
}

// lateGrantNotBelieved: a grant that arrives after the lease's local deadline (send time +
// TTL - margin) is not handed out; the token is given back and the Locker tries again.
func (s *suite) lateGrantNotBelieved(t *testing.T) {
	d := &slowGrants{Driver: s.newDriver(t), delay: 300 * time.Millisecond}
	l := locks.New(d, locks.Options{PollInterval: 20 * time.Millisecond, LockDelay: time.Millisecond})
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close locker: %v", err)
		}
	})
	le := mustAcquire(t, l, locks.Request{Key: "k:late", Holder: "a", TTL: 100 * time.Millisecond, Budget: quick})
	defer mustRelease(t, le)
	if late := d.late.Load(); late == 0 || le.Fence() <= late {
		t.Fatalf("lease has fence %d, the late grant had %d: the late grant was believed", le.Fence(), late)
	}
	if err := le.Err(); err != nil {
		t.Fatalf("the lease granted after the late one is not live: %v", err)
	}
}
