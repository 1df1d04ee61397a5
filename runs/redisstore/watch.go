package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// unwatchTimeout bounds the UNSUBSCRIBE sent when a run's last watch stops.
const unwatchTimeout = 5 * time.Second

var errWatcherClosed = errors.New("run signals closed")

// watcher carries the signals of the runs this process watches over one pub/sub connection:
// one Redis subscription per run (its sig:<id> channel) however many local watchers it has,
// made when the first starts and dropped when the last stops. A process so reads the
// signals of the runs it follows, not every write of every daemon on the Redis (a pattern
// subscription to all runs cost each daemon a read and a wake-up per write of the fleet).
//
// go-redis sends SUBSCRIBE without waiting for Redis to confirm it, and resubscribes by
// itself after a reconnect. To know when a channel is active, watcher subscribes to it
// together with a barrier channel of a unique name: replies come in order, so the barrier's
// confirmation proves the channel is subscribed. A channel confirmed again once active means
// the connection was re-established: a write may have been missed meanwhile, so its watchers
// are signalled.
type watcher struct {
	rdb    redis.UniversalClient
	prefix string // of the run signal channels: <prefix><run id>
	id     string // names this watcher's barrier channels

	mu       sync.Mutex
	ps       *redis.PubSub // created by the first watch
	topics   map[string]*topic
	barriers map[string]*topic
	seq      int64 // barrier channels made so far
	closed   bool
	done     chan struct{} // closed when the goroutine reading ps returns
}

// topic is one run's Redis subscription and its local watchers.
type topic struct {
	id      string
	refs    int
	signal  func(id string)
	barrier string        // pending barrier channel; "" once active
	active  chan struct{} // closed once Redis confirmed the subscription
}

func newWatcher(rdb redis.UniversalClient, prefix string) *watcher {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &watcher{
		rdb:      rdb,
		prefix:   prefix,
		id:       hex.EncodeToString(b),
		topics:   make(map[string]*topic),
		barriers: make(map[string]*topic),
	}
}

// watch starts passing signal run id's signals and returns once Redis confirmed the
// subscription, with the function that stops it (safe to call more than once).
func (w *watcher) watch(ctx context.Context, id string, signal func(string)) (stop func(), err error) {
	channel := w.prefix + id
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, errWatcherClosed
	}
	if w.ps == nil {
		w.ps = w.rdb.Subscribe(context.WithoutCancel(ctx))
		w.done = make(chan struct{})
		go w.receive(w.ps.ChannelWithSubscriptions(), w.done)
	}
	t := w.topics[channel]
	if t == nil {
		w.seq++
		t = &topic{id: id, signal: signal, barrier: fmt.Sprintf("%sbarrier:%s:%d", w.prefix, w.id, w.seq), active: make(chan struct{})}
		// Sent under w.mu so SUBSCRIBE and UNSUBSCRIBE of one channel reach Redis in the
		// order the topics map changes.
		if err := w.ps.Subscribe(ctx, channel, t.barrier); err != nil {
			_ = w.ps.Unsubscribe(context.WithoutCancel(ctx), channel, t.barrier)
			w.mu.Unlock()
			return nil, err
		}
		w.topics[channel] = t
		w.barriers[t.barrier] = t
	}
	t.refs++
	done := w.done
	w.mu.Unlock()

	var once sync.Once
	stop = func() { once.Do(func() { w.unwatch(channel, t) }) }
	select {
	case <-t.active:
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	case <-done:
		stop()
		return nil, errWatcherClosed
	}
}

// unwatch drops one watcher of t; the last one unsubscribes its channel.
func (w *watcher) unwatch(channel string, t *topic) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t.refs--
	if t.refs > 0 || w.topics[channel] != t {
		return
	}
	delete(w.topics, channel)
	channels := []string{channel}
	if t.barrier != "" {
		delete(w.barriers, t.barrier)
		channels = append(channels, t.barrier)
	}
	if w.closed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), unwatchTimeout)
	defer cancel()
	_ = w.ps.Unsubscribe(ctx, channels...) // a failed one leaves an idle channel on the connection
}

// receive passes each message of the pub/sub connection to its topic until the connection
// is closed (go-redis reconnects and pings it meanwhile).
func (w *watcher) receive(ch <-chan any, done chan struct{}) {
	defer close(done)
	for msg := range ch {
		switch m := msg.(type) {
		case *redis.Message:
			w.mu.Lock()
			t := w.topics[m.Channel]
			w.mu.Unlock()
			if t != nil {
				t.signal(t.id)
			}
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				w.confirmed(m.Channel)
			}
		}
	}
}

// confirmed handles Redis' confirmation of a subscription to channel.
func (w *watcher) confirmed(channel string) {
	w.mu.Lock()
	if t := w.barriers[channel]; t != nil {
		delete(w.barriers, channel)
		t.barrier = ""
		close(t.active)
		ps := w.ps
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), unwatchTimeout)
		_ = ps.Unsubscribe(ctx, channel) // the barrier has done its job; its name is never reused
		cancel()
		return
	}
	t := w.topics[channel]
	again := t != nil && t.barrier == ""
	w.mu.Unlock()
	if again {
		t.signal(t.id) // confirmed again: resubscribed after a reconnect
	}
}

// close ends the pub/sub connection and waits for the goroutine reading it.
func (w *watcher) close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	ps, done := w.ps, w.done
	w.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}
