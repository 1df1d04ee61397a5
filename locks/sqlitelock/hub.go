package sqlitelock

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/sqlitestmt"
)

// hubs shares one database handle and one release-signal registry among every Driver of
// the same file in this process, so a release by one Driver wakes the waiters of another
// at once; a poller picks up releases made by other processes, woken by the notifier
// (inotify on the release file) or, without one, every poll interval.
var hubs = struct {
	sync.Mutex
	m map[string]*hub
}{m: make(map[string]*hub)}

// hub is the per-file state shared by the Drivers of one process.
type hub struct {
	path string
	db   sqlitestmt.DB
	poll time.Duration
	// n signals releases to other processes and wakes the poller on theirs; nil when
	// unavailable (not Linux, inotify refused), and then the poller polls every poll.
	n    *notifier
	refs int // guarded by hubs
	// unshared hubs (tests) are not in hubs.m.
	unshared bool

	// wmu serializes this process's write transactions, so they queue in Go instead of
	// sleeping in SQLite's busy handler; other processes still meet busy_timeout.
	wmu sync.Mutex

	mu     sync.Mutex
	subs   map[string]map[*subscription]struct{}
	seen   map[string]int64 // last release counter seen, per subscribed key
	global int64            // last global release counter seen by the poller
	wake   chan struct{}    // a first subscriber appeared
	stop   chan struct{}
	done   chan struct{}
}

// openHub returns the hub of path (absolute), opening the database on first use.
func openHub(path string, poll time.Duration) (*hub, error) {
	hubs.Lock()
	defer hubs.Unlock()
	if h := hubs.m[path]; h != nil {
		h.refs++
		return h, nil
	}
	h, err := newHub(path, poll, true)
	if err != nil {
		return nil, err
	}
	hubs.m[path] = h
	return h, nil
}

// newHub opens the database at path and starts the hub's poller; notify false leaves the
// hub without a notifier, as on a system without inotify.
func newHub(path string, poll time.Duration, notify bool) (*hub, error) {
	db, err := openDB(path)
	if err != nil {
		return nil, err
	}
	h := &hub{
		path: path,
		db:   db,
		poll: poll,
		refs: 1,
		subs: make(map[string]map[*subscription]struct{}),
		seen: make(map[string]int64),
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if notify {
		// Without a notifier the poll still finds every release, only later.
		h.n, _ = openNotifier(path)
	}
	go h.poller()
	return h, nil
}

// release drops one reference; the last one stops the poller and closes the database.
func (h *hub) release() error {
	hubs.Lock()
	h.refs--
	last := h.refs == 0
	if last && !h.unshared {
		delete(hubs.m, h.path)
	}
	hubs.Unlock()
	if !last {
		return nil
	}
	close(h.stop)
	<-h.done
	var nerr error
	if h.n != nil {
		nerr = h.n.close()
	}
	return errors.Join(nerr, h.db.Set.Close(), h.db.Close())
}

// write runs f in one BEGIN IMMEDIATE transaction.
func (h *hub) write(ctx context.Context, f func(sqlitestmt.Tx) error) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(sqlitestmt.Tx{Tx: tx, Set: h.db.Set}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// subscription is one Subscribe: a channel with room for one pending signal.
type subscription struct {
	h    *hub
	key  string
	c    chan struct{}
	once sync.Once
	d    *Driver
}

func (s *subscription) C() <-chan struct{} { return s.c }

// Close stops the subscription. It never fails.
func (s *subscription) Close() error {
	s.once.Do(func() {
		s.h.unsubscribe(s)
		s.d.forgetSub(s)
	})
	return nil
}

func (s *subscription) signal() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// subscribe registers s; baseline is the key's release counter read before registering,
// so any later release, from any process, is seen.
func (h *hub) subscribe(s *subscription, baseline int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[s.key]
	if set == nil {
		set = make(map[*subscription]struct{})
		h.subs[s.key] = set
		h.seen[s.key] = baseline
	}
	set[s] = struct{}{}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *hub) unsubscribe(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[s.key]
	delete(set, s)
	if len(set) == 0 {
		delete(h.subs, s.key)
		delete(h.seen, s.key)
	}
}

// notify wakes the subscribers of key after a release in this process moved the counters
// to n, and tells the other processes through the notifier. The poller will see the same
// counters and not signal again. When this release is the only one since the poller's
// last read (the global counter moved by one), the poller takes it as read: the notifier
// wakes this process's own poller too, and it then reads one counter instead of every
// subscribed key's.
func (h *hub) notify(key string, n released) {
	if h.n != nil {
		h.n.signal()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if n.global == h.global+1 {
		h.global = n.global
	}
	set := h.subs[key]
	if len(set) == 0 || n.key <= h.seen[key] {
		return
	}
	h.seen[key] = n.key
	for s := range set {
		s.signal()
	}
}

// backstopPoll is the poll interval while the notifier works (or the configured one if
// longer). It catches what inotify cannot see: a release whose process died between its
// commit and its signal, or one written from another kernel (a state directory shared
// with a VM's host), which inotify does not report. It costs a waiting process four small
// reads a second.
const backstopPoll = 250 * time.Millisecond

// poller wakes subscribers on releases made by other processes: while anyone subscribes,
// it reads the global release counter on each notifier event and every poll interval and,
// when it moved, the counters of the subscribed keys. An event that arrives while nobody
// subscribes stays pending and causes one read later, which is harmless: subscribers
// compare with the counter they read when subscribing.
func (h *hub) poller() {
	defer close(h.done)
	var events, dead <-chan struct{}
	if h.n != nil {
		events, dead = h.n.c, h.n.dead
	}
	t := time.NewTimer(h.poll)
	defer t.Stop()
	for {
		h.mu.Lock()
		idle := len(h.subs) == 0
		h.mu.Unlock()
		if idle {
			select {
			case <-h.wake:
			case <-h.stop:
				return
			}
		}
		interval := h.poll
		if events != nil {
			interval = max(h.poll, backstopPoll)
		}
		t.Reset(interval)
		select {
		case <-t.C:
		case <-events:
		case <-dead:
			// The watch ended (the release file was removed): poll from now on.
			events, dead = nil, nil
		case <-h.stop:
			return
		}
		h.pollOnce()
	}
}

func (h *hub) pollOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*h.poll+time.Second)
	defer cancel()
	var global int64
	err := h.db.QueryRow(ctx, qSignal, "").Scan(&global)
	if err != nil {
		return // no release yet, or a transient error: try again next tick
	}
	h.mu.Lock()
	if global == h.global {
		h.mu.Unlock()
		return
	}
	keys := make([]string, 0, len(h.subs))
	for k := range h.subs {
		keys = append(keys, k)
	}
	h.mu.Unlock()
	list, _ := json.Marshal(keys)
	rows, err := h.db.QueryContext(ctx, `SELECT key, n FROM signals WHERE key IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return
	}
	defer rows.Close()
	counters := make(map[string]int64, len(keys))
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return
		}
		counters[k] = n
	}
	if rows.Err() != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.global = global
	for k, n := range counters {
		if n <= h.seen[k] {
			continue
		}
		if set := h.subs[k]; len(set) > 0 {
			h.seen[k] = n
			for s := range set {
				s.signal()
			}
		}
	}
}
