// Package sqlitelock is the embedded, single-host lock backend: a locks.Driver on one
// SQLite file (modernc.org/sqlite, pure Go) in the state directory, so a fresh checkout runs
// with no server and a CLI run and the daemon on one host serialize through the same file.
//
// Every Driver method is one BEGIN IMMEDIATE transaction in WAL mode, so grants, fences,
// and waiter queues change atomically. Commits are not synced to disk one by
// one (synchronous=NORMAL): an application crash loses nothing, a power loss may lose the
// last commits, and fences stay above the clock in microseconds so they still only grow. Time is the local wall clock (one
// host). A crashed holder's lease simply expires. Release signals reach waiters in the same
// process at once (all Drivers of one file in a process share a registry) and waiters in
// other processes through inotify on a release file beside the database ("<db>-release",
// written after each release commits), with a poll of a release counter behind it: every
// DefaultPollInterval where inotify is unavailable, every 250 ms otherwise.
package sqlitelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/deploy-orchestrator/orchestrator/internal/private"
	"github.com/deploy-orchestrator/orchestrator/internal/sqlitestmt"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

// DefaultPollInterval is how often a process checks the file for releases made by other
// processes while it has waiters, when it cannot be notified of them (no inotify); with
// inotify the check runs on each notification and, as a backstop, every 250 ms.
const DefaultPollInterval = 50 * time.Millisecond

// maxConns is the size of a process's connection pool to one file.
const maxConns = 4

// busyTimeout is how long a transaction waits for another process's write lock.
const busyTimeout = 10 * time.Second

// Option configures Open.
type Option func(*config)

type config struct {
	poll time.Duration
}

// WithPollInterval sets how often releases by other processes are looked for (default
// DefaultPollInterval). The first Driver opened on a file in a process sets it.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.poll = d
		}
	}
}

// Driver is a locks.Driver on one SQLite file. It is safe for concurrent use.
type Driver struct {
	h *hub

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
}

var _ locks.Driver = (*Driver)(nil)

// Open opens (creating if needed, with its directory) the lock database at path, e.g.
// "<statedir>/locks.db". Errors name the path.
func Open(path string, opts ...Option) (*Driver, error) {
	c := config{poll: DefaultPollInterval}
	for _, o := range opts {
		o(&c)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open lock database %s: %w", path, err)
	}
	if _, err := private.Dir(filepath.Dir(abs)); err != nil {
		return nil, fmt.Errorf("open lock database %s: %w (check that the state directory is writable)", abs, err)
	}
	if err := private.File(abs); err != nil {
		return nil, fmt.Errorf("open lock database %s: %w", abs, err)
	}
	h, err := openHub(abs, c.poll)
	if err != nil {
		return nil, err
	}
	return &Driver{h: h, subs: make(map[*subscription]struct{})}, nil
}

const schema = `
CREATE TABLE IF NOT EXISTS leases (
	key          TEXT PRIMARY KEY,
	token        TEXT NOT NULL DEFAULT '',
	holder       TEXT NOT NULL DEFAULT '',
	fence        INTEGER NOT NULL DEFAULT 0,
	acquired_at  INTEGER NOT NULL DEFAULT 0,
	expires_at   INTEGER NOT NULL DEFAULT 0,
	message      TEXT NOT NULL DEFAULT '',
	frozen       INTEGER NOT NULL DEFAULT 0,
	closed_until INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS fences (
	key   TEXT PRIMARY KEY,
	fence INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS waiters (
	seq      INTEGER PRIMARY KEY AUTOINCREMENT,
	key      TEXT NOT NULL,
	ticket   TEXT NOT NULL,
	deadline INTEGER NOT NULL,
	UNIQUE (key, ticket)
);
CREATE TABLE IF NOT EXISTS signals (
	key TEXT PRIMARY KEY,
	n   INTEGER NOT NULL
);
-- Earlier versions kept the operator actions in a table of their own; they are recorded in
-- the run store's audit log now (runs.AuditLog), and the table goes when a file is opened.
DROP TABLE IF EXISTS audit;
`

// The statements of the hot paths (acquire, renew, release, waking waiters), prepared when
// the file is opened (see sqlitestmt).
const (
	qLease = `SELECT token, holder, fence, acquired_at, expires_at, message, frozen, closed_until
		FROM leases WHERE key = ?`
	qDropExpiredWaiters = `DELETE FROM waiters WHERE key = ? AND deadline <= ?`
	qHeadWaiter         = `SELECT ticket FROM waiters WHERE key = ? ORDER BY seq LIMIT 1`
	qNextFence          = `INSERT INTO fences (key, fence) VALUES (?1, ?2)
		ON CONFLICT (key) DO UPDATE SET fence = max(fence + 1, ?2) RETURNING fence`
	qGrant = `INSERT OR REPLACE INTO leases
		(key, token, holder, fence, acquired_at, expires_at, message, frozen, closed_until)
		VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0)`
	qDropWaiter = `DELETE FROM waiters WHERE key = ? AND ticket = ?`
	qQueue      = `INSERT INTO waiters (key, ticket, deadline) VALUES (?1, ?2, ?3)
		ON CONFLICT (key, ticket) DO UPDATE SET deadline = excluded.deadline
		WHERE deadline < ?4 + (excluded.deadline - ?4) * 5 / 6`
	qRenew = `UPDATE leases SET expires_at = ?
		WHERE key = ? AND token = ? AND token <> '' AND frozen = 0 AND expires_at > ?`
	qRelease = `DELETE FROM leases
		WHERE key = ? AND token = ? AND token <> '' AND frozen = 0 AND expires_at > ?`
	qBump        = `INSERT INTO signals (key, n) VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET n = n + 1 RETURNING n`
	qSignal      = `SELECT n FROM signals WHERE key = ?`
	qWaiterCount = `SELECT count(*) FROM waiters WHERE key = ? AND deadline > ?`
)

var hotQueries = []string{qLease, qDropExpiredWaiters, qHeadWaiter, qNextFence, qGrant, qDropWaiter,
	qQueue, qRenew, qRelease, qBump, qSignal, qWaiterCount}

// openDB opens the database at path, creates its schema when missing and prepares the
// hot statements.
func openDB(path string) (sqlitestmt.DB, error) {
	// A "file:" URI, with the path escaped so '?', '#' and '%' in it stay part of the name.
	dsn := fmt.Sprintf("file:%s?_txlock=immediate&_busy_timeout=%d&_journal_mode=WAL&_synchronous=NORMAL",
		(&url.URL{Path: path}).EscapedPath(), busyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return sqlitestmt.DB{}, fmt.Errorf("open lock database %s: %w", path, err)
	}
	// Writes are serialized in the hub; a few connections let reads run beside them. Keep
	// them all open: a new connection pays for opening the file and its PRAGMAs.
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(0)
	ctx, cancel := context.WithTimeout(context.Background(), busyTimeout+5*time.Second)
	defer cancel()
	// Switching a new file to WAL, or recovering a WAL another process left, answers
	// SQLITE_BUSY without calling the busy handler when two processes open the file at the
	// same moment: try again until the busy timeout, like the busy handler would.
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		if err = createSchema(ctx, db); !isBusy(err) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	var set sqlitestmt.Set
	if err == nil {
		set, err = sqlitestmt.Prepare(ctx, db, hotQueries...)
	}
	if err != nil {
		_ = db.Close()
		return sqlitestmt.DB{}, fmt.Errorf("open lock database %s: %w (check that it is a lock database and its directory is writable)", path, err)
	}
	return sqlitestmt.DB{DB: db, Set: set}, nil
}

func createSchema(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err = tx.ExecContext(ctx, schema); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// Path is the absolute path of the database file.
func (d *Driver) Path() string { return d.h.path }

func (d *Driver) fail(op, key string, err error) error {
	if key != "" {
		op = fmt.Sprintf("%s %q", op, key)
	}
	return fmt.Errorf("%s: %w: %w (check the lock database %s)", op, locks.ErrUnavailable, err, d.h.path)
}

func (d *Driver) check(op, key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("%s %q: %w: the driver is closed", op, key, locks.ErrUnavailable)
	}
	return nil
}

// row is a leases row.
type row struct {
	found bool
	info  locks.Info
	now   int64
}

func (r row) live() bool   { return r.found && r.info.Token != "" && r.info.ExpiresAt.UnixNano() > r.now }
func (r row) closed() bool { return r.found && r.info.ClosedUntil.UnixNano() > r.now }

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// querier runs a query for one row: a sqlitestmt.Tx or a sqlitestmt.DB.
type querier interface {
	QueryRow(ctx context.Context, query string, args ...any) *sql.Row
}

func readLease(ctx context.Context, q querier, key string, now int64) (row, error) {
	var (
		r                                 = row{now: now}
		acquired, expires, closed, frozen int64
	)
	err := q.QueryRow(ctx, qLease, key).Scan(&r.info.Token, &r.info.Holder, &r.info.Fence, &acquired, &expires,
		&r.info.Message, &frozen, &closed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return r, nil
	case err != nil:
		return r, err
	}
	r.found = true
	r.info.Key = key
	r.info.AcquiredAt, r.info.ExpiresAt, r.info.ClosedUntil = fromNanos(acquired), fromNanos(expires), fromNanos(closed)
	r.info.Frozen = frozen != 0
	return r, nil
}

// current is what a HeldError shows about r: the live lease, or only the lock-delay.
func (r row) current(key string) locks.Info {
	if r.live() {
		return r.info
	}
	info := locks.Info{Key: key}
	if r.closed() {
		info.ClosedUntil = r.info.ClosedUntil
	}
	return info
}

// nextFence issues the key's next fence: max(last+1, the clock in microseconds). The
// clock floor keeps fences growing even if the file lost its last commits (a power loss
// with synchronous=NORMAL, a restored backup), as long as the clock did not step back by
// more than what was lost. Fences therefore look like timestamps; only their order matters.
func nextFence(ctx context.Context, tx sqlitestmt.Tx, key string, now time.Time) (int64, error) {
	var f int64
	err := tx.QueryRow(ctx, qNextFence, key, now.UnixMicro()).Scan(&f)
	return f, err
}

// released is a release's new counters: the key's and the global one.
type released struct{ key, global int64 }

// bump advances the key's and the global release counters.
func bump(ctx context.Context, tx sqlitestmt.Tx, key string) (released, error) {
	var r released
	if err := tx.QueryRow(ctx, qBump, key).Scan(&r.key); err != nil {
		return released{}, err
	}
	if err := tx.QueryRow(ctx, qBump, "").Scan(&r.global); err != nil {
		return released{}, err
	}
	return r, nil
}

// TryAcquire implements locks.Driver.
func (d *Driver) TryAcquire(ctx context.Context, g locks.Grant) (locks.Info, error) {
	if err := d.check("acquire", g.Key); err != nil {
		return locks.Info{}, err
	}
	var (
		granted locks.Info
		held    *locks.HeldError
	)
	err := d.h.write(ctx, func(tx sqlitestmt.Tx) error {
		now := time.Now()
		nowN := now.UnixNano()
		if _, err := tx.Exec(ctx, qDropExpiredWaiters, g.Key, nowN); err != nil {
			return err
		}
		r, err := readLease(ctx, tx, g.Key, nowN)
		if err != nil {
			return err
		}
		if !r.live() && !r.closed() {
			var head string
			err := tx.QueryRow(ctx, qHeadWaiter, g.Key).Scan(&head)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if head == "" || head == g.Ticket {
				fence, err := nextFence(ctx, tx, g.Key, now)
				if err != nil {
					return err
				}
				granted = locks.Info{Key: g.Key, Token: g.Token, Holder: g.Holder, Fence: fence,
					AcquiredAt: now, ExpiresAt: now.Add(g.TTL), Message: g.Message}
				if _, err := tx.Exec(ctx, qGrant,
					g.Key, g.Token, g.Holder, fence, nowN, granted.ExpiresAt.UnixNano(), g.Message); err != nil {
					return err
				}
				if g.Ticket != "" {
					if _, err := tx.Exec(ctx, qDropWaiter, g.Key, g.Ticket); err != nil {
						return err
					}
				}
				return nil
			}
		}
		if g.Ticket != "" {
			// Queue the ticket, or move its deadline. A ticket refreshed moments ago (more
			// than 5/6 of its life left) is left alone, so waiters woken together by a
			// release only one of them can have do not each pay for a write; a poll, which
			// comes later, always moves it.
			dl := nanos(g.TicketDeadline)
			if _, err := tx.Exec(ctx, qQueue,
				g.Key, g.Ticket, dl, nowN); err != nil {
				return err
			}
		}
		reason := locks.ErrHeld
		if r.live() && r.info.Frozen {
			reason = locks.ErrFrozen
		}
		cur := r.current(g.Key)
		cur.Token = ""
		held = &locks.HeldError{Key: g.Key, Reason: reason, Current: cur}
		return nil
	})
	switch {
	case err != nil:
		return locks.Info{}, d.fail("acquire", g.Key, err)
	case held != nil:
		return locks.Info{}, held
	}
	return granted, nil
}

// LeaveQueue implements locks.Driver.
func (d *Driver) LeaveQueue(ctx context.Context, key, ticket string) error {
	if err := d.check("leave queue of", key); err != nil {
		return err
	}
	err := d.h.write(ctx, func(tx sqlitestmt.Tx) error {
		_, err := tx.Exec(ctx, qDropWaiter, key, ticket)
		return err
	})
	if err != nil {
		return d.fail("leave queue of", key, err)
	}
	return nil
}

// Renew implements locks.Driver.
func (d *Driver) Renew(ctx context.Context, key, token string, ttl time.Duration) (time.Time, error) {
	if err := d.check("renew", key); err != nil {
		return time.Time{}, err
	}
	var exp time.Time
	held := false
	err := d.h.write(ctx, func(tx sqlitestmt.Tx) error {
		now := time.Now()
		exp = now.Add(ttl)
		res, err := tx.Exec(ctx, qRenew, exp.UnixNano(), key, token, now.UnixNano())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		held = n == 1
		return err
	})
	switch {
	case err != nil:
		return time.Time{}, d.fail("renew", key, err)
	case !held:
		return time.Time{}, fmt.Errorf("renew %q: %w: the lease expired or another token holds the key", key, locks.ErrNotHeld)
	}
	return exp, nil
}

// Release implements locks.Driver.
func (d *Driver) Release(ctx context.Context, key, token string) error {
	if err := d.check("release", key); err != nil {
		return err
	}
	var n released
	held := false
	err := d.h.write(ctx, func(tx sqlitestmt.Tx) error {
		res, err := tx.Exec(ctx, qRelease, key, token, time.Now().UnixNano())
		if err != nil {
			return err
		}
		rows, err := res.RowsAffected()
		if err != nil || rows == 0 {
			return err
		}
		held = true
		n, err = bump(ctx, tx, key)
		return err
	})
	switch {
	case err != nil:
		return d.fail("release", key, err)
	case !held:
		return fmt.Errorf("release %q: %w: the lease expired or another token holds the key", key, locks.ErrNotHeld)
	}
	d.h.notify(key, n)
	return nil
}

// waiterCount counts the live waiters of key.
func waiterCount(ctx context.Context, q querier, key string, now int64) (int, error) {
	var n int
	err := q.QueryRow(ctx, qWaiterCount, key, now).Scan(&n)
	return n, err
}

// Get implements locks.Driver.
func (d *Driver) Get(ctx context.Context, key string) (locks.Info, error) {
	if err := d.check("get", key); err != nil {
		return locks.Info{}, err
	}
	now := time.Now().UnixNano()
	r, err := readLease(ctx, d.h.db, key, now)
	if err != nil {
		return locks.Info{}, d.fail("get", key, err)
	}
	if !r.live() {
		return locks.Info{}, fmt.Errorf("get %q: %w", key, locks.ErrNotFound)
	}
	if r.info.Waiters, err = waiterCount(ctx, d.h.db, key, now); err != nil {
		return locks.Info{}, d.fail("get", key, err)
	}
	return r.info, nil
}

// List implements locks.Driver.
func (d *Driver) List(ctx context.Context, prefix string) ([]locks.Info, error) {
	if err := d.check("list", prefix); err != nil {
		return nil, err
	}
	now := time.Now().UnixNano()
	rows, err := d.h.db.QueryContext(ctx, `SELECT l.key, l.token, l.holder, l.fence, l.acquired_at, l.expires_at,
			l.message, l.frozen, l.closed_until,
			(SELECT count(*) FROM waiters w WHERE w.key = l.key AND w.deadline > ?)
		FROM leases l
		WHERE substr(l.key, 1, length(?)) = ? AND l.token <> '' AND l.expires_at > ?
		ORDER BY l.key`, now, prefix, prefix, now)
	if err != nil {
		return nil, d.fail("list", prefix, err)
	}
	defer rows.Close()
	var out []locks.Info
	for rows.Next() {
		var (
			i                                 locks.Info
			acquired, expires, closed, frozen int64
		)
		if err := rows.Scan(&i.Key, &i.Token, &i.Holder, &i.Fence, &acquired, &expires, &i.Message, &frozen, &closed, &i.Waiters); err != nil {
			return nil, d.fail("list", prefix, err)
		}
		i.AcquiredAt, i.ExpiresAt, i.ClosedUntil = fromNanos(acquired), fromNanos(expires), fromNanos(closed)
		i.Frozen = frozen != 0
		out = append(out, i)
	}
	if err := rows.Err(); err != nil {
		return nil, d.fail("list", prefix, err)
	}
	return out, nil
}

// Subscribe implements locks.Driver.
func (d *Driver) Subscribe(ctx context.Context, key string) (locks.Subscription, error) {
	if err := d.check("subscribe to", key); err != nil {
		return nil, err
	}
	var baseline int64
	err := d.h.db.QueryRow(ctx, qSignal, key).Scan(&baseline)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, d.fail("subscribe to", key, err)
	}
	s := &subscription{h: d.h, key: key, c: make(chan struct{}, 1), d: d}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("subscribe to %q: %w: the driver is closed", key, locks.ErrUnavailable)
	}
	d.subs[s] = struct{}{}
	d.mu.Unlock()
	d.h.subscribe(s, baseline)
	return s, nil
}

func (d *Driver) forgetSub(s *subscription) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.subs, s)
}

// Ping implements locks.Driver.
func (d *Driver) Ping(ctx context.Context) error {
	if err := d.check("ping", ""); err != nil {
		return err
	}
	var one int
	if err := d.h.db.QueryRowContext(ctx, `SELECT 1 FROM signals LIMIT 1`).Scan(&one); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return d.fail("ping", "", err)
	}
	return nil
}

// Close closes the Driver's subscriptions and, with the last Driver of the file in this
// process, the database. Leases are left to expire.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	subs := make([]*subscription, 0, len(d.subs))
	for s := range d.subs {
		subs = append(subs, s)
	}
	d.mu.Unlock()
	for _, s := range subs {
		s.h.unsubscribe(s)
	}
	if err := d.h.release(); err != nil {
		return fmt.Errorf("close lock database %s: %w", d.h.path, err)
	}
	return nil
}
