package redislock

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/lockstest"
)

// TestConformance runs the lock contract's suite on one private redis-server; each subtest
// gets an empty keyspace of its own through a fresh key prefix.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	var n atomic.Int64
	lockstest.Run(t, func(t *testing.T) locks.Driver {
		d, err := Open(srv.URL(), Options{Prefix: fmt.Sprintf("conformance%d:", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
