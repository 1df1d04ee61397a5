package sqlitelock

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"
	"time"
)

// hubs shares one database handle and one release-signal registry among every Driver of
// the same file in this process, so a release by one Driver wakes the waiters of another
// at once; a poller picks up releases made by other processes.
var hubs = struct {
	sync.Mutex
	m map[string]*hub
}{m: make(map[string]*hub)}

// hub is the per-file state shared by the Drivers of one process.
type hub struct {
	path string
	db   *sql.DB
	poll time.Duration
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
	go h.poller()
	hubs.m[path] = h
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
	return h.db.Close()
}

// write runs f in one BEGIN IMMEDIATE transaction.
func (h *hub) write(ctx context.Context, f func(*sql.Tx) error) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
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

// notify wakes the subscribers of key after a release in this process moved its counter
// to n. The poller will see the same counter and not signal again.
func (h *hub) notify(key string, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[key]
	if len(set) == 0 || n <= h.seen[key] {
		return
	}
	h.seen[key] = n
	for s := range set {
		s.signal()
	}
}

// poller wakes subscribers on releases made by other processes: while anyone subscribes,
// it reads the global release counter every poll interval and, when it moved, the
// counters of the subscribed keys.
func (h *hub) poller() {
	defer close(h.done)
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
		t.Reset(h.poll)
		select {
		case <-t.C:
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
	err := h.db.QueryRowContext(ctx, `SELECT n FROM signals WHERE key = ''`).Scan(&global)
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
