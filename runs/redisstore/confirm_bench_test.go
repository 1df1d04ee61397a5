package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/redisack"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks/redislock"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
)

// BenchmarkConfirmedUpdate is the cost of replica-confirmed store writes (Options.Confirm):
// one Update of a run (a read, then the update script) through the Sentinel URL of a master
// with two replicas and three sentinels on loopback, without and with min_replicas 1 (then
// the update script and a WAIT for every replica in sync run on a connection of their own).
func BenchmarkConfirmedUpdate(b *testing.B) {
	topo := redistest.StartSentinel(b, redistest.SentinelOptions{})
	for _, n := range []int{0, 1} {
		b.Run(fmt.Sprintf("min_replicas=%d", n), func(b *testing.B) {
			rdb, err := redislock.NewClient(topo.URL())
			if err != nil {
				b.Fatal(err)
			}
			defer rdb.Close()
			ack, err := redisack.New(topo.URL(), n, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer ack.Close()
			s := redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("bench%d:", n), Confirm: ack})
			defer s.Close()
			ctx := b.Context()
			r, _, err := s.Create(ctx, runs.Run{Pipeline: "prod"})
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				if _, err := s.Update(ctx, r.ID, func(r *runs.Run) error { r.Reason = fmt.Sprint(i); return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
