package redislock

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/redissub"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

// Subscribe returns a subscription that receives a value each time a lease on key is
// released, force-released or unfrozen. A release names the waiter at the head of the
// key's queue, and wakes only the Driver that queued it (through TryAcquire), since no
// other waiter can be granted the key next; when the release handed the key to that
// waiter, the subscription's Handed returns the lease (it implements locks.Handover), and
// the release was published on that Driver's own channel for the key (hub.inbox), so no
// other Driver's connection even reads it. With no live waiter in the queue, and on a
// forced release or an unfreeze, every subscriber is signalled. All subscriptions of a
// Driver share one pub/sub connection, with one Redis subscription per key (the key's
// channel and the Driver's channel for it) however many waiters ask for it.
// Subscribe returns once Redis has confirmed the subscription, so a release published
// after it returns is delivered unless the connection drops; after a reconnect every
// subscriber is signalled once, since a release may have been missed meanwhile.
//
// Errors: the context's error when it ends first; locks.ErrUnavailable when the
// subscription cannot be sent or the Driver is closed.
func (d *Driver) Subscribe(ctx context.Context, key string) (locks.Subscription, error) {
	s, err := d.hub.subscribe(ctx, d.keys(key).channel)
	if err != nil {
		return nil, d.fail(ctx, "subscribe", key, err)
	}
	return s, nil
}

// Ping reports whether Redis answers. Errors: locks.ErrUnavailable or the context's error.
func (d *Driver) Ping(ctx context.Context) error {
	if err := d.client.Ping(ctx).Err(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("redislock: ping: %w", ctxErr)
		}
		return fmt.Errorf("redislock: ping: %w: %w", locks.ErrUnavailable, err)
	}
	return nil
}

// hub multiplexes every subscription of a Driver over one pub/sub connection (a
// redissub.Conn, which knows when each key's channels are active and says when they were
// resubscribed after a reconnect). It keeps, per key, the Driver's subscribers, and the
// waiters it queued (tickets), which decide whom a release wakes.
type hub struct {
	// id names this driver's handover channels (see inbox).
	id   string
	log  *slog.Logger
	conn *redissub.Conn

	mu     sync.Mutex
	topics map[string]*topic // by channel, and by its inbox (the same topic)
	// tickets are the waiters this driver queued, by channel: a release that names one of
	// them as the next in line wakes this driver's subscribers.
	tickets map[string]map[string]*ticket
}

// ticket is a waiter this driver queued.
type ticket struct {
	deadline time.Time
	// handed is the lease a release handed to the ticket, until the waiter takes it.
	handed *locks.Info
}

// topic is one key's subscription (its channel and inbox) and its local subscribers.
type topic struct {
	channel string
	sub     *redissub.Topic
	subs    map[*subscription]struct{}
}

func newHub(client redis.UniversalClient, prefix string, log *slog.Logger) *hub {
	h := &hub{
		id:      newToken(),
		log:     log,
		topics:  make(map[string]*topic),
		tickets: make(map[string]map[string]*ticket),
	}
	h.conn = redissub.New(client, prefix, "lock release", log, h)
	return h
}

// inbox is the channel on which a release hands channel's key to a waiter of this driver:
// the key's channel and the driver's id. The waiter's claim names the id (see luaWake), so
// a handover wakes that driver's connection alone, not every driver waiting for the key.
func (h *hub) inbox(channel string) string { return channel + ":" + h.id }

func (h *hub) subscribe(ctx context.Context, channel string) (*subscription, error) {
	h.mu.Lock()
	t := h.topics[channel]
	if t == nil {
		// Sent under h.mu so SUBSCRIBE and UNSUBSCRIBE of one channel reach Redis in the
		// order the topics map changes.
		sub, err := h.conn.Subscribe(ctx, channel, h.inbox(channel))
		if err != nil {
			h.mu.Unlock()
			return nil, err
		}
		t = &topic{channel: channel, sub: sub, subs: make(map[*subscription]struct{})}
		h.topics[channel] = t
		h.topics[h.inbox(channel)] = t
	}
	s := &subscription{h: h, t: t, c: make(chan struct{}, 1)}
	t.subs[s] = struct{}{}
	h.mu.Unlock()

	if err := t.sub.Active(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Message implements redissub.Handler: a release on a key's channel or this driver's inbox
// for it wakes the key's subscribers when it names no one or one of this driver's waiters.
func (h *hub) Message(channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.topics[channel]; t != nil && (payload == "" || h.ours(t.channel, payload)) {
		t.signal()
	}
}

// Restored implements redissub.Handler: a release may have been published while the
// connection was down, so every waiter of the key looks again.
func (h *hub) Restored(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.topics[channel]; t != nil {
		h.log.Info("lock release subscription restored", logkey.Channel, channel, logkey.Waiters, len(t.subs))
		t.signal()
	}
}

// noteTicket remembers that this driver queued id on channel's key until deadline.
func (h *hub) noteTicket(channel, id string, deadline time.Time) {
	if id == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := h.tickets[channel]
	if ts == nil {
		ts = make(map[string]*ticket)
		h.tickets[channel] = ts
	}
	now := time.Now()
	for id, t := range ts {
		if t.deadline.Before(now) {
			delete(ts, id)
		}
	}
	ts[id] = &ticket{deadline: deadline}
}

// forgetTicket drops a ticket that was granted or left the queue.
func (h *hub) forgetTicket(channel, id string) {
	if id == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropTicket(channel, id)
}

// dropTicket drops a ticket. Callers hold h.mu.
func (h *hub) dropTicket(channel, id string) {
	if ts := h.tickets[channel]; ts != nil {
		delete(ts, id)
		if len(ts) == 0 {
			delete(h.tickets, channel)
		}
	}
}

// ours reports whether payload names a ticket this driver queued on channel's key, and
// notes the lease when the payload says the key was handed to it
// ("<ticket> <fence> <acquired_ms> <expires_ms>"). Callers hold h.mu.
func (h *hub) ours(channel, payload string) bool {
	id, grant, handed := strings.Cut(payload, " ")
	t := h.tickets[channel][id]
	if t == nil {
		return false
	}
	if handed {
		f := strings.Fields(grant)
		if len(f) != 3 {
			return true // not a handover this driver knows: let the waiter try
		}
		r := reply{f[0], f[1], f[2]}
		t.handed = &locks.Info{Fence: r.int(0), AcquiredAt: r.time(1), ExpiresAt: r.time(2)}
	}
	return true
}

// handed returns and forgets the lease a release handed to the ticket id on channel's key.
func (h *hub) handed(channel, id string) (locks.Info, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tickets[channel][id]
	if t == nil || t.handed == nil {
		return locks.Info{}, false
	}
	h.dropTicket(channel, id)
	return *t.handed, true
}

// signal wakes every subscriber of t without blocking. Callers hold h.mu.
func (t *topic) signal() {
	for s := range t.subs {
		select {
		case s.c <- struct{}{}:
		default:
		}
	}
}

// close ends the pub/sub connection and waits for the goroutine reading it.
func (h *hub) close() { _ = h.conn.Close() }

// subscription is one waiter's view of a topic.
type subscription struct {
	h    *hub
	t    *topic
	c    chan struct{}
	once sync.Once
}

// C receives a value (buffered 1) per release signal.
func (s *subscription) C() <-chan struct{} { return s.c }

// Handed implements locks.Handover.
func (s *subscription) Handed(ticket string) (locks.Info, bool) {
	return s.h.handed(s.t.channel, ticket)
}

// Close drops the subscription; the last one of a key unsubscribes its channels. It always
// returns nil: a failed UNSUBSCRIBE only leaves an idle channel on the connection.
func (s *subscription) Close() error {
	s.once.Do(func() {
		h := s.h
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(s.t.subs, s)
		if len(s.t.subs) > 0 || h.topics[s.t.channel] != s.t {
			return
		}
		delete(h.topics, s.t.channel)
		delete(h.topics, h.inbox(s.t.channel))
		if err := s.t.sub.Unsubscribe(); err != nil {
			h.log.Warn("lock release unsubscribe failed", logkey.Channel, s.t.channel, logkey.Error, err.Error())
		}
	})
	return nil
}
