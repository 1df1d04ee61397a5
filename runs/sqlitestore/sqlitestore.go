// Package sqlitestore is the embedded runs.Store: one SQLite file in the daemon's state
// directory (modernc.org/sqlite, pure Go, no server), in WAL mode so readers (the API, the
// dashboard) never wait for the engine's writes. It is the single-host default: a CLI run
// and the daemon on one host share the file.
//
// Each run is a row holding its JSON plus the columns List filters and sorts on; events are
// rows keyed by (run, seq); resource marks (runs.MarkStore) are rows keyed by UUID. All writes go through one connection in BEGIN IMMEDIATE
// transactions, so a read-modify-write of a run never conflicts inside a process, and
// across processes SQLite's lock (with a busy timeout) serializes them.
//
// Durability: WAL with synchronous=NORMAL, so a crash of the process loses nothing and a
// power cut can lose the last transactions but never corrupts the file.
//
// Live-follow signals are in-process: another process's appends are seen by runs.Follow's
// slow poll.
package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/deploy-orchestrator/orchestrator/internal/private"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/internal/storekit"
)

// FileName is the store's file name in the state directory.
const FileName = "runs.db"

// schemaVersion is the PRAGMA user_version this code writes and understands.
const schemaVersion = 1

const schema = `
CREATE TABLE IF NOT EXISTS runs (
	id        TEXT PRIMARY KEY,
	pipeline  TEXT NOT NULL,
	status    TEXT NOT NULL,
	owner     TEXT NOT NULL DEFAULT '',
	idem_key  TEXT,
	sort_key  TEXT NOT NULL,
	version   INTEGER NOT NULL,
	last_seq  INTEGER NOT NULL DEFAULT 0,
	data      BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS runs_idem ON runs (pipeline, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_sort ON runs (sort_key);
CREATE INDEX IF NOT EXISTS runs_pipeline ON runs (pipeline, sort_key);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status, sort_key);
CREATE INDEX IF NOT EXISTS runs_pipeline_status ON runs (pipeline, status, sort_key);
CREATE INDEX IF NOT EXISTS runs_owner ON runs (owner, status);
CREATE TABLE IF NOT EXISTS events (
	run_id TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	data   BLOB NOT NULL,
	PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deliveries (
	id         TEXT PRIMARY KEY,
	expires_ns INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deliveries_expiry ON deliveries (expires_ns);
CREATE TABLE IF NOT EXISTS marks (
	uuid TEXT PRIMARY KEY,
	data BLOB NOT NULL
) WITHOUT ROWID;
`

// activeStatuses is the SQL list of statuses that have not ended.
var activeStatuses = func() string {
	var q []string
	for _, s := range runs.Statuses {
		if !s.Terminal() {
			q = append(q, "'"+string(s)+"'")
		}
	}
	return strings.Join(q, ",")
}()

// Store is a runs.Store on a SQLite file. It is safe for concurrent use.
type Store struct {
	w      *sql.DB // one connection, BEGIN IMMEDIATE: every write
	r      *sql.DB // a few connections: reads
	hub    *storekit.Hub
	cache  *storekit.Cache // runs this Store wrote last, for Update
	closed atomic.Bool
	now    func() time.Time
}

var _ runs.Store = (*Store)(nil)

// Open opens the store at path (typically filepath.Join(stateDir, FileName)), creating the
// file and its schema when missing. The file and SQLite's -wal and -shm next to it are
// readable by their owner only (0600; an existing file is tightened).
//
// Errors: runs.ErrUnavailable wrapping the cause when the file cannot be opened or created,
// or when it holds a newer schema than this build understands.
func Open(ctx context.Context, path string) (*Store, error) {
	dsn := func(txlock string) string {
		v := url.Values{}
		v.Add("_pragma", "busy_timeout(10000)")
		v.Add("_pragma", "journal_mode(WAL)")
		v.Add("_pragma", "synchronous(NORMAL)")
		v.Add("_txlock", txlock)
		return "file:" + path + "?" + v.Encode()
	}
	if err := private.File(path); err != nil {
		return nil, fmt.Errorf("open run store %s: %w: %w", path, runs.ErrUnavailable, err)
	}
	w, err := sql.Open("sqlite", dsn("immediate"))
	if err != nil {
		return nil, fmt.Errorf("open run store %s: %w: %w", path, runs.ErrUnavailable, err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	r, err := sql.Open("sqlite", dsn("deferred"))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open run store %s: %w: %w", path, runs.ErrUnavailable, err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	s := &Store{w: w, r: r, hub: storekit.NewHub(), cache: storekit.NewCache(0), now: time.Now}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open run store %s: %w", path, err)
	}
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	return s.write(ctx, "create schema", func(tx *sql.Tx) error {
		var v int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return err
		}
		if v > schemaVersion {
			return fmt.Errorf("schema version %d is newer than this build's %d", v, schemaVersion)
		}
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion))
		return err
	})
}

// userError marks an error that came from the caller (fn in Update), to be returned as is.
type userError struct{ err error }

func (e userError) Error() string { return e.err.Error() }
func (e userError) Unwrap() error { return e.err }

// write runs fn in one BEGIN IMMEDIATE transaction on the writer connection.
func (s *Store) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	if s.closed.Load() {
		return storekit.Fail(op, fmt.Errorf("%w: %w", runs.ErrUnavailable, storekit.ErrClosed))
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return storekit.Fail(op, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		var ue userError
		if errors.As(err, &ue) {
			return ue.err
		}
		return storekit.Fail(op, err)
	}
	if err := tx.Commit(); err != nil {
		return storekit.Fail(op, err)
	}
	return nil
}

func (s *Store) readable(op string) error {
	if s.closed.Load() {
		return storekit.Fail(op, fmt.Errorf("%w: %w", runs.ErrUnavailable, storekit.ErrClosed))
	}
	return nil
}

// Create implements runs.Store.
func (s *Store) Create(ctx context.Context, in runs.Run) (runs.Run, bool, error) {
	r, err := storekit.PrepareCreate(in, s.now())
	if err != nil {
		return runs.Run{}, false, err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return runs.Run{}, false, fmt.Errorf("create run: encode: %w", err)
	}
	var idem any
	if k := r.Trigger.IdempotencyKey; k != "" {
		idem = k
	}
	var (
		out     = r
		created = true
	)
	err = s.write(ctx, "create run", func(tx *sql.Tx) error {
		if idem != nil {
			var existing []byte
			err := tx.QueryRowContext(ctx, `SELECT data FROM runs WHERE pipeline = ? AND idem_key = ?`, r.Pipeline, idem).Scan(&existing)
			switch {
			case err == nil:
				created = false
				return json.Unmarshal(existing, &out)
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO runs (id, pipeline, status, owner, idem_key, sort_key, version, data)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.Pipeline, r.Status, r.Owner, idem, storekit.SortKey(r), r.Version, data)
		if isConstraint(err) {
			return fmt.Errorf("run %q already exists: %w", r.ID, runs.ErrConflict)
		}
		return err
	})
	if err != nil {
		return runs.Run{}, false, err
	}
	if !created {
		if err := storekit.CheckReuse(out, r); err != nil {
			return runs.Run{}, false, err
		}
		return out, false, nil
	}
	s.cache.Put(out)
	return out, true, nil
}

func isConstraint(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}

// Get implements runs.Store.
func (s *Store) Get(ctx context.Context, id string) (runs.Run, error) {
	op := fmt.Sprintf("get run %q", id)
	if err := s.readable(op); err != nil {
		return runs.Run{}, err
	}
	var (
		version int64
		data    []byte
	)
	err := s.r.QueryRowContext(ctx, `SELECT version, data FROM runs WHERE id = ?`, id).Scan(&version, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return runs.Run{}, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
	}
	if err != nil {
		return runs.Run{}, storekit.Fail(op, err)
	}
	r, err := s.decode(id, version, data)
	if err != nil {
		return runs.Run{}, storekit.Fail(op, err)
	}
	return r, nil
}

// decode returns the run stored as data at version: from the cache when it holds that
// version (decoding JSON is most of the cost of a read), else decoded and cached.
func (s *Store) decode(id string, version int64, data []byte) (runs.Run, error) {
	if r, ok := s.cache.Lookup(id, version); ok {
		return r, nil
	}
	var r runs.Run
	if err := json.Unmarshal(data, &r); err != nil {
		return runs.Run{}, fmt.Errorf("decode run %q: %w", id, err)
	}
	s.cache.Put(r)
	return r, nil
}

// List implements runs.Store.
func (s *Store) List(ctx context.Context, f runs.Filter) (runs.Page, error) {
	q, err := storekit.ParseFilter(f)
	if err != nil {
		return runs.Page{}, err
	}
	if err := s.readable("list runs"); err != nil {
		return runs.Page{}, err
	}
	var (
		where []string
		args  []any
	)
	if q.Pipeline != "" {
		where = append(where, "pipeline = ?")
		args = append(args, q.Pipeline)
	}
	if len(q.Status) > 0 {
		where = append(where, "status IN (?"+strings.Repeat(",?", len(q.Status)-1)+")")
		for _, st := range q.Status {
			args = append(args, string(st))
		}
	}
	if q.After != "" {
		where = append(where, "sort_key < ?")
		args = append(args, q.After)
	}
	query := "SELECT id, version, data FROM runs"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	// One more than the page tells whether there is a next page.
	query += " ORDER BY sort_key DESC LIMIT ?"
	args = append(args, q.Limit+1)

	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return runs.Page{}, storekit.Fail("list runs", err)
	}
	defer rows.Close()
	page := runs.Page{Runs: make([]runs.Run, 0, q.Limit)}
	for rows.Next() {
		if len(page.Runs) == q.Limit {
			page.Next = storekit.Cursor(page.Runs[len(page.Runs)-1])
			break
		}
		var (
			id      string
			version int64
			data    []byte
		)
		if err := rows.Scan(&id, &version, &data); err != nil {
			return runs.Page{}, storekit.Fail("list runs", err)
		}
		r, err := s.decode(id, version, data)
		if err != nil {
			return runs.Page{}, storekit.Fail("list runs", err)
		}
		page.Runs = append(page.Runs, r)
	}
	if err := rows.Err(); err != nil {
		return runs.Page{}, storekit.Fail("list runs", err)
	}
	return page, nil
}

// Update implements runs.Store. It never retries: the write transaction holds SQLite's
// write lock from the read to the commit, so fn is called once. When the stored version is
// the one this Store wrote last, the run is not read and decoded again.
func (s *Store) Update(ctx context.Context, id string, fn func(*runs.Run) error, evs ...runs.Event) (runs.Run, error) {
	stamped, err := storekit.StampEvents(id, evs, s.now())
	if err != nil {
		return runs.Run{}, err
	}
	var out runs.Run
	err = s.write(ctx, fmt.Sprintf("update run %q", id), func(tx *sql.Tx) error {
		cur, err := s.readForUpdate(ctx, tx, id)
		if err != nil {
			return err
		}
		next, err := storekit.ApplyUpdate(cur, fn)
		if err != nil {
			return userError{err}
		}
		if err := writeRun(ctx, tx, next, stamped); err != nil {
			return err
		}
		out = next
		return nil
	})
	if err != nil {
		s.cache.Drop(id)
		return runs.Run{}, err
	}
	s.cache.Put(out)
	if len(stamped) > 0 {
		s.hub.Notify(id)
	}
	return out, nil
}

// readForUpdate returns the stored run, from the cache when its version is current (the
// data column is then not even read).
func (s *Store) readForUpdate(ctx context.Context, tx *sql.Tx, id string) (runs.Run, error) {
	c, ok := s.cache.Get(id)
	if !ok {
		return readRun(ctx, tx, id)
	}
	var (
		version int64
		data    []byte
	)
	err := tx.QueryRowContext(ctx, `SELECT version, CASE WHEN version = ? THEN NULL ELSE data END FROM runs WHERE id = ?`,
		c.Version, id).Scan(&version, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return runs.Run{}, runs.ErrNotFound
	}
	if err != nil {
		return runs.Run{}, err
	}
	if version == c.Version {
		return c, nil
	}
	var r runs.Run
	if err := json.Unmarshal(data, &r); err != nil {
		return runs.Run{}, fmt.Errorf("decode: %w", err)
	}
	return r, nil
}

// readRun reads a run inside a transaction. ErrNotFound if there is none.
func readRun(ctx context.Context, tx *sql.Tx, id string) (runs.Run, error) {
	var data []byte
	err := tx.QueryRowContext(ctx, `SELECT data FROM runs WHERE id = ?`, id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return runs.Run{}, runs.ErrNotFound
	}
	if err != nil {
		return runs.Run{}, err
	}
	var r runs.Run
	if err := json.Unmarshal(data, &r); err != nil {
		return runs.Run{}, fmt.Errorf("decode: %w", err)
	}
	return r, nil
}

// writeRun writes r over its row and appends evs (stamped) after the run's last seq.
func writeRun(ctx context.Context, tx *sql.Tx, r runs.Run, evs []runs.Event) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE runs SET status = ?, owner = ?, version = ?, data = ? WHERE id = ?`,
		r.Status, r.Owner, r.Version, data, r.ID); err != nil {
		return err
	}
	_, err = appendEvents(ctx, tx, r.ID, evs)
	return err
}

// appendEvents numbers evs after the run's last seq, inserts them and moves last_seq.
// ErrNotFound if the run does not exist.
func appendEvents(ctx context.Context, tx *sql.Tx, id string, evs []runs.Event) ([]runs.Event, error) {
	var last int64
	err := tx.QueryRowContext(ctx, `SELECT last_seq FROM runs WHERE id = ?`, id).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, runs.ErrNotFound
	}
	if err != nil || len(evs) == 0 {
		return evs, err
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO events (run_id, seq, data) VALUES (?, ?, ?)`)
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	for i := range evs {
		last++
		evs[i].Seq = last
		data, err := json.Marshal(evs[i])
		if err != nil {
			return nil, fmt.Errorf("encode event: %w", err)
		}
		if _, err := stmt.ExecContext(ctx, id, last, data); err != nil {
			return nil, err
		}
	}
	_, err = tx.ExecContext(ctx, `UPDATE runs SET last_seq = ? WHERE id = ?`, last, id)
	return evs, err
}

// Append implements runs.Store.
func (s *Store) Append(ctx context.Context, id string, evs ...runs.Event) ([]runs.Event, error) {
	stamped, err := storekit.StampEvents(id, evs, s.now())
	if err != nil {
		return nil, err
	}
	err = s.write(ctx, fmt.Sprintf("append to run %q", id), func(tx *sql.Tx) error {
		_, err := appendEvents(ctx, tx, id, stamped)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(stamped) > 0 {
		s.hub.Notify(id)
	}
	return stamped, nil
}

// Events implements runs.Store.
func (s *Store) Events(ctx context.Context, id string, afterSeq int64, limit int) ([]runs.Event, error) {
	op := fmt.Sprintf("events of run %q", id)
	if err := s.readable(op); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.r.QueryContext(ctx, `SELECT data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, id, afterSeq, limit)
	if err != nil {
		return nil, storekit.Fail(op, err)
	}
	defer rows.Close()
	var out []runs.Event
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, storekit.Fail(op, err)
		}
		var e runs.Event
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, storekit.Fail(op, fmt.Errorf("decode: %w", err))
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, storekit.Fail(op, err)
	}
	if len(out) == 0 {
		var one int
		err := s.r.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
		}
		if err != nil {
			return nil, storekit.Fail(op, err)
		}
	}
	return out, nil
}

// Subscribe implements runs.Store. Signals come from writes made through this Store value
// only; writes by another process are found by runs.Follow's poll.
func (s *Store) Subscribe(ctx context.Context, id string) (runs.Subscription, error) {
	if err := s.readable(fmt.Sprintf("subscribe to run %q", id)); err != nil {
		return nil, err
	}
	return s.hub.Subscribe(id), nil
}

// Unfinished implements runs.Store.
func (s *Store) Unfinished(ctx context.Context, owner string) ([]runs.Run, error) {
	op := fmt.Sprintf("unfinished runs of %q", owner)
	if err := s.readable(op); err != nil {
		return nil, err
	}
	q, args := `SELECT id, version, data FROM runs WHERE status IN (`+activeStatuses+`) ORDER BY sort_key`, []any{}
	if owner != "" {
		q, args = `SELECT id, version, data FROM runs WHERE owner = ? AND status IN (`+activeStatuses+`) ORDER BY sort_key`, []any{owner}
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, storekit.Fail(op, err)
	}
	defer rows.Close()
	var out []runs.Run
	for rows.Next() {
		var (
			id      string
			version int64
			data    []byte
		)
		if err := rows.Scan(&id, &version, &data); err != nil {
			return nil, storekit.Fail(op, err)
		}
		r, err := s.decode(id, version, data)
		if err != nil {
			return nil, storekit.Fail(op, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, storekit.Fail(op, err)
	}
	return out, nil
}

// SeenDelivery implements runs.Store. Expired records are deleted on each call.
func (s *Store) SeenDelivery(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if id == "" || ttl <= 0 {
		return false, fmt.Errorf("seen delivery: empty id or ttl %s: %w", ttl, runs.ErrInvalid)
	}
	var seen bool
	err := s.write(ctx, fmt.Sprintf("seen delivery %q", id), func(tx *sql.Tx) error {
		now := s.now()
		if _, err := tx.ExecContext(ctx, `DELETE FROM deliveries WHERE expires_ns <= ?`, now.UnixNano()); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO deliveries (id, expires_ns) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`,
			id, now.Add(ttl).UnixNano())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		seen = n == 0
		return err
	})
	return seen, err
}

// Ping implements runs.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.readable("ping run store"); err != nil {
		return err
	}
	var one int
	if err := s.r.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return storekit.Fail("ping run store", err)
	}
	return nil
}

// Close ends every subscription and closes the database. Calling it again returns nil.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.hub.Close()
	return errors.Join(s.r.Close(), s.w.Close())
}
