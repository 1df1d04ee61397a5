package redislock

import (
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/lockstest"
)

// TestSentinelURL opens the driver through a Sentinel URL and takes, waits for and
// releases a lock through the master the sentinel names.
func TestSentinelURL(t *testing.T) {
	topo := redistest.StartSentinel(t, redistest.SentinelOptions{Replicas: 1, Sentinels: 1})
	master := topo.Master()

	d, err := Open(topo.URL(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := t.Context()
	g := grant("coolify:s", "p#1/s")
	if _, err := d.TryAcquire(ctx, g); err != nil {
		t.Fatalf("acquire through sentinel: %v", err)
	}
	sub, err := d.Subscribe(ctx, g.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := d.Release(ctx, g.Key, g.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C():
	case <-time.After(5 * time.Second):
		t.Fatal("no release signal through sentinel within 5s")
	}

	// The lease is on the master the sentinel named.
	direct := New(master.Client(), Options{})
	defer direct.Close()
	if _, err := d.TryAcquire(ctx, g); err != nil {
		t.Fatal(err)
	}
	if info, err := direct.Get(ctx, g.Key); err != nil || info.Holder != "p#1/s" {
		t.Fatalf("lease on the master: got %+v, %v", info, err)
	}
}

// TestConformanceSentinel runs the conformance suite through the Sentinel URL of a master
// with two replicas and three sentinels; a stall is the master paused (for less than the
// sentinels' down-after time, so no failover starts).
func TestConformanceSentinel(t *testing.T) {
	topo := redistest.StartSentinel(t, redistest.SentinelOptions{})
	lockstest.Run(t, lockstest.Backend{
		Open: func(t *testing.T, space string) locks.Driver {
			d, err := Open(topo.URL(), Options{Prefix: space + ":"})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Stall: func(t *testing.T) func() {
			m := topo.Master()
			m.Pause()
			return m.Resume
		},
	})
}
