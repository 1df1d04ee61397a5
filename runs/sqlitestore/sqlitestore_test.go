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
