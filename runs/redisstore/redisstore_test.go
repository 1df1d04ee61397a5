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
	runstest.Run(t, backends(t))
}

func BenchmarkStore(b *testing.B) {
	runstest.Bench(b, backends(b))
}

// backends starts one redis-server for the whole suite and gives each subtest a fresh key
// space of its own (a prefix).
func backends(tb testing.TB) func(testing.TB) runstest.Opener {
	srv := redistest.Start(tb)
	var n atomic.Int64
	return func(testing.TB) runstest.Opener {
		prefix := "t" + strconv.FormatInt(n.Add(1), 10) + ":"
		return func(tb testing.TB) runs.Store {
			rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
			s := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			tb.Cleanup(func() {
				s.Close()
				rdb.Close()
			})
			return s
		}
	}
}
