package redislock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

// unsubscribeTimeout bounds the UNSUBSCRIBE a closing subscription sends.
const unsubscribeTimeout = 5 * time.Second

// healthCheckInterval is how long the pub/sub connection may stay silent before it is
// pinged (go-redis reconnects when the ping cannot be sent). Waiters poll slowly as well,
// so this only bounds how late a dead connection is replaced; go-redis' default of 3 s
// would cost an idle waiter more commands than its own polling.
const healthCheckInterval = 10 * time.Second

// retryPause is the pause between two failed reads of the pub/sub connection (Redis down):
// go-redis dials again on the next read.
const retryPause = 100 * time.Millisecond

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

var errHubClosed = errors.New("driver closed")

// hub multiplexes every subscription of a Driver over one go-redis PubSub connection.
//
// go-redis resubscribes its channels by itself after a reconnect but sends SUBSCRIBE
// without waiting for Redis to confirm it. To know when a new channel is active, hub
// subscribes to it together with a barrier channel of a unique name: replies come in
// order, so the confirmation of the barrier proves the channel is subscribed on the
// current connection (after a reconnect, go-redis resubscribes both). A confirmation of a
// channel that is already active means the connection was re-established.
type hub struct {
	// id names this driver's handover channels (see inbox).
	id     string
	client redis.UniversalClient
	prefix string
	log    *slog.Logger

	mu       sync.Mutex
	ps       *redis.PubSub     // created by the first subscribe
	topics   map[string]*topic // by channel, and by its inbox (the same topic)
	barriers map[string]*topic // pending barrier channel -> its topic
	// tickets are the waiters this driver queued, by channel: a release that names one of
	// them as the next in line wakes this driver's subscribers.
	tickets map[string]map[string]*ticket
	closed  bool
	stop    chan struct{} // closed by close
	done    chan struct{} // closed when receive returns
}

// ticket is a waiter this driver queued.
type ticket struct {
	deadline time.Time
	// handed is the lease a release handed to the ticket, until the waiter takes it.
	handed *locks.Info
}

// topic is one subscribed channel and its local subscribers.
type topic struct {
	channel string
	subs    map[*subscription]struct{}
	barrier string        // pending barrier channel; "" once active
	active  chan struct{} // closed once Redis confirmed the subscription
}

func newHub(client redis.UniversalClient, prefix string, log *slog.Logger) *hub {
	return &hub{
		id:       newToken(),
		client:   client,
		prefix:   prefix,
		log:      log,
		topics:   make(map[string]*topic),
		barriers: make(map[string]*topic),
		tickets:  make(map[string]map[string]*ticket),
		stop:     make(chan struct{}),
	}
}

// inbox is the channel on which a release hands channel's key to a waiter of this driver:
// the key's channel and the driver's id. The waiter's claim names the id (see luaWake), so
// a handover wakes that driver's connection alone, not every driver waiting for the key.
func (h *hub) inbox(channel string) string { return channel + ":" + h.id }

func (h *hub) subscribe(ctx context.Context, channel string) (*subscription, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errHubClosed
	}
	if h.ps == nil {
		h.ps = h.client.Subscribe(context.WithoutCancel(ctx))
		h.done = make(chan struct{})
		go h.receive(h.ps, h.done)
	}
	t := h.topics[channel]
	if t == nil {
		t = &topic{
			channel: channel,
			subs:    make(map[*subscription]struct{}),
			barrier: h.prefix + "barrier:" + newToken(),
			active:  make(chan struct{}),
		}
		// Sent under h.mu so SUBSCRIBE and UNSUBSCRIBE of one channel reach Redis in the
		// order the topics map changes.
		if err := h.ps.Subscribe(ctx, channel, h.inbox(channel), t.barrier); err != nil {
			_ = h.ps.Unsubscribe(context.WithoutCancel(ctx), channel, h.inbox(channel), t.barrier)
			h.mu.Unlock()
			return nil, err
		}
		h.topics[channel] = t
		h.topics[h.inbox(channel)] = t
		h.barriers[t.barrier] = t
	}
	s := &subscription{h: h, t: t, c: make(chan struct{}, 1)}
	t.subs[s] = struct{}{}
	active, done := t.active, h.done
	h.mu.Unlock()

	select {
	case <-active:
		return s, nil
	case <-ctx.Done():
		_ = s.Close()
		return nil, ctx.Err()
	case <-done:
		return nil, errHubClosed
	}
}

// receive reads the pub/sub connection until it is closed and delivers what it reads.
// It reads the connection itself rather than through go-redis' channel helper, which
// would add a goroutine hop to every wake-up; it pings after healthCheckInterval of
// silence as that helper would.
func (h *hub) receive(ps *redis.PubSub, done chan struct{}) {
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
			case h.stopping():
				return // close closed the connection under the read: not an interruption
			case errors.As(err, &ne) && ne.Timeout():
				_ = ps.Ping(ctx) // a write error makes go-redis reconnect
				continue
			}
			failures++
			if failures == 1 {
				h.log.Warn("lock release subscription interrupted", logkey.Error, err.Error())
			}
			if failures > 1 {
				pause.Reset(retryPause)
				select {
				case <-pause.C:
				case <-h.stop:
					return
				}
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *redis.Message:
			h.mu.Lock()
			if t := h.topics[m.Channel]; t != nil && (m.Payload == "" || h.ours(t.channel, m.Payload)) {
				t.signal()
			}
			h.mu.Unlock()
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				h.confirmed(m.Channel)
			}
		}
	}
}

// stopping reports whether close has begun.
func (h *hub) stopping() bool {
	select {
	case <-h.stop:
		return true
	default:
		return false
	}
}

func (h *hub) confirmed(channel string) {
	h.mu.Lock()
	if t := h.barriers[channel]; t != nil {
		delete(h.barriers, channel)
		t.barrier = ""
		close(t.active)
		ps := h.ps
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
		_ = ps.Unsubscribe(ctx, channel) // the barrier has done its job; its name is never reused
		cancel()
		return
	}
	if t := h.topics[channel]; t != nil && t.barrier == "" && channel == t.channel {
		// Confirmed again: go-redis reconnected and resubscribed. A release may have been
		// published while the connection was down, so let every waiter look again.
		h.log.Info("lock release subscription restored", logkey.Channel, channel, logkey.Waiters, len(t.subs))
		t.signal()
	}
	h.mu.Unlock()
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

// close stops the PubSub connection and waits for the receiving goroutine.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.stop)
	ps, done := h.ps, h.done
	h.mu.Unlock()
	if ps == nil {
		return
	}
	_ = ps.Close()
	<-done
}

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

// Close drops the subscription; the last one of a key unsubscribes the channel. It always
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
		channels := []string{s.t.channel, h.inbox(s.t.channel)}
		if s.t.barrier != "" {
			delete(h.barriers, s.t.barrier)
			channels = append(channels, s.t.barrier)
		}
		if h.closed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
		defer cancel()
		if err := h.ps.Unsubscribe(ctx, channels...); err != nil {
			h.log.Warn("lock release unsubscribe failed", logkey.Channel, s.t.channel, logkey.Error, err.Error())
		}
	})
	return nil
}
