package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/runstest"
	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
)

func open(tb testing.TB, path string) runs.Store {
	tb.Helper()
	s, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	runstest.Run(t, newBackend)
}

func BenchmarkStore(b *testing.B) {
	runstest.Bench(b, newBackend)
}

// newBackend is an empty database file in a temp dir.
func newBackend(tb testing.TB) runstest.Opener {
	path := filepath.Join(tb.TempDir(), sqlitestore.FileName)
	return func(tb testing.TB) runs.Store { return open(tb, path) }
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), sqlitestore.FileName)
	s, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Pretend a newer build wrote the file.
	s2 := open(t, path).(*sqlitestore.Store)
	if err := sqlitestore.SetUserVersion(s2, 99); err != nil {
		t.Fatal(err)
	}
	s2.Close()
	_, err = sqlitestore.Open(context.Background(), path)
	if !errors.Is(err, runs.ErrUnavailable) {
		t.Errorf("Open of a newer schema: %v, want ErrUnavailable", err)
	}
}

// TestReopenWritesNothing: opening a file of this build's schema and closing it again leaves
// it byte for byte as it was, so a command that only reads (plan) does not write to the state.
func TestReopenWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), sqlitestore.FileName)
	s, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(context.Background(), runs.Run{Pipeline: "prod"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err = sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("opening and closing %s changed it", path)
	}
}

// TestUpdateWritesFewPages: a step's update that changes neither the run's status nor its
// owner (most of the engine's writes) rewrites the run's row and the step's row, not the
// indexes on status and owner: 2 pages to the WAL, where setting those columns to their same
// values wrote 5. A status change still reaches the index List filters on.
func TestUpdateWritesFewPages(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), sqlitestore.FileName)).(*sqlitestore.Store)
	var id string
	for range 50 { // enough runs that the indexes are not all on the table's page
		r := runs.Run{Pipeline: "prod"}
		for i := range 100 {
			r.Steps = append(r.Steps, runs.Step{Phase: runs.Phase1, Name: fmt.Sprintf("svc-%d", i)})
		}
		c, _, err := s.Create(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		id = c.ID
	}
	if _, err := sqlitestore.WALFrames(s, "TRUNCATE"); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if _, err := s.Update(ctx, id, func(r *runs.Run) error { r.Steps[i].Status = runs.StepRunning; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	frames, err := sqlitestore.WALFrames(s, "PASSIVE")
	if err != nil {
		t.Fatal(err)
	}
	if perUpdate := float64(frames) / n; perUpdate > 2 {
		t.Errorf("an update of one step wrote %.1f pages, want 2", perUpdate)
	}

	if _, err := s.Update(ctx, id, func(r *runs.Run) error { r.Status = runs.StatusPhase1; return nil }); err != nil {
		t.Fatal(err)
	}
	page, err := s.List(ctx, runs.Filter{Status: []runs.Status{runs.StatusPhase1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 1 || page.Runs[0].ID != id {
		t.Errorf("List(phase1) after the status changed: %d runs, want only %s", len(page.Runs), id)
	}
}

func TestOpenUnwritableDir(t *testing.T) {
	// A path below a regular file cannot be created, not even by root.
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := sqlitestore.Open(context.Background(), filepath.Join(file, sqlitestore.FileName))
	if !errors.Is(err, runs.ErrUnavailable) {
		t.Errorf("Open under a regular file: %v, want ErrUnavailable", err)
	}
}

// TestMigratesWholeRuns: a file of schema 1 (each run's JSON whole in runs.data, as builds
// before the step rows wrote it) is migrated on Open, and its runs read and update as before.
func TestMigratesWholeRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), sqlitestore.FileName)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	r := runstest.LegacyRun()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	// The schema-1 tables a run and its events lived in, as that build created them.
	for _, q := range []string{
		`CREATE TABLE runs (id TEXT PRIMARY KEY, pipeline TEXT NOT NULL, status TEXT NOT NULL,
			owner TEXT NOT NULL DEFAULT '', idem_key TEXT, sort_key TEXT NOT NULL, version INTEGER NOT NULL,
			last_seq INTEGER NOT NULL DEFAULT 0, data BLOB NOT NULL)`,
		`CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL,
			PRIMARY KEY (run_id, seq)) WITHOUT ROWID`,
		`PRAGMA user_version = 1`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.Exec(`INSERT INTO runs (id, pipeline, status, owner, sort_key, version, data) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Pipeline, r.Status, r.Instance, fmt.Sprintf("%019d:%s", r.CreatedAt.UnixNano(), r.ID), r.Version, data); err != nil {
		t.Fatal(err)
	}
	db.Close()

	runstest.CheckLegacyRun(t, func(tb testing.TB) runs.Store { return open(tb, path) })

	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version, steps int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM steps WHERE run_id = ?`, r.ID).Scan(&steps); err != nil {
		t.Fatal(err)
	}
	if version != sqlitestore.SchemaVersion || steps != len(r.Steps) {
		t.Errorf("after the migration: schema %d with %d step rows, want schema %d with %d", version, steps, sqlitestore.SchemaVersion, len(r.Steps))
	}
}

// TestMigratesMarksWithoutPipelineMarks: a file of schema 2 (a resource's mark alone, as
// builds before pipeline marks wrote it) is migrated on Open; the mark stands for its
// pipeline's, and stays that pipeline's mark once other pipelines write the resource.
func TestMigratesMarksWithoutPipelineMarks(t *testing.T) {
	path := filepath.Join(t.TempDir(), sqlitestore.FileName)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	m := runstest.LegacyMark()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	// The schema-2 table marks lived in, as that build created it.
	for _, q := range []string{
		`CREATE TABLE marks (uuid TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID`,
		`PRAGMA user_version = 2`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.Exec(`INSERT INTO marks (uuid, data) VALUES (?, ?)`, m.UUID, data); err != nil {
		t.Fatal(err)
	}
	db.Close()

	runstest.CheckLegacyMark(t, open(t, path).(runs.MarkStore))

	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version, rows int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM pipeline_marks WHERE uuid = ?`, m.UUID).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if version != sqlitestore.SchemaVersion || rows != 2 {
		t.Errorf("after the migration and the writes: schema %d with %d pipeline marks, want schema %d with 2 (late's and ops')", version, rows, sqlitestore.SchemaVersion)
	}
}

// TestFilesArePrivate: the database and SQLite's -wal and -shm are created 0600 whatever the
// umask lets through, and a database an older version left 0644 is tightened on Open.
func TestFilesArePrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), sqlitestore.FileName)
	s := open(t, path)
	if _, _, err := s.Create(context.Background(), runs.Run{Pipeline: "prod"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(p), err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s: mode %s, want 0600", filepath.Base(p), m)
		}
	}
	s.Close()

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	open(t, path)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a 0644 database after Open: mode %v (err %v), want 0600", fi.Mode().Perm(), err)
	}
}

// TestPruneBounded: 10 000 runs (2 000 under -race), pruned to the newest twentieth after every
// tenth of them; the database stops growing (SQLite reuses the pages the pruned runs freed).
func TestPruneBounded(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), sqlitestore.FileName)).(*sqlitestore.Store)
	runstest.PruneBounded(t, s, pruneBoundedRuns, pruneBoundedRuns/20, func() int64 {
		n, err := sqlitestore.PageCount(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	})
}

// TestPruneDropsSteps: a pruned run's step rows go with it.
func TestPruneDropsSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), sqlitestore.FileName)
	s := open(t, path)
	ctx := t.Context()
	for range 2 {
		r, _, err := s.Create(ctx, runs.Run{Pipeline: "prod", Steps: []runs.Step{{Phase: runs.Phase1, Name: "api"}, {Phase: runs.Phase2, Name: "api"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, r.ID, func(x *runs.Run) error { x.Status = runs.StatusSucceeded; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.(runs.Pruner).Prune(ctx, runs.Retention{MaxRuns: 1}); err != nil || n != 1 {
		t.Fatalf("Prune(MaxRuns 1) = %d, %v; want 1 run deleted", n, err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var steps int
	if err := db.QueryRow(`SELECT count(*) FROM steps`).Scan(&steps); err != nil {
		t.Fatal(err)
	}
	if steps != 2 {
		t.Errorf("%d step rows after pruning one of two runs of 2 steps, want 2", steps)
	}
}

// TestMigratesToReports: a file of schema 4 (no reports tables, as builds before the outbox of
// Git host statuses left it) is migrated on Open, and its reports store and claim.
func TestMigratesToReports(t *testing.T) {
	path := filepath.Join(t.TempDir(), sqlitestore.FileName)
	s := open(t, path)
	r, _, err := s.Create(t.Context(), runs.Run{Pipeline: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// What a schema-4 build leaves: this build's file without the reports tables.
	for _, q := range []string{`DROP TABLE reports`, `DROP TABLE report_scopes`, `PRAGMA user_version = 4`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	rs := open(t, path).(runs.ReportStore)
	seed := runs.Report{Key: runs.ReportKey("github", r.ID), Host: "github", RunID: r.ID}
	if err := rs.AddReportState(t.Context(), seed, runs.ReportState{State: "queued"}); err != nil {
		t.Fatalf("AddReportState after the migration: %v", err)
	}
	if got, err := rs.ClaimReports(t.Context(), "node-a", time.Minute, 1); err != nil || len(got) != 1 {
		t.Fatalf("ClaimReports after the migration: %d reports, %v; want 1", len(got), err)
	}
	if prev, err := rs.SwapLatestReport(t.Context(), "github:acme/api:production", seed.Key); err != nil || prev != "" {
		t.Fatalf("SwapLatestReport after the migration: %q, %v; want \"\"", prev, err)
	}

	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != sqlitestore.SchemaVersion {
		t.Errorf("after the migration: schema %d, want %d", version, sqlitestore.SchemaVersion)
	}
}
