package redislock

import (
	"errors"
	"testing"
	"time"

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
