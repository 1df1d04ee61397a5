// Package sqlitestore is the embedded runs.Store: one SQLite file in the daemon's state
// directory (modernc.org/sqlite, pure Go, no server), in WAL mode so readers (the API, the
// dashboard) never wait for the engine's writes. It is the single-host default: a CLI run
// and the daemon on one host share the file.
//
// Each run is a row holding its header (the run without its steps, as JSON) plus the columns
// List filters and sorts on; its steps are rows keyed by (run, position), so an Update
// rewrites the header and only the steps that changed (storekit.ChangedSteps), not the whole
// run; events are rows keyed by (run, seq); resource marks (runs.MarkStore) are rows keyed
// by UUID. Reads of a run take its header and steps in one read transaction (one WAL
// snapshot), so they never see a half-written Update. All writes go through one connection
// in BEGIN IMMEDIATE transactions, so a read-modify-write of a run never conflicts inside a
// process, and across processes SQLite's lock (with a busy timeout) serializes them.
//
// A file written by builds that stored each run whole (schema 1) is migrated when it is
// opened; builds older than this one refuse a migrated file (its schema is newer).
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
	"github.com/deploy-orchestrator/orchestrator/internal/sqlitestmt"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/internal/storekit"
)

// FileName is the store's file name in the state directory.
const FileName = "runs.db"

// schemaVersion is the PRAGMA user_version this code writes and understands.
//
//	1: runs.data held the whole run, steps included.
//	2: runs.data holds the header, steps are rows of steps (splitSteps migrates 1 to 2).
const schemaVersion = 2

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
CREATE TABLE IF NOT EXISTS steps (
	run_id TEXT NOT NULL,
	idx    INTEGER NOT NULL,
	data   BLOB NOT NULL,
	PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;
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

// The queries of the hot paths, prepared at Open (see sqlitestmt).
const (
	qHead        = `SELECT id, version, data FROM runs WHERE id = ?`
	qStepsOf     = `SELECT run_id, data FROM steps WHERE run_id = ? ORDER BY idx`
	qVersion     = `SELECT version FROM runs WHERE id = ?`
	qWriteHeader = `UPDATE runs SET status = ?, owner = ?, version = ?, data = ?, last_seq = last_seq + ? WHERE id = ? RETURNING last_seq`
	qWriteStep   = `INSERT INTO steps (run_id, idx, data) VALUES (?, ?, ?) ON CONFLICT (run_id, idx) DO UPDATE SET data = excluded.data`
	qDropSteps   = `DELETE FROM steps WHERE run_id = ? AND idx >= ?`
	qReserveSeqs = `UPDATE runs SET last_seq = last_seq + ? WHERE id = ? RETURNING last_seq`
	qAddEvent    = `INSERT INTO events (run_id, seq, data) VALUES (?, ?, ?)`
	qMark        = `SELECT data FROM marks WHERE uuid = ?`
	qPutMark     = `INSERT INTO marks (uuid, data) VALUES (?, ?) ON CONFLICT (uuid) DO UPDATE SET data = excluded.data`
)

var (
	readQueries  = []string{qHead, qStepsOf, qMark}
	writeQueries = []string{qHead, qStepsOf, qVersion, qWriteHeader, qWriteStep, qDropSteps, qReserveSeqs, qAddEvent, qMark, qPutMark}
)

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
	w      *sql.DB        // one connection, BEGIN IMMEDIATE: every write
	r      *sql.DB        // a few connections: reads
	ws, rs sqlitestmt.Set // the hot queries, prepared on w and r
	hub    *storekit.Hub
	cache  *storekit.Cache  // runs this Store wrote last, for Update
	lists  *sqlitestmt.Lazy // List's queries, prepared on r
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
	s := &Store{w: w, r: r, hub: storekit.NewHub(), cache: storekit.NewCache(0), lists: sqlitestmt.NewLazy(r), now: time.Now}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open run store %s: %w", path, err)
	}
	if s.ws, err = sqlitestmt.Prepare(ctx, w, writeQueries...); err == nil {
		s.rs, err = sqlitestmt.Prepare(ctx, r, readQueries...)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open run store %s: %w: %w", path, runs.ErrUnavailable, err)
	}
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	return s.writeP(ctx, "create schema", func(tx sqlitestmt.Tx) error {
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
		if v == 1 {
			if err := splitSteps(ctx, tx); err != nil {
				return fmt.Errorf("migrate schema 1 to 2: %w", err)
			}
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion))
		return err
	})
}

// splitSteps moves every run stored whole (schema 1) to a header and step rows (schema 2),
// a page of runs at a time, inside the migration's transaction: a build that fails half
// way leaves the file at schema 1, as it was.
func splitSteps(ctx context.Context, tx sqlitestmt.Tx) error {
	after := ""
	for {
		rows, err := tx.QueryContext(ctx, `SELECT id, data FROM runs WHERE id > ? ORDER BY id LIMIT 100`, after)
		if err != nil {
			return err
		}
		var page []head
		for rows.Next() {
			var h head
			if err := rows.Scan(&h.id, &h.data); err != nil {
				rows.Close()
				return err
			}
			page = append(page, h)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		for _, h := range page {
			r, err := storekit.DecodeRun(h.id, h.data, nil, true)
			if err != nil {
				return err
			}
			if err := writeSteps(ctx, tx, r, storekit.AllSteps(r), 0); err != nil {
				return err
			}
			data, err := storekit.EncodeHeader(r)
			if err != nil {
				return fmt.Errorf("encode run %q: %w", r.ID, err)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE runs SET data = ? WHERE id = ?`, data, r.ID); err != nil {
				return err
			}
		}
		after = page[len(page)-1].id
	}
}

// userError marks an error that came from the caller (fn in Update), to be returned as is.
type userError struct{ err error }

func (e userError) Error() string { return e.err.Error() }
func (e userError) Unwrap() error { return e.err }

// write runs fn in one BEGIN IMMEDIATE transaction on the writer connection.
func (s *Store) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	return s.writeP(ctx, op, func(tx sqlitestmt.Tx) error { return fn(tx.Tx) })
}

// writeP is write with the writer's cached statements.
func (s *Store) writeP(ctx context.Context, op string, fn func(tx sqlitestmt.Tx) error) error {
	if s.closed.Load() {
		return storekit.Fail(op, fmt.Errorf("%w: %w", runs.ErrUnavailable, storekit.ErrClosed))
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return storekit.Fail(op, err)
	}
	if err := fn(sqlitestmt.Tx{Tx: tx, Set: s.ws}); err != nil {
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
	data, err := storekit.EncodeHeader(r)
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
	err = s.writeP(ctx, "create run", func(tx sqlitestmt.Tx) error {
		if idem != nil {
			var existing string
			err := tx.QueryRowContext(ctx, `SELECT id FROM runs WHERE pipeline = ? AND idem_key = ?`, r.Pipeline, idem).Scan(&existing)
			switch {
			case err == nil:
				created = false
				out, err = s.readRun(ctx, tx, existing)
				return err
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO runs (id, pipeline, status, owner, idem_key, sort_key, version, data)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.Pipeline, r.Status, r.Instance, idem, storekit.SortKey(r), r.Version, data)
		if isConstraint(err) {
			return fmt.Errorf("run %q already exists: %w", r.ID, runs.ErrConflict)
		}
		if err != nil {
			return err
		}
		return writeSteps(ctx, tx, r, storekit.AllSteps(r), 0)
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

// read runs fn in one read transaction: every statement in it sees the same snapshot of
// the file, so a run's header and steps are read as one Update left them.
func (s *Store) read(ctx context.Context, op string, fn func(tx sqlitestmt.Tx) error) error {
	if err := s.readable(op); err != nil {
		return err
	}
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return storekit.Fail(op, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep
	if err := fn(sqlitestmt.Tx{Tx: tx, Set: s.rs}); err != nil {
		return storekit.Fail(op, err)
	}
	return nil
}

// Get implements runs.Store.
func (s *Store) Get(ctx context.Context, id string) (runs.Run, error) {
	var r runs.Run
	err := s.read(ctx, fmt.Sprintf("get run %q", id), func(tx sqlitestmt.Tx) (err error) {
		r, err = s.readRun(ctx, tx, id)
		return err
	})
	return r, err
}

// head is a run's row: its ID, version and header JSON.
type head struct {
	id      string
	version int64
	data    []byte
}

// scanHeads reads rows of (id, version, data), at most limit of them (limit < 0: all), and
// reports whether there were more.
func scanHeads(rows *sql.Rows, limit int) (heads []head, more bool, err error) {
	defer rows.Close()
	for rows.Next() {
		if len(heads) == limit {
			return heads, true, nil
		}
		var h head
		if err := rows.Scan(&h.id, &h.version, &h.data); err != nil {
			return nil, false, err
		}
		heads = append(heads, h)
	}
	return heads, false, rows.Err()
}

// readRun reads run id inside tx. ErrNotFound if there is none.
func (s *Store) readRun(ctx context.Context, tx sqlitestmt.Tx, id string) (runs.Run, error) {
	rows, err := tx.Query(ctx, qHead, id)
	if err != nil {
		return runs.Run{}, err
	}
	heads, _, err := scanHeads(rows, 1)
	if err != nil {
		return runs.Run{}, err
	}
	if len(heads) == 0 {
		return runs.Run{}, runs.ErrNotFound
	}
	rs, err := s.assemble(ctx, tx, heads, false)
	if err != nil {
		return runs.Run{}, err
	}
	return rs[0], nil
}

// assemble returns the runs of heads, in order: from the cache when it holds a run at its
// stored version (decoding JSON is most of the cost of a read), else decoded from the header
// (read in tx unless heads has it) and the step rows read in tx, and cached. With shared,
// the cached runs are answered without a copy (see runs.Filter.ReadOnly).
func (s *Store) assemble(ctx context.Context, tx sqlitestmt.Tx, heads []head, shared bool) ([]runs.Run, error) {
	out := make([]runs.Run, len(heads))
	var (
		missing  []string
		noHeader []int // missing runs whose header was not read with the version (List)
	)
	for i, h := range heads {
		if r, ok := s.cache.Lookup(h.id, h.version, shared); ok {
			out[i] = r
			continue
		}
		missing = append(missing, h.id)
		if h.data == nil {
			noHeader = append(noHeader, i)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	if err := readHeaders(ctx, tx, heads, noHeader); err != nil {
		return nil, err
	}
	steps, err := readSteps(ctx, tx, missing)
	if err != nil {
		return nil, err
	}
	for i, h := range heads {
		if out[i].ID != "" {
			continue
		}
		r, err := storekit.DecodeRun(h.id, h.data, steps[h.id], false)
		if err != nil {
			return nil, err
		}
		r.Version = h.version
		s.cache.Put(r)
		out[i] = r
	}
	return out, nil
}

// maxParams bounds the IDs of one IN (…) list, under SQLite's host parameter limit.
const maxParams = 500

// readSteps returns the step rows of runs ids, by run ID, in position order.
func readSteps(ctx context.Context, tx sqlitestmt.Tx, ids []string) (map[string][][]byte, error) {
	out := make(map[string][][]byte, len(ids))
	for len(ids) > 0 {
		batch := ids[:min(len(ids), maxParams)]
		ids = ids[len(batch):]
		args := make([]any, len(batch))
		for i, id := range batch {
			args[i] = id
		}
		query := qStepsOf
		if len(batch) > 1 {
			query = `SELECT run_id, data FROM steps WHERE run_id IN (?` + strings.Repeat(",?", len(batch)-1) + `) ORDER BY run_id, idx`
		}
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var (
				id   string
				data []byte
			)
			if err := rows.Scan(&id, &data); err != nil {
				rows.Close()
				return nil, err
			}
			out[id] = append(out[id], data)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// List implements runs.Store.
func (s *Store) List(ctx context.Context, f runs.Filter) (runs.Page, error) {
	q, err := storekit.ParseFilter(f)
	if err != nil {
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
	query := "SELECT id, version FROM runs"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	// One more than the page tells whether there is a next page.
	query += " ORDER BY sort_key DESC LIMIT ?"
	args = append(args, q.Limit+1)

	var page runs.Page
	err = s.read(ctx, "list runs", func(tx sqlitestmt.Tx) error {
		rows, err := s.listQuery(ctx, tx, query, len(q.Status), args)
		if err != nil {
			return err
		}
		heads, more, err := scanVersions(rows, q.Limit)
		if err != nil {
			return err
		}
		if page.Runs, err = s.assemble(ctx, tx, heads, f.ReadOnly); err != nil {
			return err
		}
		if more {
			page.Next = storekit.Cursor(page.Runs[len(page.Runs)-1])
		}
		return nil
	})
	if err != nil {
		return runs.Page{}, err
	}
	return page, nil
}

// listQuery runs one of List's queries, prepared (s.lists) unless its status list is
// longer than there are statuses: the shapes prepared stay bounded whatever clients send.
func (s *Store) listQuery(ctx context.Context, tx sqlitestmt.Tx, query string, statuses int, args []any) (*sql.Rows, error) {
	if statuses > len(runs.Statuses) {
		return tx.QueryContext(ctx, query, args...)
	}
	st, err := s.lists.Stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
}

// scanVersions reads rows of (id, version), at most limit of them, and reports whether
// there were more.
func scanVersions(rows *sql.Rows, limit int) (heads []head, more bool, err error) {
	defer rows.Close()
	for rows.Next() {
		if len(heads) == limit {
			return heads, true, nil
		}
		var h head
		if err := rows.Scan(&h.id, &h.version); err != nil {
			return nil, false, err
		}
		heads = append(heads, h)
	}
	return heads, false, rows.Err()
}

// readHeaders fills in the header JSON of heads[i] for each i in idx, read in tx.
func readHeaders(ctx context.Context, tx sqlitestmt.Tx, heads []head, idx []int) error {
	at := make(map[string]int, len(idx))
	for len(idx) > 0 {
		batch := idx[:min(len(idx), maxParams)]
		idx = idx[len(batch):]
		args := make([]any, len(batch))
		for j, i := range batch {
			args[j] = heads[i].id
			at[heads[i].id] = i
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, data FROM runs WHERE id IN (?`+strings.Repeat(",?", len(batch)-1)+`)`, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				id   string
				data []byte
			)
			if err := rows.Scan(&id, &data); err != nil {
				rows.Close()
				return err
			}
			heads[at[id]].data = data
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
	}
	return nil
}

// Update implements runs.Store. It never retries: the write transaction holds SQLite's
// write lock from the read to the commit, so fn is called once. When the stored version is
// the one this Store wrote last, the run is not read and decoded again. It writes the
// header and only the steps fn changed.
func (s *Store) Update(ctx context.Context, id string, fn func(*runs.Run) error, evs ...runs.Event) (runs.Run, error) {
	stamped, err := storekit.StampEvents(id, evs, s.now())
	if err != nil {
		return runs.Run{}, err
	}
	var out runs.Run
	err = s.writeP(ctx, fmt.Sprintf("update run %q", id), func(tx sqlitestmt.Tx) error {
		cur, err := s.readForUpdate(ctx, tx, id)
		if err != nil {
			return err
		}
		next, err := storekit.ApplyUpdate(cur, fn)
		if err != nil {
			return userError{err}
		}
		if err := writeRun(ctx, tx, cur, next, stamped); err != nil {
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

// readForUpdate returns the stored run: the cached copy when its version is current (then
// neither the header nor the steps are read), else read in tx.
func (s *Store) readForUpdate(ctx context.Context, tx sqlitestmt.Tx, id string) (runs.Run, error) {
	if c, ok := s.cache.Get(id); ok {
		var version int64
		err := tx.QueryRow(ctx, qVersion, id).Scan(&version)
		if errors.Is(err, sql.ErrNoRows) {
			return runs.Run{}, runs.ErrNotFound
		}
		if err != nil {
			return runs.Run{}, err
		}
		if version == c.Version {
			return c, nil
		}
	}
	return s.readRun(ctx, tx, id)
}

// writeRun writes next over cur (the run as stored): its header, the steps that differ from
// cur's, and drops the steps past next's end; then it appends evs (stamped). The header's
// statement also takes the events' seqs.
func writeRun(ctx context.Context, tx sqlitestmt.Tx, cur, next runs.Run, evs []runs.Event) error {
	data, err := storekit.EncodeHeader(next)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	var last int64
	if err := tx.QueryRow(ctx, qWriteHeader, next.Status, next.Instance, next.Version, data, len(evs), next.ID).Scan(&last); err != nil {
		return err
	}
	if err := writeSteps(ctx, tx, next, storekit.ChangedSteps(cur.Steps, next.Steps), len(cur.Steps)); err != nil {
		return err
	}
	return insertEvents(ctx, tx, next.ID, last, evs)
}

// writeSteps writes r's steps at positions idx and, when r has fewer steps than the oldLen
// stored, deletes the rows past its end.
func writeSteps(ctx context.Context, tx sqlitestmt.Tx, r runs.Run, idx []int, oldLen int) error {
	for _, i := range idx {
		data, err := storekit.EncodeStep(r.Steps[i])
		if err != nil {
			return fmt.Errorf("encode step %d: %w", i, err)
		}
		if _, err := tx.Exec(ctx, qWriteStep, r.ID, i, data); err != nil {
			return err
		}
	}
	if len(r.Steps) < oldLen {
		_, err := tx.Exec(ctx, qDropSteps, r.ID, len(r.Steps))
		return err
	}
	return nil
}

// appendEvents numbers evs after the run's last seq, moves last_seq past them and inserts
// them. ErrNotFound if the run does not exist.
func appendEvents(ctx context.Context, tx sqlitestmt.Tx, id string, evs []runs.Event) ([]runs.Event, error) {
	var last int64
	err := tx.QueryRow(ctx, qReserveSeqs, len(evs), id).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, runs.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return evs, insertEvents(ctx, tx, id, last, evs)
}

// insertEvents inserts evs as the events up to seq last (their seqs reserved already),
// setting each one's Seq.
func insertEvents(ctx context.Context, tx sqlitestmt.Tx, id string, last int64, evs []runs.Event) error {
	seq := last - int64(len(evs))
	for i := range evs {
		seq++
		evs[i].Seq = seq
		data, err := json.Marshal(evs[i])
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		if _, err := tx.Exec(ctx, qAddEvent, id, seq, data); err != nil {
			return err
		}
	}
	return nil
}

// Append implements runs.Store.
func (s *Store) Append(ctx context.Context, id string, evs ...runs.Event) ([]runs.Event, error) {
	stamped, err := storekit.StampEvents(id, evs, s.now())
	if err != nil {
		return nil, err
	}
	err = s.writeP(ctx, fmt.Sprintf("append to run %q", id), func(tx sqlitestmt.Tx) error {
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
func (s *Store) Unfinished(ctx context.Context, instance string) ([]runs.Run, error) {
	q, args := `SELECT id, version, data FROM runs WHERE status IN (`+activeStatuses+`) ORDER BY sort_key`, []any{}
	if instance != "" {
		q, args = `SELECT id, version, data FROM runs WHERE owner = ? AND status IN (`+activeStatuses+`) ORDER BY sort_key`, []any{instance}
	}
	var out []runs.Run
	err := s.read(ctx, fmt.Sprintf("unfinished runs of %q", instance), func(tx sqlitestmt.Tx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		heads, _, err := scanHeads(rows, -1)
		if err != nil || len(heads) == 0 {
			return err
		}
		out, err = s.assemble(ctx, tx, heads, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SeenDelivery implements runs.Deliveries. Expired records are deleted on each call.
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
	return errors.Join(s.ws.Close(), s.rs.Close(), s.lists.Close(), s.r.Close(), s.w.Close())
}
