package redisack

import (
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
)

// TestNeedFollowsTheSentinels: on a Sentinel URL a write needs every replica the sentinels
// list in sync (2 here, above MinReplicas 1); one replica stopped leaves the count once a
// sentinel's link to it breaks; with every sentinel stopped, the last count they gave
// stands instead of failing the write.
func TestNeedFollowsTheSentinels(t *testing.T) {
	topo := redistest.StartSentinel(t, redistest.SentinelOptions{})
	c, err := New(topo.URL(), 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	if n, err := c.need(ctx); err != nil || n != 2 {
		t.Fatalf("need with both replicas in sync = %d, %v; want 2", n, err)
	}

	topo.Replicas()[0].Stop()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c.Missed()
		n, err := c.need(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Need still %d 15 s after a replica stopped; want 1", n)
		}
		time.Sleep(100 * time.Millisecond) // the sentinels notice the stopped replica on their own
	}

	for _, sn := range topo.Sentinels {
		sn.Stop()
	}
	c.Missed()
	if n, err := c.need(ctx); err != nil || n != 1 {
		t.Fatalf("need with every sentinel stopped = %d, %v; want the last count, 1", n, err)
	}
}

// TestNewWithoutMinReplicas: min 0 turns confirmation off (a nil Confirmer writes plainly);
// a negative min is refused, naming the setting.
func TestNewWithoutMinReplicas(t *testing.T) {
	c, err := New("redis://localhost:6379/0", 0, 0)
	if err != nil || c != nil {
		t.Fatalf("New with min 0 = %v, %v; want nil, nil", c, err)
	}
	if _, err := New("redis://localhost:6379/0", -1, 0); err == nil {
		t.Fatal("New with min -1 succeeded")
	}
}
