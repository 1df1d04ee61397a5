package redissub_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redissub"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
)

// recorder is a Handler that passes on what it is told.
type recorder struct {
	messages chan [2]string
	restored chan string
}

func newRecorder() *recorder {
	return &recorder{messages: make(chan [2]string, 16), restored: make(chan string, 16)}
}

func (r *recorder) Message(channel, payload string) { r.messages <- [2]string{channel, payload} }
func (r *recorder) Restored(channel string)         { r.restored <- channel }

// receive returns the next value of c, failing the test after 10 s.
func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
		var zero T
		return zero
	}
}

// numsub is how many subscribers Redis counts on channel.
func numsub(t *testing.T, rdb *redis.Client, channel string) int64 {
	t.Helper()
	n, err := rdb.PubSubNumSub(t.Context(), channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n[channel]
}

// eventually waits (up to 10 s) for cond, which reads Redis: an UNSUBSCRIBE is sent without
// waiting for its reply, so another connection sees it a moment later.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// A topic is subscribed on Redis once Active returns: a message published right after is
// delivered, for each of its channels; its barrier channel is dropped; Unsubscribe drops
// its channels; after Redis restarts, the topic's first channel is reported restored, and a
// message published then is delivered again.
func TestTopicLifecycle(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	h := newRecorder()
	c := redissub.New(redis.NewClient(&redis.Options{Addr: srv.Addr}), "t:", "test", slog.New(slog.DiscardHandler), h)
	t.Cleanup(func() { _ = c.Close() })

	topic, err := c.Subscribe(t.Context(), "t:a", "t:a:inbox")
	if err != nil {
		t.Fatal(err)
	}
	if err := topic.Active(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []string{"t:a", "t:a:inbox"} {
		if n := rdb.Publish(t.Context(), ch, "hello").Val(); n != 1 {
			t.Fatalf("PUBLISH %s right after Active reached %d subscribers, want 1", ch, n)
		}
		if got := receive(t, h.messages, "message on "+ch); got != [2]string{ch, "hello"} {
			t.Errorf("message %q, want %q on %s", got, "hello", ch)
		}
	}
	eventually(t, "the barrier channel dropped", func() bool {
		chs, err := rdb.PubSubChannels(t.Context(), "t:barrier:*").Result()
		return err == nil && len(chs) == 0
	})

	srv.Restart()
	if got := receive(t, h.restored, "restored topic"); got != "t:a" {
		t.Errorf("restored %q, want t:a", got)
	}
	if n := rdb.Publish(t.Context(), "t:a", "again").Val(); n != 1 {
		t.Fatalf("PUBLISH after the restart reached %d subscribers, want 1", n)
	}
	if got := receive(t, h.messages, "message after the restart"); got != [2]string{"t:a", "again"} {
		t.Errorf("message %q after the restart", got)
	}

	if err := topic.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the topic's channels dropped", func() bool {
		return numsub(t, rdb, "t:a") == 0 && numsub(t, rdb, "t:a:inbox") == 0
	})
}

// A closed Conn subscribes nothing, and a topic still waiting for Redis learns of the close.
func TestClosedConn(t *testing.T) {
	srv := redistest.Start(t)
	c := redissub.New(redis.NewClient(&redis.Options{Addr: srv.Addr}), "t:", "test", slog.New(slog.DiscardHandler), newRecorder())
	first, err := c.Subscribe(t.Context(), "t:a") // the connection is made (and its handshake done)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Active(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv.Pause() // the next confirmation cannot come
	t.Cleanup(srv.Resume)
	topic, err := c.Subscribe(t.Context(), "t:b")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := topic.Active(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Active with Redis paused: %v, want the context's deadline", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- topic.Active(t.Context()) }()
	if err := c.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		t.Logf("close: %v", err)
	}
	if err := receive(t, closed, "Active's return after Close"); !errors.Is(err, redissub.ErrClosed) {
		t.Errorf("Active after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Subscribe(t.Context(), "t:c"); !errors.Is(err, redissub.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
}
