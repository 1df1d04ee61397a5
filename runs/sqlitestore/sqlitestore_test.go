package sqlitestore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

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
