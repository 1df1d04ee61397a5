package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/redisack"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks/redislock"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
)

// TestForcedFailoverKeepsAcknowledgedRuns: runs are created without pause while SENTINEL
// FAILOVER moves the master, the old one staying alive (as the fault campaign's failover
// schedules do); every run whose creation the store acknowledged is on the new master.
// Without replica confirmation, or with a plain WAIT 1 (satisfied on the old master by the
// replica the sentinels have not moved yet), runs created in the promotion window are lost.
func TestForcedFailoverKeepsAcknowledgedRuns(t *testing.T) {
	topo := redistest.StartSentinel(t, redistest.SentinelOptions{DownAfter: time.Second, MinReplicasToWrite: 1})
	rdb, err := redislock.NewClient(topo.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ack, err := redisack.New(topo.URL(), 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ack.Close()
	s := redisstore.New(rdb, redisstore.Options{Confirm: ack})
	defer s.Close()

	w := &creator{s: s, stop: make(chan struct{})}
	w.wg.Add(1)
	go w.run()
	w.waitFor(t, 20)
	next := topo.Failover()
	w.waitFor(t, w.count()+20) // writes resume on the new master
	close(w.stop)
	w.wg.Wait()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	direct := next.Client()
	lost := 0
	for _, id := range w.acked() {
		n, err := direct.Exists(ctx, redisstore.DefaultPrefix+"{runs}:run:"+id).Result()
		if err != nil {
			t.Fatalf("EXISTS on the new master %s: %v", next.Addr, err)
		}
		if n == 0 {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged runs are not on the new master %s", lost, len(w.acked()), next.Addr)
	}
	t.Logf("%d acknowledged runs, all on the new master; %d creations failed", len(w.acked()), w.failures())
}

// creator creates runs one after another until stop, remembering those acknowledged.
type creator struct {
	s    *redisstore.Store
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	ids    []string
	failed int
}

func (c *creator) run() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		r, _, err := c.s.Create(ctx, runs.Run{Pipeline: "prod"})
		cancel()
		c.mu.Lock()
		if err == nil {
			c.ids = append(c.ids, r.ID)
		} else {
			c.failed++
		}
		c.mu.Unlock()
		if err != nil {
			time.Sleep(10 * time.Millisecond) // a retry pause, as callers back off
		}
	}
}

func (c *creator) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

func (c *creator) failures() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

func (c *creator) acked() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ids...)
}

// waitFor waits until n runs were acknowledged, failing the test after 60 s.
func (c *creator) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for c.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d runs acknowledged within 60 s (%d failed)", c.count(), n, c.failures())
		}
		time.Sleep(20 * time.Millisecond) // polling the writer's progress
	}
}

// TestMarkWaitsOutUnconfirmedReplicas: a service mark written while no replica confirms
// writes (both paused for 2 s, as in a failover's window) is tried again until they do,
// instead of failing the step that records it.
func TestMarkWaitsOutUnconfirmedReplicas(t *testing.T) {
	topo := redistest.StartSentinel(t, redistest.SentinelOptions{})
	rdb, err := redislock.NewClient(topo.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ack, err := redisack.New(topo.URL(), 1, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer ack.Close()
	s := redisstore.New(rdb, redisstore.Options{Confirm: ack})
	defer s.Close()

	replicas := topo.Replicas()
	for _, r := range replicas {
		r.Pause()
	}
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		time.Sleep(2 * time.Second) // the replicas' outage, shorter than the retry budget
		for _, r := range replicas {
			r.Resume()
		}
	}()
	m := runs.Mark{UUID: "app-1", RunID: "run-1", Pipeline: "prod", Build: "7", Fence: 3, Phase: runs.Phase1, At: time.Now().UTC()}
	if _, err := s.PutMark(t.Context(), m); err != nil {
		t.Fatalf("PutMark across a 2 s replica outage: %v", err)
	}
	<-resumed
	got, err := s.GetMark(t.Context(), "app-1")
	if err != nil || got.Build != "7" {
		t.Fatalf("GetMark = %+v, %v; want build 7", got, err)
	}
}
