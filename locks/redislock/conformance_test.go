package redislock

import (
	"testing"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/lockstest"
)

// TestConformance runs the lock contract's suite on one private redis-server; each keyspace
// is a key prefix, and a stall is the server paused with SIGSTOP.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	lockstest.Run(t, lockstest.Backend{
		Open: func(t *testing.T, space string) locks.Driver {
			d, err := Open(srv.URL(), Options{Prefix: space + ":"})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Stall: func(*testing.T) func() {
			srv.Pause()
			return srv.Resume
		},
	})
}
