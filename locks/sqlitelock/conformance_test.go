package sqlitelock_test

import (
	"path/filepath"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/lockstest"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
)

// TestConformance runs the lock contract's suite with one database file per keyspace. A
// file in this process cannot be made to stop answering, so LostWhenBackendStalls has no
// stall to work with here (the Redis backends run it).
func TestConformance(t *testing.T) {
	dir := t.TempDir()
	lockstest.Run(t, lockstest.Backend{Open: func(t *testing.T, space string) locks.Driver {
		d, err := sqlitelock.Open(filepath.Join(dir, space+".db"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}})
}
