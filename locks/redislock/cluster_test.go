package redislock

import (
	"fmt"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/lockstest"
)

// TestConformanceCluster runs the conformance suite on a Redis Cluster of three masters
// with one replica each, so that the hash tags, the cross-master SCAN of List
// (which must skip the replicas), and the pub/sub of a cluster are exercised for real: a
// script touching keys of two slots would fail here with CROSSSLOT.
func TestConformanceCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: 1})
	url := cluster.URL()
	lockstest.Run(t, lockstest.Backend{
		Open: func(t *testing.T, space string) locks.Driver {
			d, err := Open(url, Options{Prefix: space + ":"})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		// Every node paused at once, for far less than the cluster's node timeout, so no
		// failover starts: the whole cluster simply stops answering for a while.
		Stall: func(*testing.T) func() {
			cluster.Pause()
			return cluster.Resume
		},
	})

	// List sees keys on every master.
	d, err := Open(url, Options{Prefix: "spread:"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := t.Context()
	const keys = 12
	for i := range keys {
		key := fmt.Sprintf("coolify:svc%d", i)
		info, err := d.TryAcquire(ctx, grant(key, fmt.Sprintf("p#%d/s", i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.ForceRelease(ctx, locks.ForceRequest{Key: key, Fence: info.Fence, Reason: "spread", LockDelay: -1}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.TryAcquire(ctx, grant(key, fmt.Sprintf("p#%d/s", i))); err != nil {
			t.Fatal(err)
		}
	}
	list, err := d.List(ctx, "coolify:")
	if err != nil || len(list) != keys {
		t.Fatalf("list over the cluster: got %d leases, %v; want %d", len(list), err, keys)
	}
}
