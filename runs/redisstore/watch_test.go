package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
)

// TestWatchHearsFollowedRunsOnly: a store subscribes in Redis to the signal channel of each
// run it follows, once however many followers the run has, and to nothing else, so a
// daemon reads no signal of the runs other daemons write unless it follows them; the last
// follower's Close drops the channel. Redis' own count of receivers (PUBLISH's answer,
// PUBSUB NUMSUB and NUMPAT) is the witness.
func TestWatchHearsFollowedRunsOnly(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	writer, follower := processStore(t, srv.Addr), processStore(t, srv.Addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	followed, _, err := writer.Create(ctx, runs.Run{Pipeline: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := writer.Create(ctx, runs.Run{Pipeline: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	channel := func(id string) string { return redisstore.DefaultPrefix + "{runs}:sig:" + id }

	subs := make([]runs.Subscription, 2)
	for i := range subs {
		if subs[i], err = follower.Subscribe(ctx, followed.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.PubSubNumPat(ctx).Val(); n != 0 {
		t.Errorf("pattern subscriptions: got %d, want 0 (every run's signal to every store)", n)
	}
	if got := rdb.PubSubNumSub(ctx, channel(followed.ID)).Val()[channel(followed.ID)]; got != 1 {
		t.Errorf("subscribers of the followed run's channel: got %d, want 1 for two followers", got)
	}
	if got := rdb.Publish(ctx, channel(other.ID), "x").Val(); got != 0 {
		t.Errorf("receivers of a run nobody follows: got %d, want 0", got)
	}
	if _, err := writer.Append(ctx, followed.ID, runs.Event{Type: runs.EventRunStarted}); err != nil {
		t.Fatal(err)
	}
	for i, sub := range subs {
		select {
		case <-sub.C():
		case <-ctx.Done():
			t.Fatalf("follower %d got no signal of the other store's write", i)
		}
	}

	subs[0].Close()
	if got := rdb.PubSubNumSub(ctx, channel(followed.ID)).Val()[channel(followed.ID)]; got != 1 {
		t.Errorf("subscribers after one of two followers left: got %d, want 1", got)
	}
	subs[1].Close()
	// UNSUBSCRIBE is sent without waiting for Redis' answer: wait for Redis to count it.
	for rdb.PubSubNumSub(ctx, channel(followed.ID)).Val()[channel(followed.ID)] != 0 {
		if ctx.Err() != nil {
			t.Fatal("the followed run's channel is still subscribed after its last follower left")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Following it again subscribes again.
	sub, err := follower.Subscribe(ctx, followed.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := writer.Append(ctx, followed.ID, runs.Event{Type: runs.EventPhaseStarted}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C():
	case <-ctx.Done():
		t.Fatal("no signal after following the run again")
	}
}
