// Package redissub carries Redis pub/sub subscriptions over one go-redis PubSub connection
// per [Conn], each known to be active before anyone relies on it: the lock driver's release
// wake-ups (locks/redislock) and the run store's change signals (runs/redisstore) both use it.
//
// go-redis resubscribes its channels by itself after a reconnect, but sends SUBSCRIBE without
// waiting for Redis to confirm it. To know when new channels are active, a Conn subscribes to
// them together with a barrier channel of a unique name: replies come in order, so the
// barrier's confirmation proves the channels are subscribed on the current connection (after
// a reconnect, go-redis resubscribes them all). A confirmation of a channel that is already
// active means the connection was re-established, and a message may have been missed
// meanwhile: the Conn tells its [Handler].
package redissub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
)

// UnsubscribeTimeout bounds an UNSUBSCRIBE.
const UnsubscribeTimeout = 5 * time.Second

// healthCheckInterval is how long the connection may stay silent before it is pinged
// (go-redis reconnects when the ping cannot be sent). Subscribers poll slowly as well, so
// this only bounds how late a dead connection is replaced; go-redis' default of 3 s would
// cost an idle waiter more commands than its own polling.
const healthCheckInterval = 10 * time.Second

// retryPause is the pause between two failed reads of the connection (Redis down): go-redis
// dials again on the next read.
const retryPause = 100 * time.Millisecond

// ErrClosed is returned by a Conn that was closed.
var ErrClosed = errors.New("redissub: closed")

// Handler receives what a Conn reads, on the Conn's one receiving goroutine (so it must not
// block for long), never while the Conn's own lock is held.
type Handler interface {
	// Message is a message published on a subscribed channel.
	Message(channel, payload string)
	// Restored says that the first channel of a Topic was confirmed again: go-redis
	// reconnected and resubscribed, and a message may have been lost meanwhile.
	Restored(channel string)
}

// Conn multiplexes Topics over one PubSub connection, made by the first Subscribe.
type Conn struct {
	client  redis.UniversalClient
	barrier string // prefix of the barrier channels' names, unique to this Conn
	name    string // what it carries, for its log lines
	log     *slog.Logger
	h       Handler

	mu       sync.Mutex
	ps       *redis.PubSub
	topics   map[string]*Topic // by first channel
	barriers map[string]*Topic // pending barrier channel -> its topic
	seq      int64             // barrier channels made so far
	closed   bool
	stop     chan struct{} // closed by Close
	done     chan struct{} // closed when receive returns
}

// New returns a Conn on client whose barrier channels are named under prefix, that hands
// what it reads to h and logs as name (for example "lock release") to log.
func New(client redis.UniversalClient, prefix, name string, log *slog.Logger, h Handler) *Conn {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &Conn{
		client:   client,
		barrier:  prefix + "barrier:" + hex.EncodeToString(b) + ":",
		name:     name,
		log:      log,
		h:        h,
		topics:   make(map[string]*Topic),
		barriers: make(map[string]*Topic),
		stop:     make(chan struct{}),
	}
}

// Topic is channels subscribed together; the first one names it.
type Topic struct {
	c        *Conn
	channels []string
	barrier  string        // pending barrier channel; "" once active
	active   chan struct{} // closed once Redis confirmed the subscription
	closed   chan struct{} // the Conn's done: closed when its connection is
	once     sync.Once
}

// Subscribe sends the subscription of channels (the first must not be subscribed already)
// and returns at once; Active waits for Redis to confirm it. Callers that keep their own
// table of topics may call it under their lock, so that SUBSCRIBE and UNSUBSCRIBE of a
// channel reach Redis in the order their table changes.
func (c *Conn) Subscribe(ctx context.Context, channels ...string) (*Topic, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.ps == nil {
		c.ps = c.client.Subscribe(context.WithoutCancel(ctx))
		c.done = make(chan struct{})
		go c.receive(c.ps, c.done)
	}
	c.seq++
	t := &Topic{c: c, channels: channels, barrier: c.barrier + strconv.FormatInt(c.seq, 10), active: make(chan struct{}), closed: c.done}
	all := append(slices.Clip(channels), t.barrier)
	if err := c.ps.Subscribe(ctx, all...); err != nil {
		_ = c.ps.Unsubscribe(context.WithoutCancel(ctx), all...)
		return nil, err
	}
	c.topics[channels[0]] = t
	c.barriers[t.barrier] = t
	return t, nil
}

// Active returns once Redis confirmed t, or with ctx's error, or ErrClosed when the Conn
// closes first.
func (t *Topic) Active(ctx context.Context) error {
	select {
	case <-t.active:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.closed:
		return ErrClosed
	}
}

// Unsubscribe drops t (once; later calls do nothing). It returns the UNSUBSCRIBE's error,
// which only leaves idle channels on the connection.
func (t *Topic) Unsubscribe() (err error) {
	t.once.Do(func() {
		c := t.c
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.topics[t.channels[0]] == t {
			delete(c.topics, t.channels[0])
		}
		channels := t.channels
		if t.barrier != "" {
			delete(c.barriers, t.barrier)
			channels = append(slices.Clip(channels), t.barrier)
		}
		if c.closed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), UnsubscribeTimeout)
		defer cancel()
		err = c.ps.Unsubscribe(ctx, channels...)
	})
	return err
}

// receive reads the connection until it is closed and hands over what it reads. It reads
// the connection itself rather than through go-redis' channel helper, which would add a
// goroutine hop to every message; it pings after healthCheckInterval of silence as that
// helper would.
func (c *Conn) receive(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	ctx := context.Background()
	pause := time.NewTimer(0)
	defer pause.Stop()
	failures := 0
	for {
		msg, err := ps.ReceiveTimeout(ctx, healthCheckInterval)
		if err != nil {
			var ne net.Error
			switch {
			case errors.Is(err, redis.ErrClosed):
				return
			case c.stopping():
				return // Close closed the connection under the read: not an interruption
			case errors.As(err, &ne) && ne.Timeout():
				_ = ps.Ping(ctx) // a write error makes go-redis reconnect
				continue
			}
			failures++
			if failures == 1 {
				c.log.Warn(c.name+" subscription interrupted", logkey.Error, err.Error())
			}
			if failures > 1 {
				pause.Reset(retryPause)
				select {
				case <-pause.C:
				case <-c.stop:
					return
				}
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *redis.Message:
			c.h.Message(m.Channel, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				c.confirmed(m.Channel)
			}
		}
	}
}

// confirmed handles Redis' confirmation of a subscription to channel.
func (c *Conn) confirmed(channel string) {
	c.mu.Lock()
	if t := c.barriers[channel]; t != nil {
		delete(c.barriers, channel)
		t.barrier = ""
		close(t.active)
		ps := c.ps
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), UnsubscribeTimeout)
		_ = ps.Unsubscribe(ctx, channel) // the barrier has done its job; its name is never reused
		cancel()
		return
	}
	t := c.topics[channel]
	again := t != nil && t.barrier == ""
	c.mu.Unlock()
	if again {
		c.h.Restored(channel)
	}
}

// stopping reports whether Close has begun.
func (c *Conn) stopping() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// Close ends the connection and waits for the goroutine reading it. Calling it again does
// nothing.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.stop)
	ps, done := c.ps, c.done
	c.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}
