package redislock

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/faultproxy"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

// TestReleaseHandsOver: a release hands the key to the live waiter at the head of the
// queue, under its handover token and bounded by its ticket's deadline; the waiter's
// subscription says so; a waiter that gives up releases what it was handed; a try with
// the ticket takes the handed lease over; and no other lease can be taken over by it.
func TestReleaseHandsOver(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	holder, waiter := newTestDriver(t, srv, Options{}), newTestDriver(t, srv, Options{})
	const key = "coolify:handover"
	queue := func(ticket string) locks.Grant {
		t.Helper()
		g := locks.Grant{Key: key, Token: "try-" + ticket, Holder: "p#2/" + ticket, Message: "waiting", TTL: time.Minute,
			Ticket: ticket, TicketDeadline: time.Now().Add(5 * time.Second), Handover: "hand-" + ticket}
		if _, err := waiter.TryAcquire(ctx, g); !errors.Is(err, locks.ErrHeld) {
			t.Fatalf("queue %s: got %v, want ErrHeld", ticket, err)
		}
		return g
	}
	sub, err := waiter.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	handed := func(ticket string) locks.Info {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case <-sub.C():
			case <-timeout:
				t.Fatalf("the release did not hand the key to %s", ticket)
			}
			if info, ok := sub.(locks.Handover).Handed(ticket); ok {
				return info
			}
		}
	}

	release := func(d *Driver, token string) {
		t.Helper()
		if err := d.Release(ctx, key, token); err != nil {
			t.Fatalf("release %s: %v", token, err)
		}
	}

	first, err := holder.TryAcquire(ctx, grant(key, "p#1/a"))
	if err != nil {
		t.Fatal(err)
	}
	queue("T1")
	release(holder, "tok-p#1/a")
	h1 := handed("T1")
	got, err := holder.Get(ctx, key)
	if err != nil || got.Holder != "p#2/T1" || got.Message != "waiting" || got.Fence != h1.Fence || h1.Fence <= first.Fence {
		t.Fatalf("after the release: got %+v, %v; want the waiter holding fence %d (> %d)", got, err, h1.Fence, first.Fence)
	}
	if !h1.ExpiresAt.Before(time.Now().Add(6 * time.Second)) {
		t.Errorf("handed lease expires at %s, want by the ticket's deadline (5s), not the TTL (1m)", h1.ExpiresAt)
	}
	if _, err := waiter.Renew(ctx, key, "hand-T1", time.Minute); err != nil {
		t.Fatalf("renew under the handover token: %v", err)
	}

	// A waiter that gives up releases what it was handed, and the key goes on to the next.
	queue("T2")
	queue("T3")
	release(waiter, "hand-T1")
	handed("T2")
	if err := waiter.LeaveQueue(ctx, key, "T2"); err != nil {
		t.Fatal(err)
	}
	handed("T3")
	if got, err := holder.Get(ctx, key); err != nil || got.Holder != "p#2/T3" {
		t.Fatalf("after T2 left: got %+v, %v; want T3 holding the key", got, err)
	}

	// A try with the ticket takes the handed lease over, under its own token.
	queue("T4")
	release(waiter, "hand-T3")
	waitFor(t, func() bool { got, err := holder.Get(ctx, key); return err == nil && got.Holder == "p#2/T4" })
	took, err := waiter.TryAcquire(ctx, locks.Grant{Key: key, Token: "retry-T4", Holder: "p#2/T4", TTL: time.Minute,
		Ticket: "T4", TicketDeadline: time.Now().Add(5 * time.Second), Handover: "hand-T4"})
	if err != nil {
		t.Fatalf("try with the handed ticket: %v", err)
	}
	if _, err := waiter.Renew(ctx, key, "hand-T4", time.Minute); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("renew under the handover token after the takeover: got %v, want ErrNotHeld", err)
	}

	// Once another lease is granted, a ticket handed a lease before takes nothing over.
	queue("T5")
	release(waiter, "retry-T4")
	handed("T5")
	release(waiter, "hand-T5")
	other, err := holder.TryAcquire(ctx, grant(key, "p#3/c"))
	if err != nil || other.Fence <= took.Fence {
		t.Fatalf("acquire after the handovers: got %+v, %v", other, err)
	}
	if _, err := waiter.TryAcquire(ctx, locks.Grant{Key: key, Token: "late", Holder: "p#2/T5", TTL: time.Minute,
		Ticket: "T5", TicketDeadline: time.Now().Add(5 * time.Second), Handover: "hand-T5"}); !errors.Is(err, locks.ErrHeld) {
		t.Errorf("old ticket against a new lease: got %v, want ErrHeld", err)
	}
	if err := waiter.LeaveQueue(ctx, key, "T5"); err != nil {
		t.Fatal(err)
	}
	if got, err := holder.Get(ctx, key); err != nil || got.Holder != "p#3/c" {
		t.Errorf("the old ticket leaving released another lease: got %+v, %v", got, err)
	}
}

// TestLateHandoverSignalNotBelieved: a release hands the key to a waiter whose network
// then stalls, so the handed lease expires before the waiter hears of it and another
// client takes the key. The signal, arriving late, names a grant that is over: the waiter
// must not believe it (a Lease on a fence older than the holder's would be two holders at
// once), and must end up with a lease of its own after the other client's.
func TestLateHandoverSignalNotBelieved(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	proxy, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	const (
		key   = "coolify:late-handover"
		poll  = 100 * time.Millisecond // a ticket, and so a handed lease, lives 3 polls
		stall = time.Second            // each way, so longer than the handed lease
	)
	direct := newTestDriver(t, srv, Options{})
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 5 * stall})
	t.Cleanup(func() { _ = client.Close() })
	waiter := locks.New(New(client, Options{}), locks.Options{PollInterval: poll})
	defer waiter.Close()

	if _, err := direct.TryAcquire(ctx, grant(key, "p#1/first")); err != nil {
		t.Fatal(err)
	}
	type result struct {
		le  *locks.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		le, err := waiter.Acquire(ctx, locks.Request{Key: key, Holder: "p#2/waiter", TTL: time.Minute,
			Budget: locks.Budget{Timeout: 30 * time.Second}})
		got <- result{le, err}
	}()
	// Queued and subscribed: the release's signal is on its way to the waiter.
	channel := direct.keys(key).channel
	waitFor(t, func() bool {
		info, err := direct.Get(ctx, key)
		return err == nil && info.Waiters == 1 && numSub(t, srv, channel) == 1
	})
	proxy.SetDelay(stall)
	if err := direct.Release(ctx, key, "tok-p#1/first"); err != nil {
		t.Fatal(err)
	}
	handed, err := direct.Get(ctx, key)
	if err != nil || handed.Holder != "p#2/waiter" {
		t.Fatalf("after the release: got %+v, %v; want the key handed to the waiter", handed, err)
	}

	// The handed lease runs out while the waiter hears nothing; another client takes the key.
	var other locks.Info
	waitFor(t, func() bool {
		other, err = direct.TryAcquire(ctx, grant(key, "p#3/other"))
		return err == nil
	})
	// Its hold lasts until the waiter's stalled try has come back held and the late signal
	// has been read: the try reaches Redis a stall after it was sent and its answer comes
	// back a stall later, by when the signal sent at the release is there too.
	waitFor(t, func() bool { info, err := direct.Get(ctx, key); return err == nil && info.Waiters == 1 })
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		t.Fatalf("the waiter believed the late signal: it holds fence %d while p#3/other holds fence %d",
			r.le.Info().Fence, other.Fence)
	case <-time.After(3 * stall):
	}
	proxy.SetDelay(0)
	if err := direct.Release(ctx, key, "tok-p#3/other"); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.le.Release(ctx)
	if f := r.le.Info().Fence; f <= other.Fence {
		t.Fatalf("the waiter's lease has fence %d, not after p#3/other's %d", f, other.Fence)
	}
}

// numSub is how many subscribers channel has on srv.
func numSub(t *testing.T, srv *redistest.Server, channel string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	n, err := c.PubSubNumSub(t.Context(), channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n[channel]
}

// TestHandoverIsPublishedToTheWaitersDriver: a release that hands the key over publishes
// the handover on the channel of the waiter's driver for the key, so the connections of
// other drivers subscribed to the key do not read it; what follows on the key's channel
// comes next (a watcher of the key's channel sees the message published after it first).
func TestHandoverIsPublishedToTheWaitersDriver(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	holder, waiter := newTestDriver(t, srv, Options{}), newTestDriver(t, srv, Options{})
	const key = "coolify:inbox"
	channel := waiter.keys(key).channel

	watcher := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer watcher.Close()
	ps := watcher.Subscribe(ctx, channel, waiter.hub.inbox(channel))
	defer ps.Close()
	for range 2 {
		if _, err := ps.Receive(ctx); err != nil { // the two subscriptions' confirmations
			t.Fatal(err)
		}
	}

	if _, err := holder.TryAcquire(ctx, grant(key, "p#1/a")); err != nil {
		t.Fatal(err)
	}
	g := locks.Grant{Key: key, Token: "try-T1", Holder: "p#2/T1", TTL: time.Minute,
		Ticket: "T1", TicketDeadline: time.Now().Add(5 * time.Second), Handover: "hand-T1"}
	if _, err := waiter.TryAcquire(ctx, g); !errors.Is(err, locks.ErrHeld) {
		t.Fatalf("queue: got %v, want ErrHeld", err)
	}
	if err := holder.Release(ctx, key, "tok-p#1/a"); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Publish(ctx, channel, "after").Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 2 {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(m.Payload, " ")
		got = append(got, m.Channel+" "+first)
	}
	want := []string{waiter.hub.inbox(channel) + " T1", channel + " after"}
	if !slices.Equal(got, want) {
		t.Errorf("messages read: %q, want the handover on the waiter's driver's channel, then the next message of the key's channel: %q", got, want)
	}

	// A claim queued by an older build names no driver: its handover goes out on the key's
	// channel, where the waiter's driver reads it too.
	sub, err := waiter.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	k := waiter.keys(key)
	waiter.hub.noteTicket(k.channel, "T2", time.Now().Add(5*time.Second))
	res, err := acquireScript.Run(ctx, watcher, []string{k.lock, k.queue, k.deadlines, k.claims},
		"try-T2", "p#2/T2", "", 60000, "T2", 5000, "hand-T2").Slice()
	if err != nil || reply(res).int(0) != 0 {
		t.Fatalf("queue T2 as an older build: %v, %v", res, err)
	}
	if err := waiter.Release(ctx, key, "hand-T1"); err != nil {
		t.Fatal(err)
	}
	if m, err := ps.ReceiveMessage(ctx); err != nil || m.Channel != channel || !strings.HasPrefix(m.Payload, "T2 ") {
		t.Errorf("handover to an older build's claim: read %+v, %v; want it on the key's channel", m, err)
	}
	select {
	case <-sub.C():
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter's driver was not signalled")
	}
	if _, ok := sub.(locks.Handover).Handed("T2"); !ok {
		t.Error("the waiter's driver did not take the handover of an older build's claim")
	}
}

// TestLateHandoverStartsAfresh: a release hands the key to a waiter late in the waiter's
// window (the handed grant is only known to last 3 polls from the start of its Acquire),
// and the waiter's round trips to Redis are slow. A lease started from that handover would
// have to renew within the sliver left, and be lost; the waiter must take the key under its
// handover token with a whole TTL instead, and keep it.
func TestLateHandoverStartsAfresh(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	proxy, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	const (
		key  = "coolify:late-in-window"
		poll = 100 * time.Millisecond // the handed grant's window: 3 polls from the Acquire
	)
	direct := newTestDriver(t, srv, Options{})
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	waiter := locks.New(New(client, Options{}), locks.Options{PollInterval: poll})
	defer waiter.Close()

	if _, err := direct.TryAcquire(ctx, grant(key, "p#1/first")); err != nil {
		t.Fatal(err)
	}
	type result struct {
		le  *locks.Lease
		err error
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		le, err := waiter.Acquire(ctx, locks.Request{Key: key, Holder: "p#2/waiter", TTL: time.Minute,
			Budget: locks.Budget{Timeout: 30 * time.Second}})
		got <- result{le, err}
	}()
	channel := direct.keys(key).channel
	waitFor(t, func() bool {
		info, err := direct.Get(ctx, key)
		return err == nil && info.Waiters == 1 && numSub(t, srv, channel) == 1
	})
	// Slow round trips from here, and the release late in the window: what is left of it
	// when the signal arrives is less than a round trip.
	proxy.SetDelay(40 * time.Millisecond)
	time.Sleep(time.Until(start.Add(3*poll - 60*time.Millisecond))) // the fault's timing: late in the waiter's window
	if err := direct.Release(ctx, key, "tok-p#1/first"); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.le.Release(ctx)
	select {
	case <-r.le.Done():
		t.Fatalf("the waiter's lease, from a handover late in its window, was lost: %v", r.le.Err())
	case <-time.After(time.Second):
	}
	if info, err := direct.Get(ctx, key); err != nil || info.Holder != "p#2/waiter" || !info.ExpiresAt.After(time.Now().Add(30*time.Second)) {
		t.Errorf("the key after the handover: %+v, %v; want the waiter holding it with a whole TTL", info, err)
	}
}
