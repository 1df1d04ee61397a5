package redisstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
	"github.com/deploy-orchestrator/orchestrator/runs/runstest"
)

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	var n atomic.Int64
	runstest.Run(t, func(t *testing.T) runstest.Opener {
		// One server for the suite; each subtest gets a fresh key space of its own.
		prefix := "t" + strconv.FormatInt(n.Add(1), 10) + ":"
		return func(t *testing.T) runs.Store {
			rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
			s := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			t.Cleanup(func() {
				s.Close()
				rdb.Close()
			})
			return s
		}
	})
}
