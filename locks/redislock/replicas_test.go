package redislock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/faultproxy"
	"github.com/deploy-orchestrator/orchestrator/internal/redisack"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

// openDriver opens a driver on url with opts, closed when the test ends.
func openDriver(t *testing.T, url string, opts Options) *Driver {
	t.Helper()
	d, err := Open(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestMinReplicasConfirmsOrReleases: with MinReplicas 1 a grant and a renewal come back
// only once the replica has them; with the replica stopped, a grant is refused as
// ErrUnavailable and released on the master (nobody holds the key), and a renewal fails.
func TestMinReplicasConfirmsOrReleases(t *testing.T) {
	topo := redistest.StartSentinel(t, redistest.SentinelOptions{Replicas: 1, Sentinels: 1})
	d := openDriver(t, topo.URL(), Options{MinReplicas: 1, ReplicaTimeout: 300 * time.Millisecond})
	ctx := t.Context()
	replica := topo.Replicas()[0]

	a, err := d.TryAcquire(ctx, grant("svc:a", "p#1/a"))
	if err != nil {
		t.Fatalf("acquire with a live replica: %v", err)
	}
	// Confirmed means the replica has it now, not eventually.
	if tok, err := replica.Client().HGet(ctx, d.keys("svc:a").lock, "tok").Result(); err != nil || tok != a.Token {
		t.Fatalf("the replica has token %q (%v) right after the grant, want %q", tok, err, a.Token)
	}

	replica.Pause()
	_, err = d.TryAcquire(ctx, grant("svc:b", "p#1/b"))
	if !errors.Is(err, locks.ErrUnavailable) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Fatalf("acquire with the replica stopped: got %v, want ErrUnavailable naming 0 of 1 replicas", err)
	}
	if _, err := d.Get(ctx, "svc:b"); !errors.Is(err, locks.ErrNotFound) {
		t.Fatalf("an unconfirmed grant was left on the master: Get = %v", err)
	}
	if _, err := d.Renew(ctx, "svc:a", a.Token, time.Minute); !errors.Is(err, locks.ErrUnavailable) {
		t.Fatalf("renew with the replica stopped: got %v, want ErrUnavailable", err)
	}
	replica.Resume()
	b := grant("svc:b", "p#1/b")
	if _, err := d.TryAcquire(ctx, b); err != nil {
		t.Fatalf("acquire once the replica is back: %v", err)
	}

	// A release's script cannot wait for replicas, so it never hands the key over: the
	// waiter's own try, confirmed, takes it.
	w := locks.Grant{Key: "svc:b", Token: "w", Holder: "p#2/b", TTL: time.Minute,
		Ticket: "t", TicketDeadline: time.Now().Add(time.Minute), Handover: "hand"}
	if _, err := d.TryAcquire(ctx, w); !errors.Is(err, locks.ErrHeld) {
		t.Fatalf("queue behind the holder: got %v, want ErrHeld", err)
	}
	if err := d.Release(ctx, "svc:b", b.Token); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Get(ctx, "svc:b"); !errors.Is(err, locks.ErrNotFound) {
		t.Fatalf("with MinReplicas a release handed the key over unconfirmed: Get = %+v, %v", got, err)
	}
	if _, err := d.TryAcquire(ctx, w); err != nil {
		t.Fatalf("the waiter's own try: %v", err)
	}
}

// TestMinReplicasCluster: on a Cluster the WAIT goes to the master of the key's slot, on
// the connection that ran the grant, for keys on every master.
func TestMinReplicasCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: 1})
	d := openDriver(t, cluster.URL(), Options{MinReplicas: 1, ReplicaTimeout: time.Second})
	ctx := t.Context()
	for _, key := range []string{"svc:a", "svc:b", "svc:c", "svc:d", "svc:e", "svc:f"} {
		g := grant(key, "p#1/"+key)
		if _, err := d.TryAcquire(ctx, g); err != nil {
			t.Fatalf("acquire %s: %v", key, err)
		}
		if _, err := d.Renew(ctx, key, g.Token, time.Minute); err != nil {
			t.Fatalf("renew %s: %v", key, err)
		}
		replica := cluster.ReplicaOf(cluster.MasterOf(d.keys(key).lock))
		var tok *redis.StringCmd
		_, err := replica.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ReadOnly(ctx) // a cluster replica answers reads on this connection only after READONLY
			tok = p.HGet(ctx, d.keys(key).lock, "tok")
			return nil
		})
		if err != nil || tok.Val() != g.Token {
			t.Fatalf("%s: replica %s has token %q (%v), want %q", key, replica.Addr, tok.Val(), err, g.Token)
		}
	}
}

// TestFailoverKeepsConfirmedGrants: both replicas replicate through links that lag 500ms
// (a slow network), and the master is killed (kill -9) right after a grant comes back.
// Without MinReplicas the grant has not reached a replica: after the failover the key is
// free and a second holder gets it (the fence is still higher, from the clock floor). With
// MinReplicas 1 the grant came back only once a replica had it, and survives the failover.
// Either way the driver finds the new master through the sentinels by itself.
func TestFailoverKeepsConfirmedGrants(t *testing.T) {
	for _, tc := range []struct {
		name        string
		minReplicas int
		survives    bool
	}{
		{"without min_replicas the grant is lost", 0, false},
		{"with min_replicas 1 the grant survives", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var links []*faultproxy.Proxy
			topo := redistest.StartSentinel(t, redistest.SentinelOptions{DownAfter: time.Second,
				ReplicaLink: func(_ int, master string) string {
					p, err := faultproxy.Start(master)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { p.Close() })
					links = append(links, p)
					return p.Addr()
				}})
			d := openDriver(t, topo.URL(), Options{MinReplicas: tc.minReplicas, ReplicaTimeout: 5 * time.Second})
			ctx := t.Context()
			for i, l := range links {
				l.SetDelay(500 * time.Millisecond)
				// The replica still replicates through its link (a sentinel may redirect it).
				_, port, _ := net.SplitHostPort(l.Addr())
				if info := topo.Nodes[1+i].Client().Info(ctx, "replication").Val(); !strings.Contains(info, "master_port:"+port+"\r\n") {
					t.Fatalf("replica %d no longer replicates through its link:\n%s", i, info)
				}
			}
			old := topo.Master()
			first, err := d.TryAcquire(ctx, grant("svc:a", "p#1/a"))
			if err != nil {
				t.Fatal(err)
			}
			old.Stop() // kill -9
			for _, l := range links {
				l.Reset() // what the links still held is gone with the master
			}
			killed := time.Now()
			topo.WaitNewMaster(old, 30*time.Second)

			var info locks.Info
			for { // the driver reconnects by itself: retry until the new master answers
				info, err = d.Get(ctx, "svc:a")
				if err == nil || errors.Is(err, locks.ErrNotFound) {
					break
				}
				if time.Since(killed) > 30*time.Second {
					t.Fatalf("the driver did not reach the new master within 30s: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("master killed; driver answered by the new master after %s", time.Since(killed).Round(time.Millisecond))
			if tc.survives {
				if err != nil || info.Holder != "p#1/a" || info.Fence != first.Fence {
					t.Fatalf("after the failover: %+v, %v; want the confirmed lease of p#1/a with fence %d", info, err, first.Fence)
				}
				if _, err := d.TryAcquire(ctx, grant("svc:a", "p#2/a")); !errors.As(err, new(*locks.HeldError)) {
					t.Fatalf("a second holder after the failover: got %v, want the key held", err)
				}
				return
			}
			if !errors.Is(err, locks.ErrNotFound) {
				t.Fatalf("after the failover: %+v, %v; want the unconfirmed lease lost", info, err)
			}
			second, err := d.TryAcquire(ctx, grant("svc:a", "p#2/a"))
			if err != nil {
				t.Fatalf("second holder: %v", err)
			}
			if second.Fence <= first.Fence {
				t.Errorf("fence after the failover %d is not above the lost one %d", second.Fence, first.Fence)
			}
		})
	}
}

// TestForcedFailoverKeepsConfirmedGrants: grants of fresh keys are made without pause while
// SENTINEL FAILOVER moves the master, the old one staying alive; every grant the driver
// returned is on the new master. With a plain WAIT 1 (no Confirm), the old master's
// remaining replica confirms grants made after the promotion, and then drops them.
func TestForcedFailoverKeepsConfirmedGrants(t *testing.T) {
	topo := redistest.StartSentinel(t, redistest.SentinelOptions{DownAfter: time.Second, MinReplicasToWrite: 1})
	ack, err := redisack.New(topo.URL(), 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ack.Close()
	d := openDriver(t, topo.URL(), Options{MinReplicas: 1, Confirm: ack})

	var (
		mu      sync.Mutex
		granted = map[string]string{} // key → token
	)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(granted) }
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("svc:%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			l, err := d.TryAcquire(ctx, grant(key, "p#1/x"))
			cancel()
			if err != nil {
				time.Sleep(10 * time.Millisecond) // a retry pause, as the Locker backs off
				continue
			}
			mu.Lock()
			granted[key] = l.Token
			mu.Unlock()
		}
	}()
	waitGrants := func(n int) {
		deadline := time.Now().Add(60 * time.Second)
		for count() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d grants within 60 s", count(), n)
			}
			time.Sleep(20 * time.Millisecond) // polling the granter's progress
		}
	}
	waitGrants(20)
	next := topo.Failover()
	waitGrants(count() + 20) // grants resume on the new master
	close(stop)
	<-done

	ctx := t.Context()
	lost := 0
	for key, tok := range granted {
		got, err := next.Client().HGet(ctx, d.keys(key).lock, "tok").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("HGET on the new master: %v", err)
		}
		if got != tok {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d confirmed grants are not on the new master %s", lost, len(granted), next.Addr)
	}
	t.Logf("%d confirmed grants, all on the new master", len(granted))
}
