package redislock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

func newTestDriver(t *testing.T, srv *redistest.Server, opts Options) *Driver {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	d := New(client, opts)
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close driver: %v", err)
		}
		_ = client.Close()
	})
	return d
}

func grant(key, holder string) locks.Grant {
	return locks.Grant{Key: key, Token: "tok-" + holder, Holder: holder, TTL: time.Minute}
}

func TestAcquireHeldReleaseFence(t *testing.T) {
	ctx := t.Context()
	d := newTestDriver(t, redistest.Start(t), Options{})

	a, err := d.TryAcquire(ctx, locks.Grant{Key: "coolify:phase1", Token: "secret-token-a", Holder: "prod#1/a", Message: "syncing", TTL: time.Minute})
	if err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	if a.Fence <= 0 || a.Holder != "prod#1/a" || a.Message != "syncing" || !a.ExpiresAt.After(a.AcquiredAt) {
		t.Fatalf("granted %+v, want a positive fence, holder, message and expiry after acquisition", a)
	}

	_, err = d.TryAcquire(ctx, locks.Grant{Key: "coolify:phase1", Token: "tb", Holder: "prod#2/b", TTL: time.Minute})
	var he *locks.HeldError
	if !errors.As(err, &he) || !errors.Is(err, locks.ErrHeld) {
		t.Fatalf("second acquire: got %v, want a *HeldError matching ErrHeld", err)
	}
	if he.Current.Holder != "prod#1/a" || he.Current.Fence != a.Fence || he.Current.Message != "syncing" {
		t.Fatalf("held error names %+v, want holder prod#1/a fence %d", he.Current, a.Fence)
	}
	if he.Current.Token != "" || strings.Contains(err.Error(), "secret-token") {
		t.Fatalf("held error leaks the token: %v", err)
	}

	// A retried attempt by the winner gets the same grant back, its expiry renewed from
	// now (here with a longer TTL), so a caller timing the lease from its retry is right.
	again, err := d.TryAcquire(ctx, locks.Grant{Key: "coolify:phase1", Token: "secret-token-a", Holder: "prod#1/a", TTL: 2 * time.Minute})
	if err != nil || again.Fence != a.Fence {
		t.Fatalf("retried acquire: got %+v, %v; want fence %d", again, err, a.Fence)
	}
	if got := again.ExpiresAt.Sub(a.ExpiresAt); got < 30*time.Second {
		t.Fatalf("retried acquire: expiry moved by %s, want about a minute (renewed to now+2m)", got)
	}
	if cur, err := d.Get(ctx, "coolify:phase1"); err != nil || !cur.ExpiresAt.Equal(again.ExpiresAt) {
		t.Fatalf("stored lease after the retry: got %+v, %v; want expiry %s", cur, err, again.ExpiresAt)
	}

	if err := d.Release(ctx, "coolify:phase1", "tb"); !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("release by non-owner: got %v, want ErrNotHeld", err)
	}
	if err := d.Release(ctx, "coolify:phase1", "secret-token-a"); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := d.Release(ctx, "coolify:phase1", "secret-token-a"); !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("second release: got %v, want ErrNotHeld", err)
	}
	b, err := d.TryAcquire(ctx, locks.Grant{Key: "coolify:phase1", Token: "tb", Holder: "prod#2/b", TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if b.Fence <= a.Fence {
		t.Fatalf("fence after release: got %d, want > %d", b.Fence, a.Fence)
	}
}

func TestRenewAndExpiry(t *testing.T) {
	ctx := t.Context()
	d := newTestDriver(t, redistest.Start(t), Options{})

	g := grant("coolify:svc", "p#1/s")
	g.TTL = 200 * time.Millisecond
	a, err := d.TryAcquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := d.Renew(ctx, g.Key, g.Token, time.Minute)
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if !exp.After(a.ExpiresAt.Add(30 * time.Second)) {
		t.Fatalf("renewed expiry %v, want about a minute after %v", exp, a.AcquiredAt)
	}
	if _, err := d.Renew(ctx, g.Key, "other", time.Minute); !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("renew by non-owner: got %v, want ErrNotHeld", err)
	}

	// Shorten the lease and let Redis expire it.
	if _, err := d.Renew(ctx, g.Key, g.Token, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		_, err := d.Get(ctx, g.Key)
		return errors.Is(err, locks.ErrNotFound)
	})
	if _, err := d.Renew(ctx, g.Key, g.Token, time.Minute); !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("renew after expiry: got %v, want ErrNotHeld", err)
	}
	b, err := d.TryAcquire(ctx, grant(g.Key, "p#2/s"))
	if err != nil {
		t.Fatalf("acquire after expiry: %v", err)
	}
	if b.Fence <= a.Fence {
		t.Fatalf("fence after expiry: got %d, want > %d", b.Fence, a.Fence)
	}
}

// waitFor polls cond until it holds or the test's 10 s patience runs out. It waits on
// Redis' own clock (key expiry), which no channel can signal.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFenceGrowsAcrossRestart(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	d := newTestDriver(t, srv, Options{})

	var last int64
	for i := range 50 {
		g := grant("coolify:svc", "p#1/s")
		info, err := d.TryAcquire(ctx, g)
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if info.Fence <= last {
			t.Fatalf("grant %d: fence %d, want > %d", i, info.Fence, last)
		}
		last = info.Fence
		if err := d.Release(ctx, g.Key, g.Token); err != nil {
			t.Fatal(err)
		}
	}
	srv.Restart() // empty: the counter is gone
	var info locks.Info
	waitFor(t, func() bool {
		var err error
		info, err = d.TryAcquire(ctx, grant("coolify:svc", "p#2/s"))
		return err == nil
	})
	if info.Fence <= last {
		t.Fatalf("fence after an empty restart: got %d, want > %d", info.Fence, last)
	}
}

func TestFIFOQueue(t *testing.T) {
	ctx := t.Context()
	d := newTestDriver(t, redistest.Start(t), Options{})
	const key = "coolify:phase2"

	holder := grant(key, "h#1/x")
	if _, err := d.TryAcquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	first := locks.Grant{Key: key, Token: "t1", Holder: "w#1/x", TTL: time.Minute, Ticket: "q1", TicketDeadline: deadline}
	second := locks.Grant{Key: key, Token: "t2", Holder: "w#2/x", TTL: time.Minute, Ticket: "q2", TicketDeadline: deadline}
	for _, g := range []locks.Grant{first, second} {
		if _, err := d.TryAcquire(ctx, g); !errors.Is(err, locks.ErrHeld) {
			t.Fatalf("%s while held: got %v, want ErrHeld", g.Ticket, err)
		}
	}
	info, err := d.Get(ctx, key)
	if err != nil || info.Waiters != 2 {
		t.Fatalf("get: got %+v, %v; want 2 waiters", info, err)
	}
	if err := d.Release(ctx, key, holder.Token); err != nil {
		t.Fatal(err)
	}
	// The key is free but promised to q1: q2 and a caller without a ticket are refused.
	if _, err := d.TryAcquire(ctx, second); !errors.Is(err, locks.ErrHeld) {
		t.Fatalf("second waiter before the first: got %v, want ErrHeld", err)
	}
	if _, err := d.TryAcquire(ctx, grant(key, "late#1/x")); !errors.Is(err, locks.ErrHeld) {
		t.Fatalf("newcomer before the queue: got %v, want ErrHeld", err)
	}
	if _, err := d.TryAcquire(ctx, first); err != nil {
		t.Fatalf("first waiter: %v", err)
	}
	if err := d.Release(ctx, key, first.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := d.TryAcquire(ctx, second); err != nil {
		t.Fatalf("second waiter after the first: %v", err)
	}
	if err := d.Release(ctx, key, second.Token); err != nil {
		t.Fatal(err)
	}

	// A waiter that leaves, or whose deadline passes, no longer blocks the key.
	if _, err := d.TryAcquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	gone := locks.Grant{Key: key, Token: "t3", Holder: "w#3/x", TTL: time.Minute, Ticket: "q3", TicketDeadline: deadline}
	dead := locks.Grant{Key: key, Token: "t4", Holder: "w#4/x", TTL: time.Minute, Ticket: "q4", TicketDeadline: time.Now().Add(30 * time.Millisecond)}
	for _, g := range []locks.Grant{gone, dead} {
		if _, err := d.TryAcquire(ctx, g); !errors.Is(err, locks.ErrHeld) {
			t.Fatalf("%s while held: got %v, want ErrHeld", g.Ticket, err)
		}
	}
	if err := d.LeaveQueue(ctx, key, "q3"); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, key, holder.Token); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		_, err := d.TryAcquire(ctx, grant(key, "late#2/x"))
		return err == nil
	})
}

func TestSubscribe(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	d := newTestDriver(t, srv, Options{})
	const key = "mobile:flagsmith:version_state"

	s1, err := d.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := d.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.Subscribe(ctx, "mobile:other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	g := grant(key, "m#1/flag")
	if _, err := d.TryAcquire(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, key, g.Token); err != nil {
		t.Fatal(err)
	}
	for i, s := range []locks.Subscription{s1, s2} {
		select {
		case <-s.C():
		case <-time.After(5 * time.Second):
			t.Fatalf("subscriber %d: no release signal within 5s", i+1)
		}
	}
	select {
	case <-other.C():
		t.Fatal("a release of one key signalled another key's subscriber")
	default:
	}

	// Closing one subscriber keeps the shared channel for the other.
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.TryAcquire(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, key, g.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s2.C():
	case <-time.After(5 * time.Second):
		t.Fatal("remaining subscriber: no release signal within 5s")
	}

	// After Redis restarts, go-redis resubscribes and the subscriber is woken once (a
	// release may have been missed); releases after that are delivered again.
	srv.Restart()
	select {
	case <-s2.C():
	case <-time.After(15 * time.Second):
		t.Fatal("no wake-up after the pub/sub connection was restored")
	}
	if _, err := d.TryAcquire(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, key, g.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s2.C():
	case <-time.After(5 * time.Second):
		t.Fatal("no release signal after the reconnect")
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}

	// A canceled context ends Subscribe with the context's error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.Subscribe(cctx, key); !errors.Is(err, context.Canceled) {
		t.Fatalf("subscribe with canceled context: got %v, want context.Canceled", err)
	}
}

// TestForceReleaseFreeze: a forced release, a freeze and its lift, and that they leave no
// audit list behind (the caller records them in the run store's audit log).
func TestForceReleaseFreeze(t *testing.T) {
	ctx := t.Context()
	d := newTestDriver(t, redistest.Start(t), Options{})
	const key = "coolify:abc"

	g := grant(key, "prod#7/api")
	a, err := d.TryAcquire(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.ForceRelease(ctx, locks.ForceRequest{Key: key, Fence: a.Fence - 1, Reason: "crashed", By: "ops"})
	var he *locks.HeldError
	if !errors.As(err, &he) || !errors.Is(err, locks.ErrStale) || he.Current.Fence != a.Fence {
		t.Fatalf("force release with a stale fence: got %v, want ErrStale naming fence %d", err, a.Fence)
	}
	if _, err := d.ForceRelease(ctx, locks.ForceRequest{Key: key, Holder: "prod#6/api", Reason: "crashed"}); !errors.Is(err, locks.ErrStale) {
		t.Fatalf("force release with another holder: got %v, want ErrStale", err)
	}
	ev, err := d.ForceRelease(ctx, locks.ForceRequest{Key: key, Holder: "prod#7/api", Reason: "runner died", By: "ops", LockDelay: 300 * time.Millisecond})
	if err != nil || ev.Fence != a.Fence {
		t.Fatalf("force release: got %+v, %v; want the lease with fence %d", ev, err, a.Fence)
	}
	if _, err := d.Renew(ctx, key, g.Token, time.Minute); !errors.Is(err, locks.ErrNotHeld) {
		t.Fatalf("evicted holder renews: got %v, want ErrNotHeld", err)
	}
	_, err = d.TryAcquire(ctx, grant(key, "prod#8/api"))
	if !errors.As(err, &he) || he.Current.ClosedUntil.IsZero() || he.Current.Holder != "" {
		t.Fatalf("acquire during lock-delay: got %v, want a HeldError with ClosedUntil", err)
	}
	if _, err := d.ForceRelease(ctx, locks.ForceRequest{Key: key, Fence: a.Fence, Reason: "again"}); !errors.Is(err, locks.ErrNotFound) {
		t.Fatalf("force release of a free key: got %v, want ErrNotFound", err)
	}
	waitFor(t, func() bool {
		_, err := d.TryAcquire(ctx, grant(key, "prod#8/api"))
		return err == nil
	})
	if err := d.Release(ctx, key, "tok-prod#8/api"); err != nil {
		t.Fatal(err)
	}

	until := time.Now().Add(time.Minute)
	fr, err := d.Freeze(ctx, locks.FreezeRequest{Key: key, Message: "release freeze", By: "alice", Until: until}, "operator:alice", "freeze-token")
	if err != nil || !fr.Frozen || fr.Fence <= a.Fence {
		t.Fatalf("freeze: got %+v, %v; want a frozen lease with a newer fence", fr, err)
	}
	if _, err := d.TryAcquire(ctx, grant(key, "prod#9/api")); !errors.Is(err, locks.ErrFrozen) {
		t.Fatalf("acquire a frozen key: got %v, want ErrFrozen", err)
	}
	if _, err := d.Freeze(ctx, locks.FreezeRequest{Key: key, Message: "x", Until: until}, "operator:unknown", "t2"); !errors.Is(err, locks.ErrFrozen) {
		t.Fatalf("freeze a frozen key: got %v, want ErrFrozen", err)
	}
	list, err := d.List(ctx, "coolify:")
	if err != nil || len(list) != 1 || !list[0].Frozen || list[0].Message != "release freeze" {
		t.Fatalf("list: got %+v, %v; want the freeze", list, err)
	}
	if _, err := d.Unfreeze(ctx, key); err != nil {
		t.Fatalf("unfreeze: %v", err)
	}
	if _, err := d.Unfreeze(ctx, key); !errors.Is(err, locks.ErrNotFound) {
		t.Fatalf("unfreeze twice: got %v, want ErrNotFound", err)
	}
	if ev.Holder != "prod#7/api" || ev.Token != "" {
		t.Fatalf("evicted lease: got holder %q (token cleared: %t), want prod#7/api and no token", ev.Holder, ev.Token == "")
	}
	names, err := d.client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, ":audit") {
			t.Errorf("the driver wrote the audit list %s", n)
		}
	}
}

func TestListAndPrefixes(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	d := newTestDriver(t, srv, Options{})
	other := newTestDriver(t, srv, Options{Prefix: "staging:"})

	for _, k := range []string{"coolify:b", "coolify:a", "mobile:flagsmith:x", "coolify:[odd]*"} {
		if _, err := d.TryAcquire(ctx, grant(k, "p#1/"+k)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.TryAcquire(ctx, grant("coolify:a", "s#1/a")); err != nil {
		t.Fatalf("another prefix is another namespace of keys: %v", err)
	}
	list, err := d.List(ctx, "coolify:")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range list {
		if i.Token != "" {
			t.Fatalf("list shows the token of %s", i.Key)
		}
		got = append(got, i.Key)
	}
	if g, w := strings.Join(got, " "), "coolify:[odd]* coolify:a coolify:b"; g != w {
		t.Fatalf("list coolify: got %q, want %q", g, w)
	}
	all, err := d.List(ctx, "")
	if err != nil || len(all) != 4 {
		t.Fatalf("list all: got %d leases, %v; want 4", len(all), err)
	}
	theirs, err := other.List(ctx, "")
	if err != nil || len(theirs) != 1 || theirs[0].Holder != "s#1/a" {
		t.Fatalf("list under the other prefix: got %+v, %v", theirs, err)
	}
	if _, err := d.Get(ctx, "coolify:none"); !errors.Is(err, locks.ErrNotFound) {
		t.Fatalf("get a free key: got %v, want ErrNotFound", err)
	}
}

func TestUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	d := newTestDriver(t, srv, Options{})
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := d.TryAcquire(ctx, grant("coolify:x", "p#1/x")); !errors.Is(err, locks.ErrUnavailable) {
		t.Fatalf("acquire with Redis down: got %v, want ErrUnavailable", err)
	}
	if err := d.Ping(ctx); !errors.Is(err, locks.ErrUnavailable) {
		t.Fatalf("ping with Redis down: got %v, want ErrUnavailable", err)
	}
	canceled, cancel2 := context.WithCancel(t.Context())
	cancel2()
	if err := d.Release(canceled, "coolify:x", "t"); !errors.Is(err, context.Canceled) {
		t.Fatalf("release with canceled context: got %v, want context.Canceled", err)
	}
}

func TestOpen(t *testing.T) {
	srv := redistest.Start(t)
	d, err := Open(srv.URL(), Options{Prefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Ping(t.Context()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ url, want string }{
		{"redis+cluster://127.0.0.1:1?addr=127.0.0.1:2", "*redis.ClusterClient"},
		{"redis://127.0.0.1:1/0?master_name=mymaster", "*redis.Client"},
		{"unix:///tmp/redis.sock", "*redis.Client"},
	} {
		c, err := newClient(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := typeName(c); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.url, got, tc.want)
		}
		_ = c.Close()
	}

	for _, bad := range []string{
		"redis://user:s3cret-pw@host:notaport/0",
		"http://user:s3cret-pw@host:6379",
		"redis://user:s3cret-pw@host:6379/0?bogus=1",
	} {
		_, err := Open(bad, Options{})
		if !errors.Is(err, locks.ErrInvalid) {
			t.Errorf("open %q: got %v, want ErrInvalid", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret-pw") {
			t.Errorf("open error leaks the password: %v", err)
		}
	}
	if _, err := Open(srv.URL(), Options{Prefix: "a{b}"}); !errors.Is(err, locks.ErrInvalid) {
		t.Errorf("prefix with braces: got %v, want ErrInvalid", err)
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *redis.ClusterClient:
		return "*redis.ClusterClient"
	case *redis.Client:
		return "*redis.Client"
	}
	return "other"
}

// A release wakes only the driver whose waiter is next in line; a forced release wakes all.
func TestReleaseWakesOnlyTheNextWaiter(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	holder := newTestDriver(t, srv, Options{})
	first := newTestDriver(t, srv, Options{})
	second := newTestDriver(t, srv, Options{})
	const key, marker = "coolify:next", "coolify:marker"

	subscribe := func(d *Driver, key string) locks.Subscription {
		t.Helper()
		s, err := d.Subscribe(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	firstSub, secondSub := subscribe(first, key), subscribe(second, key)
	secondMarker := subscribe(second, marker)
	receive := func(s locks.Subscription, what string) {
		t.Helper()
		select {
		case <-s.C():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no signal within 5s", what)
		}
	}

	h := grant(key, "h#1/x")
	if _, err := holder.TryAcquire(ctx, h); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	w1 := locks.Grant{Key: key, Token: "t1", Holder: "w#1/x", TTL: time.Minute, Ticket: "q1", TicketDeadline: deadline}
	w2 := locks.Grant{Key: key, Token: "t2", Holder: "w#2/x", TTL: time.Minute, Ticket: "q2", TicketDeadline: deadline}
	if _, err := first.TryAcquire(ctx, w1); !errors.Is(err, locks.ErrHeld) {
		t.Fatalf("first waiter: got %v, want ErrHeld", err)
	}
	if _, err := second.TryAcquire(ctx, w2); !errors.Is(err, locks.ErrHeld) {
		t.Fatalf("second waiter: got %v, want ErrHeld", err)
	}

	if err := holder.Release(ctx, key, h.Token); err != nil {
		t.Fatal(err)
	}
	receive(firstSub, "the next waiter's driver")
	// Messages on one connection arrive in order: once the marker's signal is in, the
	// release has been handled by the second driver too.
	m := grant(marker, "m#1/x")
	if _, err := holder.TryAcquire(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx, marker, m.Token); err != nil {
		t.Fatal(err)
	}
	receive(secondMarker, "marker")
	select {
	case <-secondSub.C():
		t.Fatal("a release woke a driver whose waiter was not next")
	default:
	}

	// The first waiter takes the key and is force-released: everyone hears that.
	if _, err := first.TryAcquire(ctx, w1); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ForceRelease(ctx, locks.ForceRequest{Key: key, Holder: "w#1/x", Reason: "test", LockDelay: -1}); err != nil {
		t.Fatal(err)
	}
	receive(secondSub, "forced release")
	receive(firstSub, "forced release, holder's driver")
}
