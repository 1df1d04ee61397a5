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

func open(t *testing.T, path string) runs.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	runstest.Run(t, func(t *testing.T) runstest.Opener {
		path := filepath.Join(t.TempDir(), sqlitestore.FileName)
		return func(t *testing.T) runs.Store { return open(t, path) }
	})
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
