package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Failover scenarios (issue 14): two daemons share Redis through a Sentinel URL or a
// Cluster URL and run pipelines that share a service; Redis fails over while runs are in
// Phase 2 (a deployment in progress) or in Phase 1 (runs synced and waiting for
// coolify:phase2, which the test holds). The world's checks then read the fake Coolify's
// history: no mutating request to an application while another run's deployment of it is in
// progress, no two leases' writes interleaved on one application, every application running
// what was last synced to it. Each scenario also checks that fences first seen after the
// failover are above every fence seen before, that every run ends with a terminal status (a
// reason unless it succeeded), and that each daemon writes to the new master within
// reconnectBound of the new master serving writes.

// reconnectBound is how long after the new master serves writes (the failover function
// returned) each daemon may take to write to it: go-redis learns the switch from the
// sentinels' +switch-master message or a MOVED answer, retrying meanwhile. Redis's own part
// (detection, 1 s down-after here, election, promotion, a replica's sync under
// min-replicas-to-write) is not the daemon's, and on a loaded machine it once took 16 s.
const reconnectBound = 15 * time.Second

// haLivenessTTL is the daemons' liveness lease TTL on the topologies: longer than a
// failover (about 1-3 s here), so a daemon is not presumed dead while Redis fails over.
const haLivenessTTL = "15s"

// haFailover fails the topology over; it returns once the new master serves writes.
type haFailover func(t *testing.T)

// haScenario runs two daemons on w with pipelines api (a, b) and web (b, c), triggers runs
// alternately on both, waits for the moment the phase asks for, fails over and checks what
// the header comment says.
func haScenario(t *testing.T, w *world, inPhase1 bool, failover haFailover) {
	budgets := "locks:\n  ttl: 30s\n  phase: { timeout: 180s, max_retries: 3 }\n  service: { timeout: 180s, max_retries: 3 }\n"
	dir := pipelineDir(t, map[string]string{
		"api": w.pipelineYAML([]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}}, budgets+"concurrency: queue\n"),
		"web": w.pipelineYAML([]svc{{name: "b", uuid: appB}, {name: "c", uuid: appC}}, budgets+"concurrency: queue\n"),
	})
	env := func(instance string) map[string]string {
		e := w.env(instance, dir)
		e["ORCH_LIVENESS_TTL"] = haLivenessTTL
		if strings.Contains(w.url, "master_name=") {
			// As docker-compose.ha.yml: grants and the run store's writes confirmed by the
			// replicas the sentinels list in sync, so a forced failover loses none.
			e["ORCH_LOCKS_MIN_REPLICAS"] = "1"
		}
		return e
	}
	ds := []*daemon{startDaemon(t, "d1", env("chaos-ha-1")), startDaemon(t, "d2", env("chaos-ha-2"))}

	var hold *locks.Lease
	if inPhase1 {
		lk := w.locker()
		if err := lk.RegisterNamespace("coolify:"); err != nil {
			t.Fatal(err)
		}
		var err error
		hold, err = lk.Acquire(t.Context(), locks.Request{Key: "coolify:phase2", Holder: "chaos-test", Owner: "chaos-test", TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
	}

	type submitted struct {
		d   *daemon
		run runs.Run
	}
	var all []submitted
	for i := range 4 {
		d, pipeline := ds[i%2], []string{"api", "web"}[i%2]
		build := strconv.Itoa(100 + i)
		all = append(all, submitted{d, d.trigger(pipeline, orchestrator.Trigger{Build: build, ImageTag: "v" + build})})
	}

	if inPhase1 {
		waitFor(t, 60*time.Second, "a run synced and waiting for coolify:phase2 in Phase 1", func() bool {
			for _, s := range all {
				r := s.d.run(s.run.ID)
				if r.Status == runs.StatusPhase1 && len(requestsOf(w.cf, r.ID)) > 0 {
					return true
				}
			}
			return false
		})
	} else {
		waitFor(t, 60*time.Second, "a Phase-2 deployment in progress", func() bool {
			for _, d := range w.cf.Deployments("") {
				if !d.StartedAt.IsZero() && d.FinishedAt.IsZero() {
					return true
				}
			}
			return false
		})
	}
	seenBefore := map[string]bool{}
	var maxBefore int64
	for _, q := range w.cf.Requests() {
		if f, err := strconv.ParseInt(q.Fence, 10, 64); err == nil {
			seenBefore[q.Fence] = true
			maxBefore = max(maxBefore, f)
		}
	}
	started := time.Now()
	failover(t)
	served := time.Now()
	t.Logf("failover complete %s after it started", served.Sub(started).Round(time.Millisecond))

	// Each daemon writes to the new master: a trigger creates a run record there (a daemon
	// still talking to the demoted or dead master gets an error and answers 5xx).
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, d := range ds {
		wg.Go(func() {
			build := strconv.Itoa(200 + i)
			r, took := triggerUntilAccepted(t, d, []string{"api", "web"}[i], orchestrator.Trigger{Build: build, ImageTag: "v" + build}, served)
			t.Logf("daemon %s wrote to the new master %s after it served writes", d.name, took.Round(time.Millisecond))
			if took > reconnectBound {
				t.Errorf("daemon %s took %s to write to the new master once it served writes, above the bound %s", d.name, took.Round(time.Millisecond), reconnectBound)
			}
			mu.Lock()
			all = append(all, submitted{d, r})
			mu.Unlock()
		})
	}
	wg.Wait()
	if hold != nil {
		// Right after a failover the new master may refuse writes (NOREPLICAS, under
		// min-replicas-to-write) until a replica has synced with it: retry, as an operator would.
		var err error
		for deadline := time.Now().Add(reconnectBound); ; {
			if err = hold.Release(t.Context()); err == nil || errors.Is(err, locks.ErrLost) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // a retry interval, not a wait for an event
		}
		if err != nil {
			t.Fatalf("release the test's coolify:phase2 across the failover: %v", err)
		}
	}

	for _, s := range all {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
			defer cancel()
			if _, err := s.d.events(ctx, s.run.ID); err != nil {
				t.Errorf("run %s on %s did not end: %v", s.run.ID, s.d.name, err)
			}
		})
	}
	wg.Wait()
	counts := map[runs.Status]int{}
	for _, s := range all {
		r := s.d.run(s.run.ID)
		counts[r.Status]++
		if r.Status != runs.StatusSucceeded {
			t.Logf("run %s (%s) on %s ended %q: %s", r.ID, r.Pipeline, s.d.name, r.Status, r.Reason)
		}
		if !r.Status.Terminal() || (r.Status != runs.StatusSucceeded && r.Reason == "") {
			t.Errorf("run %s (%s) on %s ended %q with reason %q", r.ID, r.Pipeline, s.d.name, r.Status, r.Reason)
		}
		// A run stopped in Phase 1 when its daemon lost its liveness lease for longer than its
		// TTL (a failover that slow) acts on nothing more, not even to restore: it ends
		// interrupted, and its record says which services it left carrying its config.
		for _, l := range r.Left {
			if l.State == runs.LeftSyncedNotDeployed && l.UUID != "" {
				w.allowLeftSynced(l.UUID, r.ID, fmt.Sprintf("run %s ended %s and says it left it synced, not deployed", r.ID, r.Status))
			}
		}
		for _, st := range r.Steps {
			if st.Phase != runs.Phase1 || st.Error == "" {
				continue
			}
			t.Logf("run %s, %s: %s", r.ID, st.Name, st.Error)
			// Right after a failover the new master may refuse writes (NOREPLICAS) for longer
			// than the run's lock budgets, and a restore that cannot take its service lock must
			// not write: the run says the service was left carrying its config.
			if strings.Contains(st.Error, "NOT restored") && strings.Contains(st.Error, locks.ErrUnavailable.Error()) {
				w.allowLeftSynced(st.UUID, r.ID, fmt.Sprintf("run %s could not take the lock to restore it and says so", r.ID))
			}
		}
	}
	t.Logf("run outcomes: %v; deployments: %d", counts, len(w.cf.Deployments("")))

	n := 0
	for _, q := range w.cf.Requests() {
		f, err := strconv.ParseInt(q.Fence, 10, 64)
		if err != nil || seenBefore[q.Fence] {
			continue
		}
		n++
		if f <= maxBefore {
			t.Errorf("fence %d first seen after the failover (%s %s, run %s) is not above %d seen before it", f, q.Method, q.Path, q.RunID, maxBefore)
		}
	}
	if n == 0 {
		t.Error("no fence was handed out after the failover")
	}
}

// triggerUntilAccepted triggers pipeline on d until the daemon answers 202 and returns the run
// and the time since since. A request the daemon did not answer in time (it waits for the
// run store meanwhile) counts as a refusal. It gives up after twice reconnectBound.
func triggerUntilAccepted(t *testing.T, d *daemon, pipeline string, tr orchestrator.Trigger, since time.Time) (runs.Run, time.Duration) {
	body := map[string]any{"build": tr.Build, "image_tag": tr.ImageTag}
	for {
		code, b, err := d.try(http.MethodPost, "/v1/pipelines/"+pipeline+"/runs", body, map[string]string{"Authorization": "Bearer " + triggerToken})
		if err != nil {
			b = []byte(err.Error())
		}
		if code == http.StatusAccepted {
			var out struct {
				Run runs.Run `json:"run"`
			}
			if err := json.Unmarshal(b, &out); err != nil || out.Run.ID == "" {
				t.Fatalf("trigger answer %s: %v", b, err)
			}
			return out.Run, time.Since(since)
		}
		if time.Since(since) > 2*reconnectBound {
			t.Fatalf("daemon %s still refuses triggers %s after the failover: %d %s", d.name, time.Since(since).Round(time.Millisecond), code, b)
		}
		time.Sleep(50 * time.Millisecond) // another process's state: nothing to wait on
	}
}

// haTiming makes deployments last long enough (2-3 s) that a failover happens during one.
var haTiming = coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 2 * time.Second, RunMax: 3 * time.Second})

// sentinelWorld is a world on a master with two replicas and three sentinels that declare
// the master down after 1 s; every node has min-replicas-to-write 1, as
// docs/high-availability.md asks.
func sentinelWorld(t *testing.T) (*world, *redistest.Sentinel) {
	topo := redistest.StartSentinel(t, redistest.SentinelOptions{DownAfter: time.Second, MinReplicasToWrite: 1})
	return newWorldAt(t, topo.URL(), haTiming), topo
}

func TestSentinelFailoverInPhase2(t *testing.T) {
	w, topo := sentinelWorld(t)
	haScenario(t, w, false, func(t *testing.T) { topo.Failover() })
}

func TestSentinelMasterKilledInPhase2(t *testing.T) {
	w, topo := sentinelWorld(t)
	haScenario(t, w, false, killSentinelMaster(topo))
}

func TestSentinelFailoverInPhase1(t *testing.T) {
	w, topo := sentinelWorld(t)
	haScenario(t, w, true, func(t *testing.T) { topo.Failover() })
}

func TestSentinelMasterKilledInPhase1(t *testing.T) {
	w, topo := sentinelWorld(t)
	haScenario(t, w, true, killSentinelMaster(topo))
}

// killSentinelMaster is the failover by kill -9 of the master: the sentinels promote a
// replica.
func killSentinelMaster(topo *redistest.Sentinel) haFailover {
	return func(t *testing.T) {
		old := topo.Master()
		old.Stop() // kill -9
		topo.WaitNewMaster(old, 30*time.Second)
	}
}

// serviceKeyB is the Redis key of service b's lease (the service both pipelines share), as
// redislock names it with its default prefix: the Cluster variants fail over its slot.
const serviceKeyB = "orch:lock:{coolify:" + appB + "}:lock"

// clusterWorld is a world on a Cluster of three masters with one replica each and a node
// timeout of 2 s.
func clusterWorld(t *testing.T) (*world, *redistest.Cluster) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: 2 * time.Second})
	return newWorldAt(t, c.URL(), haTiming), c
}

func TestClusterFailoverInPhase2(t *testing.T) {
	w, c := clusterWorld(t)
	haScenario(t, w, false, clusterFailover(c))
}

func TestClusterMasterKilledInPhase2(t *testing.T) {
	w, c := clusterWorld(t)
	haScenario(t, w, false, killClusterMaster(c))
}

func TestClusterFailoverInPhase1(t *testing.T) {
	w, c := clusterWorld(t)
	haScenario(t, w, true, clusterFailover(c))
}

func TestClusterMasterKilledInPhase1(t *testing.T) {
	w, c := clusterWorld(t)
	haScenario(t, w, true, killClusterMaster(c))
}

// clusterFailover is CLUSTER FAILOVER on the replica of the slot holding service b's lease.
func clusterFailover(c *redistest.Cluster) haFailover {
	return func(t *testing.T) { c.Failover(c.ReplicaOf(c.MasterOf(serviceKeyB))) }
}

// killClusterMaster is the failover by kill -9 of the master of the slot holding service b's
// lease: its replica takes over once the node timeout has passed.
func killClusterMaster(c *redistest.Cluster) haFailover {
	return func(t *testing.T) {
		m := c.MasterOf(serviceKeyB)
		r := c.ReplicaOf(m)
		m.Stop() // kill -9
		c.WaitMaster(r, 30*time.Second)
	}
}
