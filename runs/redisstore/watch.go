package redisstore

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redissub"
)

// watcher carries the signals of the runs this process watches over one pub/sub connection
// (a redissub.Conn): one Redis subscription per run (its sig:<id> channel) however many
// local watchers it has, made when the first starts and dropped when the last stops. A
// process so reads the signals of the runs it follows, not every write of every daemon on
// the Redis (a pattern subscription to all runs cost each daemon a read and a wake-up per
// write of the fleet). When the connection was re-established, a write may have been missed
// meanwhile, so the run's watchers are signalled.
type watcher struct {
	prefix string // of the run signal channels: <prefix><run id>
	conn   *redissub.Conn

	mu     sync.Mutex
	topics map[string]*topic // by run ID
}

// topic is one run's subscription and its local watchers.
type topic struct {
	sub    *redissub.Topic
	refs   int
	signal func(id string)
}

func newWatcher(rdb redis.UniversalClient, prefix string) *watcher {
	w := &watcher{prefix: prefix, topics: make(map[string]*topic)}
	w.conn = redissub.New(rdb, prefix, "run signal", slog.New(slog.DiscardHandler), w)
	return w
}

// watch starts passing signal run id's signals and returns once Redis confirmed the
// subscription, with the function that stops it (safe to call more than once). Errors:
// redissub.ErrClosed after close, ctx's error, or the SUBSCRIBE's.
func (w *watcher) watch(ctx context.Context, id string, signal func(string)) (stop func(), err error) {
	w.mu.Lock()
	t := w.topics[id]
	if t == nil {
		// Sent under w.mu so SUBSCRIBE and UNSUBSCRIBE of one channel reach Redis in the
		// order the topics map changes.
		sub, err := w.conn.Subscribe(ctx, w.prefix+id)
		if err != nil {
			w.mu.Unlock()
			return nil, err
		}
		t = &topic{sub: sub, signal: signal}
		w.topics[id] = t
	}
	t.refs++
	w.mu.Unlock()

	var once sync.Once
	stop = func() { once.Do(func() { w.unwatch(id, t) }) }
	if err := t.sub.Active(ctx); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// unwatch drops one watcher of t; the last one unsubscribes its channel (a failed
// UNSUBSCRIBE leaves an idle channel on the connection).
func (w *watcher) unwatch(id string, t *topic) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.refs--; t.refs > 0 || w.topics[id] != t {
		return
	}
	delete(w.topics, id)
	_ = t.sub.Unsubscribe()
}

// Message implements redissub.Handler: a write to a watched run.
func (w *watcher) Message(channel, _ string) { w.signal(channel) }

// Restored implements redissub.Handler: the run's channel was resubscribed after a
// reconnect, and a write may have been missed meanwhile.
func (w *watcher) Restored(channel string) { w.signal(channel) }

func (w *watcher) signal(channel string) {
	id, ok := strings.CutPrefix(channel, w.prefix)
	if !ok {
		return
	}
	w.mu.Lock()
	t := w.topics[id]
	w.mu.Unlock()
	if t != nil {
		t.signal(id)
	}
}

// close ends the pub/sub connection and waits for the goroutine reading it.
func (w *watcher) close() error { return w.conn.Close() }
