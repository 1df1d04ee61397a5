// Package sqlitestore is the embedded runs.Store: one SQLite file in the daemon's state
// directory (modernc.org/sqlite, pure Go, no server), in WAL mode so readers (the API, the
// dashboard) never wait for the engine's writes. It is the single-host default: a CLI run
// and the daemon on one host share the file.
//
// The store is runs.Portable over this package's runs.Driver; the package adds
// runs.MarkStore, runs.ReportStore, runs.Pruner and runs.Deliveries. Each run is a row
// holding its header (the run without its steps, as JSON) plus the columns List filters and
// sorts on; its steps are rows keyed by (run, position), so an Update rewrites the header and
// only the steps that changed, not the whole run; events are rows keyed by (run, seq);
// resource marks are rows keyed by UUID, and each pipeline's mark on a resource a row keyed
// by (UUID, pipeline); reports to Git hosts are rows keyed by report key (reports.go). Reads
// of a run take its header and steps in one read transaction (one WAL snapshot), so they
// never see a half-written Update. All writes go through one connection in BEGIN IMMEDIATE
// transactions; a write checks the run's version (another process may have written it since
// this one read it), and across processes SQLite's lock (with a busy timeout) serializes
// them.
//
// A file written by builds that stored each run whole (schema 1), that kept no pipeline
// marks (schema 2), or that kept no reports (schemas 3 and 4) is migrated when it is opened;
// builds older than this one refuse a migrated file (its schema is newer): one that did not
// write pipeline marks would leave them behind the resources' marks, and the stale-build
// guard trusts them; one that knew no reports would never prune them.
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
)

// FileName is the store's file name in the state directory.
const FileName = "runs.db"

// schemaVersion is the PRAGMA user_version this code writes and understands.
//
//	1: runs.data held the whole run, steps included.
//	2: runs.data holds the header, steps are rows of steps (splitSteps migrates 1 to 2).
//	3: pipeline_marks holds each pipeline's mark on a resource (created empty: a mark of
//	   marks stands for its pipeline's until it is replaced, see runs.MarkStore).
//	4: running holds what each resource was last seen running (created empty).
//	5: reports and report_scopes hold the reports to Git hosts (created empty, see reports.go).
//	6: audit and audit_ends hold the hash-chained audit log (created empty, see audit.go).
const schemaVersion = 6

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
CREATE TABLE IF NOT EXISTS pipeline_marks (
	uuid     TEXT NOT NULL,
	pipeline TEXT NOT NULL,
	data     BLOB NOT NULL,
	PRIMARY KEY (uuid, pipeline)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS running (
	uuid TEXT PRIMARY KEY,
	data BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reports (
	key    TEXT PRIMARY KEY,
	run_id TEXT NOT NULL,
	due    INTEGER,
	owner  TEXT NOT NULL DEFAULT '',
	data   BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS reports_run ON reports (run_id);
CREATE INDEX IF NOT EXISTS reports_due ON reports (due);
CREATE TABLE IF NOT EXISTS report_scopes (
	scope TEXT PRIMARY KEY,
	key   TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS audit (
	seq  INTEGER PRIMARY KEY,
	at   INTEGER NOT NULL,
	data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_at ON audit (at);
CREATE TABLE IF NOT EXISTS audit_ends (
	name TEXT PRIMARY KEY,
	seq  INTEGER NOT NULL,
	hash TEXT NOT NULL
) WITHOUT ROWID;
`

// The queries of the hot paths, prepared at Open (see sqlitestmt).
const (
	qHead        = `SELECT id, version, data FROM runs WHERE id = ?`
	qStepsOf     = `SELECT run_id, data FROM steps WHERE run_id = ? ORDER BY idx`
	qVersion     = `SELECT version FROM runs WHERE id = ?`
	qWriteHeader = `UPDATE runs SET status = ?, owner = ?, version = ?, data = ?, last_seq = last_seq + ? WHERE id = ? AND version = ? RETURNING last_seq`
	// qWriteData is qWriteHeader for a write that changes neither the status nor the owner:
	// a column an UPDATE sets has its indexes rewritten even to the same value, so leaving
	// them out writes 2 pages to the WAL instead of 5 (TestUpdateWritesFewPages).
	qWriteData   = `UPDATE runs SET version = ?, data = ?, last_seq = last_seq + ? WHERE id = ? AND version = ? RETURNING last_seq`
	qWriteStep   = `INSERT INTO steps (run_id, idx, data) VALUES (?, ?, ?) ON CONFLICT (run_id, idx) DO UPDATE SET data = excluded.data`
	qDropSteps   = `DELETE FROM steps WHERE run_id = ? AND idx >= ?`
	qReserveSeqs = `UPDATE runs SET last_seq = last_seq + ? WHERE id = ? RETURNING last_seq`
	qAddEvent    = `INSERT INTO events (run_id, seq, data) VALUES (?, ?, ?)`
	qMark        = `SELECT data FROM marks WHERE uuid = ?`
	qSortKey     = `SELECT sort_key FROM runs WHERE id = ?`
	qStatus      = `SELECT status FROM runs WHERE id = ?`
	qPutMark     = `INSERT INTO marks (uuid, data) VALUES (?, ?) ON CONFLICT (uuid) DO UPDATE SET data = excluded.data`
	// qPipelineMark reads a pipeline's mark and the resource's (its stand-in when the
	// pipeline has none) at once: uuid, pipeline, uuid.
	qPipelineMark     = `SELECT (SELECT data FROM pipeline_marks WHERE uuid = ? AND pipeline = ?), (SELECT data FROM marks WHERE uuid = ?)`
	qPipelineMarks    = `SELECT data FROM pipeline_marks WHERE uuid = ? ORDER BY pipeline`
	qPutPipelineMark  = `INSERT INTO pipeline_marks (uuid, pipeline, data) VALUES (?, ?, ?) ON CONFLICT (uuid, pipeline) DO UPDATE SET data = excluded.data`
	qAdoptMark        = `INSERT INTO pipeline_marks (uuid, pipeline, data) VALUES (?, ?, ?) ON CONFLICT (uuid, pipeline) DO NOTHING`
	qDropPipelineMark = `DELETE FROM pipeline_marks WHERE uuid = ? AND pipeline = ?`
)

var (
	readQueries  = []string{qHead, qStepsOf, qMark, qSortKey, qStatus, qPipelineMark}
	writeQueries = []string{qHead, qStepsOf, qVersion, qWriteHeader, qWriteData, qWriteStep, qDropSteps, qReserveSeqs, qAddEvent, qMark, qPutMark,
		qPutPipelineMark, qAdoptMark, qDropPipelineMark}
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

// Store is the run store on a SQLite file: runs.Portable over this package's driver, plus
// the contracts the driver implements directly (marks, pruning, webhook deliveries). It is
// safe for concurrent use.
type Store struct {
	*runs.Portable
	d *driver
}

var _ runs.Driver = (*driver)(nil)

// driver is the runs.Driver on a SQLite file.
type driver struct {
	w      *sql.DB          // one connection, BEGIN IMMEDIATE: every write
	r      *sql.DB          // a few connections: reads
	ws, rs sqlitestmt.Set   // the hot queries, prepared on w and r
	lists  *sqlitestmt.Lazy // List's queries, prepared on r
	closed atomic.Bool
}

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
	d := &driver{w: w, r: r, lists: sqlitestmt.NewLazy(r)}
	if err := d.migrate(ctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("open run store %s: %w", path, err)
	}
	if d.ws, err = sqlitestmt.Prepare(ctx, w, writeQueries...); err == nil {
		d.rs, err = sqlitestmt.Prepare(ctx, r, readQueries...)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open run store %s: %w: %w", path, runs.ErrUnavailable, err)
	}
	return &Store{Portable: runs.New(d), d: d}, nil
}

func (s *driver) migrate(ctx context.Context) error {
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
		if v == schemaVersion {
			return nil // a file of this schema is not written to: a read-only command leaves it as it was
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion))
		return err
	})
}

// userError marks an error that is the answer itself (ErrFenceBehind with its message), to
// be returned as is.
type userError struct{ err error }

func (e userError) Error() string { return e.err.Error() }
func (e userError) Unwrap() error { return e.err }

// write runs fn in one BEGIN IMMEDIATE transaction on the writer connection.
func (d *driver) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	return d.writeP(ctx, op, func(tx sqlitestmt.Tx) error { return fn(tx.Tx) })
}

// writeP is write with the writer's cached statements. Errors are wrapped with op
// (runs.Fail), except a userError's, returned as is.
func (d *driver) writeP(ctx context.Context, op string, fn func(tx sqlitestmt.Tx) error) error {
	err := d.tx(ctx, fn)
	var ue userError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ue):
		return ue.err
	}
	return runs.Fail(op, err)
}

// tx runs fn in one BEGIN IMMEDIATE transaction on the writer connection, its errors
// unwrapped (the driver's methods: runs.Portable wraps them).
func (d *driver) tx(ctx context.Context, fn func(tx sqlitestmt.Tx) error) error {
	if err := d.readable("write"); err != nil {
		return err
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(sqlitestmt.Tx{Tx: tx, Set: d.ws}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// read runs fn in one read transaction: every statement in it sees the same snapshot of
// the file, so a run's header and steps are read as one write left them.
func (d *driver) read(ctx context.Context, fn func(tx sqlitestmt.Tx) error) error {
	if err := d.readable("read"); err != nil {
		return err
	}
	tx, err := d.r.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep
	return fn(sqlitestmt.Tx{Tx: tx, Set: d.rs})
}

func (d *driver) readable(op string) error {
	if d.closed.Load() {
		return runs.Closed(op)
	}
	return nil
}

// Insert implements runs.Driver.
func (d *driver) Insert(ctx context.Context, r runs.Run, e runs.Encoded) (existing string, err error) {
	var idem any
	if k := r.Trigger.IdempotencyKey; k != "" {
		idem = k
	}
	err = d.tx(ctx, func(tx sqlitestmt.Tx) error {
		if idem != nil {
			err := tx.QueryRowContext(ctx, `SELECT id FROM runs WHERE pipeline = ? AND idem_key = ?`, r.Pipeline, idem).Scan(&existing)
			switch {
			case err == nil:
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO runs (id, pipeline, status, owner, idem_key, sort_key, version, data)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.Pipeline, r.Status, r.Instance, idem, e.SortKey, r.Version, e.Header)
		if isConstraint(err) {
			return fmt.Errorf("run %q already exists: %w", r.ID, runs.ErrConflict)
		}
		if err != nil {
			return err
		}
		return writeSteps(ctx, tx, r.ID, e.Steps, -1, 0)
	})
	return existing, err
}

func isConstraint(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}

// head is a run's row: its ID, version and header JSON (nil when not read).
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

// Read implements runs.Driver.
func (d *driver) Read(ctx context.Context, id string, held int64) (runs.Record, error) {
	var rec runs.Record
	err := d.read(ctx, func(tx sqlitestmt.Tx) error {
		rows, err := tx.Query(ctx, qHead, id)
		if err != nil {
			return err
		}
		heads, _, err := scanHeads(rows, 1)
		if err != nil {
			return err
		}
		if len(heads) == 0 {
			return runs.ErrNotFound
		}
		recs, err := records(ctx, tx, heads, func(string) int64 { return held })
		if err == nil {
			rec = recs[0]
		}
		return err
	})
	return rec, err
}

// ReadStatus implements runs.Driver.
func (d *driver) ReadStatus(ctx context.Context, id string) (runs.Status, error) {
	var st string
	err := d.read(ctx, func(tx sqlitestmt.Tx) error {
		err := tx.QueryRow(ctx, qStatus, id).Scan(&st)
		if errors.Is(err, sql.ErrNoRows) {
			return runs.ErrNotFound
		}
		return err
	})
	return runs.Status(st), err
}

// records returns the records of heads, in order: the version only for those the caller
// holds (held), else the header (read in tx unless heads has it) and the step rows.
func records(ctx context.Context, tx sqlitestmt.Tx, heads []head, held func(string) int64) ([]runs.Record, error) {
	out := make([]runs.Record, len(heads))
	var (
		want     []int    // heads the caller does not hold: read whole
		ids      []string // their IDs
		noHeader []int    // those of them whose header was not read with the version (List)
	)
	for i, h := range heads {
		out[i] = runs.Record{ID: h.id, Version: h.version}
		if held(h.id) == h.version {
			continue
		}
		want, ids = append(want, i), append(ids, h.id)
		if h.data == nil {
			noHeader = append(noHeader, i)
		}
	}
	if len(want) == 0 {
		return out, nil
	}
	if err := readHeaders(ctx, tx, heads, noHeader); err != nil {
		return nil, err
	}
	steps, err := readSteps(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	for _, i := range want {
		out[i].Header = heads[i].data
		out[i].Steps = steps[heads[i].id]
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

// Write implements runs.Driver: the header's statement checks the version and takes the
// events' seqs.
func (d *driver) Write(ctx context.Context, cur, next runs.Run, e runs.Encoded, evs []runs.Event) ([]runs.Event, error) {
	err := d.tx(ctx, func(tx sqlitestmt.Tx) error {
		var (
			last int64
			err  error
		)
		if next.Status == cur.Status && next.Instance == cur.Instance {
			err = tx.QueryRow(ctx, qWriteData, next.Version, e.Header, len(evs), cur.ID, cur.Version).Scan(&last)
		} else {
			err = tx.QueryRow(ctx, qWriteHeader, next.Status, next.Instance, next.Version, e.Header, len(evs), cur.ID, cur.Version).Scan(&last)
		}
		if errors.Is(err, sql.ErrNoRows) {
			var v int64
			if err := tx.QueryRow(ctx, qVersion, cur.ID).Scan(&v); errors.Is(err, sql.ErrNoRows) {
				return runs.ErrNotFound
			}
			return runs.ErrVersion
		}
		if err != nil {
			return err
		}
		if err := writeSteps(ctx, tx, cur.ID, e.Steps, len(next.Steps), len(cur.Steps)); err != nil {
			return err
		}
		return insertEvents(ctx, tx, cur.ID, last, evs)
	})
	return evs, err
}

// writeSteps writes the step rows steps of run id and, when the run now has n steps, fewer
// than the old stored, deletes the rows past its end (n < 0: no shrink).
func writeSteps(ctx context.Context, tx sqlitestmt.Tx, id string, steps []runs.StepData, n, old int) error {
	for _, s := range steps {
		if _, err := tx.Exec(ctx, qWriteStep, id, s.Pos, s.Data); err != nil {
			return err
		}
	}
	if n >= 0 && n < old {
		_, err := tx.Exec(ctx, qDropSteps, id, n)
		return err
	}
	return nil
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

// Append implements runs.Driver: it numbers evs after the run's last seq, moves last_seq
// past them and inserts them.
func (d *driver) Append(ctx context.Context, id string, evs []runs.Event) ([]runs.Event, error) {
	err := d.tx(ctx, func(tx sqlitestmt.Tx) error {
		var last int64
		err := tx.QueryRow(ctx, qReserveSeqs, len(evs), id).Scan(&last)
		if errors.Is(err, sql.ErrNoRows) {
			return runs.ErrNotFound
		}
		if err != nil {
			return err
		}
		return insertEvents(ctx, tx, id, last, evs)
	})
	return evs, err
}

// Events implements runs.Driver.
func (d *driver) Events(ctx context.Context, id string, afterSeq int64, limit int) ([]runs.Event, error) {
	if err := d.readable("events"); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := d.r.QueryContext(ctx, `SELECT data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, id, afterSeq, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []runs.Event
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		var e runs.Event
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		var one int
		err := d.r.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, runs.ErrNotFound
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Watch implements runs.Driver: SQLite cannot signal across processes, so another
// process's appends are found by runs.Follow's poll.
func (d *driver) Watch(context.Context, string, func(string)) (func(), error) {
	if err := d.readable("watch"); err != nil {
		return nil, err
	}
	return func() {}, nil
}

// Unfinished implements runs.Driver.
func (d *driver) Unfinished(ctx context.Context, instance string, held func(string) int64) ([]runs.Record, error) {
	q, args := `SELECT id, version, data FROM runs WHERE status IN (`+activeStatuses+`)`, []any{}
	if instance != "" {
		q, args = `SELECT id, version, data FROM runs WHERE owner = ? AND status IN (`+activeStatuses+`)`, []any{instance}
	}
	var out []runs.Record
	err := d.read(ctx, func(tx sqlitestmt.Tx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		heads, _, err := scanHeads(rows, -1)
		if err != nil || len(heads) == 0 {
			return err
		}
		out, err = records(ctx, tx, heads, held)
		return err
	})
	return out, err
}

// SeenDelivery implements runs.Deliveries. Expired records are deleted on each call.
func (s *Store) SeenDelivery(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if id == "" || ttl <= 0 {
		return false, fmt.Errorf("seen delivery: empty id or ttl %s: %w", ttl, runs.ErrInvalid)
	}
	var seen bool
	err := s.d.write(ctx, fmt.Sprintf("seen delivery %q", id), func(tx *sql.Tx) error {
		now := time.Now()
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

// Ping implements runs.Driver.
func (d *driver) Ping(ctx context.Context) error {
	if err := d.readable("ping"); err != nil {
		return err
	}
	var one int
	return d.r.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

// Close implements runs.Driver: it closes the database. Calling it again returns nil.
func (d *driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	return errors.Join(d.ws.Close(), d.rs.Close(), d.lists.Close(), d.r.Close(), d.w.Close())
}
