package sqlitelock_test

import (
	"path/filepath"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/lockstest"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
)

func TestConformance(t *testing.T) {
	lockstest.Run(t, func(t *testing.T) locks.Driver {
		d, err := sqlitelock.Open(filepath.Join(t.TempDir(), "locks.db"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
