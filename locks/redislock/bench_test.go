package redislock

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

// BenchmarkAcquireRelease is one uncontended grant and release of a fresh key by the
// driver alone: two scripts, two round trips.
func BenchmarkAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	d := New(client, Options{})
	defer d.Close()
	ctx := b.Context()
	i := 0
	for b.Loop() {
		i++
		key := fmt.Sprintf("bench:%d", i)
		if _, err := d.TryAcquire(ctx, locks.Grant{Key: key, Token: "t", Holder: "b#1/x", TTL: time.Minute}); err != nil {
			b.Fatal(err)
		}
		if err := d.Release(ctx, key, "t"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineSetNXAndCAS is the plainest Redis lock for comparison (what
// bsm/redislock does): SET NX PX, then a compare-and-delete script.
func BenchmarkBaselineSetNXAndCAS(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	cas := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	ctx := b.Context()
	i := 0
	for b.Loop() {
		i++
		key := fmt.Sprintf("bench:%d", i)
		if ok, err := client.SetNX(ctx, key, "t", time.Minute).Result(); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := cas.Run(ctx, client, []string{key}, "t").Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMinReplicas is the cost of replica-acknowledged grants (Options.MinReplicas):
// one uncontended grant, renewal and release on a master with one replica on loopback,
// without and with MinReplicas 1 (then the grant and the renewal each wait for WAIT on a
// connection of their own).
func BenchmarkMinReplicas(b *testing.B) {
	topo := redistest.StartSentinel(b, redistest.SentinelOptions{Replicas: 1, Sentinels: 1})
	for _, n := range []int{0, 1} {
		b.Run(fmt.Sprintf("min_replicas=%d", n), func(b *testing.B) {
			d, err := Open(topo.URL(), Options{MinReplicas: n})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			ctx := b.Context()
			i := 0
			for b.Loop() {
				i++
				key := fmt.Sprintf("bench:%d:%d", n, i)
				if _, err := d.TryAcquire(ctx, locks.Grant{Key: key, Token: "t", Holder: "b#1/x", TTL: time.Minute}); err != nil {
					b.Fatal(err)
				}
				if _, err := d.Renew(ctx, key, "t", time.Minute); err != nil {
					b.Fatal(err)
				}
				if err := d.Release(ctx, key, "t"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
