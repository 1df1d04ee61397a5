package phases_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/faultproxy"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// takeovers is an Observer that counts RunTakenOver by pipeline and by whom.
type takeovers struct {
	mu          sync.Mutex
	self, other int
}

func (*takeovers) RunEnded(string, runs.Status)                                {}
func (*takeovers) PhaseDone(string, runs.Phase, time.Duration)                 {}
func (*takeovers) StepDone(string, runs.Phase, runs.StepStatus, time.Duration) {}
func (*takeovers) DeploymentStillBuilding(string)                              {}
func (o *takeovers) RunTakenOver(_ string, self bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if self {
		o.self++
	} else {
		o.other++
	}
}

func (o *takeovers) counts() (self, other int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.self, o.other
}

// A daemon cut off from Redis past its liveness TTL while its run is in Phase 1, in Phase 2
// with a deployment in progress, or rolling back, is presumed dead: another daemon takes the
// run over, ending it interrupted with what each service was left in. When the partition
// heals, the cut-off daemon acts on that run no more: not one request of it reaches Coolify
// after the takeover (the fake's own log, told apart by User-Agent), what the takeover
// recorded matches what Coolify carries and runs, no lease is left in the run's name, and
// the cut-off daemon says the run was taken over. Both kinds of partition: connections that
// go silent until the heal, and connections reset.
func TestPartitionedDaemonActsOnNothingTakenOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		// prepare sets the fake up before the run; reached reports when to cut the daemon off.
		prepare func(h *harness)
		reached func(h *harness, id string) bool
	}{
		{"phase 1", func(h *harness) {}, func(h *harness, id string) bool {
			return h.hasEvent(id, runs.EventServiceSynced, "api")
		}},
		{"phase 2 mid-deployment", func(h *harness) {}, func(h *harness, id string) bool {
			return deploymentRunning(h.coolify, uuidAPI, id, 1)
		}},
		{"rolling back", func(h *harness) {
			// worker's deployment fails: the rollback restores it and redeploys its previous
			// config, while api (deployed in the same wave before it) is not touched again
			// by the failed-service rollback.
			h.coolify.SetDeployOutcome(uuidWorker, coolifytest.Fail)
		}, func(h *harness, id string) bool {
			return deploymentRunning(h.coolify, uuidWorker, id, 2) // the redeploy of the previous config
		}},
	} {
		for _, reset := range []bool{false, true} {
			kind := "silent"
			if reset {
				kind = "reset"
			}
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				partitionScenario(t, tc.prepare, tc.reached, reset)
			})
		}
	}
}

func partitionScenario(t *testing.T, prepare func(*harness), reached func(*harness, string) bool, reset bool) {
	// Deployments run long enough to be cut off in the middle of one.
	b := newHarnessOn(t, "redis", coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 1500 * time.Millisecond, RunMax: 1500 * time.Millisecond}))
	a, proxy := b.peerBehindProxy("daemon-a")
	a.version, a.observer = "daemon-a", &takeovers{}
	b.instance, b.version = "daemon-b", "daemon-b"
	prepare(b)
	pipeline := b.pipelineYAML("prod", []string{"api", "worker", "web"}, "on_failure: rollback\n")
	a.start(pipeline)
	b.start(pipeline)

	id := a.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	waitUntil(t, 30*time.Second, "the run to reach the point of the partition", func() bool { return reached(b, id) })
	proxy.Partition(reset)
	var taken runs.Run
	waitUntil(t, 30*time.Second, "daemon-b to take the run over", func() bool {
		r, err := b.store.Get(context.Background(), id)
		taken = r
		return err == nil && r.Status == runs.StatusInterrupted
	})
	proxy.Heal()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.engine.Wait(ctx, id); err != nil {
		t.Fatalf("daemon-a's execution of the run did not stop after the heal: %v", err)
	}

	if taken.TakenOverBy != "daemon-b" || taken.Epoch != 2 {
		t.Errorf("the run was taken over by %q at epoch %d, want daemon-b at 2", taken.TakenOverBy, taken.Epoch)
	}
	since := taken.TakenOverAt
	if since.IsZero() { // a build that does not record when: its end, then
		since = taken.EndedAt
	}
	var late []string
	for _, q := range b.coolify.Requests() {
		if q.RunID == id && strings.Contains(q.Header.Get("User-Agent"), "daemon-a") && !q.Start.Before(since) {
			late = append(late, fmt.Sprintf("%s %s at %s", q.Method, q.Path, q.Start.Format(time.StampMicro)))
		}
	}
	if len(late) > 0 {
		t.Errorf("daemon-a sent %d request(s) for run %s after daemon-b took it over at %s: %s",
			len(late), id, since.Format(time.StampMicro), strings.Join(late, "; "))
	}
	checkLeftMatchesCoolify(t, b.coolify, taken, "v2")
	infos, err := b.locker.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	prefix := orchestrator.StepHolderPrefix(taken.Pipeline, taken.Trigger.Build, taken.ID)
	for _, in := range infos {
		if strings.HasPrefix(in.Holder, prefix) {
			t.Errorf("lease %s is still held in the run's name (%s) after the takeover", in.Key, in.Holder)
		}
	}
	// daemon-a says the run was taken over from it (the metric's hook; the log line goes
	// with it), once it is back.
	waitUntil(t, 30*time.Second, "daemon-a to report the run taken over", func() bool {
		_, other := a.observer.(*takeovers).counts()
		return other == 1
	})
}

// deploymentRunning reports whether the nth deployment of app that run id queued has
// started and not ended.
func deploymentRunning(cf *coolifytest.Server, app, id string, nth int) bool {
	n := 0
	for _, d := range cf.Deployments(app) {
		if d.RunID != id {
			continue
		}
		if n++; n == nth {
			return !d.StartedAt.IsZero() && d.FinishedAt.IsZero()
		}
	}
	return false
}

// checkLeftMatchesCoolify checks each service's Left state of a taken-over run against what
// the fake carries (the image tag set) and runs (the tag of the last finished deployment),
// for a run that set tag want over v1.
func checkLeftMatchesCoolify(t *testing.T, cf *coolifytest.Server, r runs.Run, want string) {
	t.Helper()
	if len(r.Left) == 0 {
		t.Fatalf("the taken-over run records no Left state")
	}
	for _, l := range r.Left {
		app, ok := cf.App(l.UUID)
		if !ok {
			continue
		}
		carries, runsTag := app.ImageTag, app.DeployedImageTag
		var ok2 bool
		switch l.State {
		case runs.LeftDeployed:
			ok2 = carries == want && runsTag == want
		case runs.LeftSyncedNotDeployed, runs.LeftDeployCanceled:
			// A sync that was under way may have written part of the config, or none.
			ok2 = runsTag != want && (carries == want || strings.Contains(l.Detail, "part"))
		case runs.LeftRestored:
			ok2 = carries == "v1"
		case runs.LeftUntouched:
			ok2 = carries == "v1" && runsTag == "v1"
		}
		if !ok2 {
			t.Errorf("Left says %s is %s (%s), but Coolify carries %q and runs %q", l.Service, l.State, l.Detail, carries, runsTag)
		}
	}
}

// hasEvent reports whether run id has logged an event of type typ for service.
func (h *harness) hasEvent(id string, typ runs.EventType, service string) bool {
	evs, err := h.store.Events(context.Background(), id, 0, 0)
	if err != nil {
		return false
	}
	for _, e := range evs {
		if e.Type == typ && e.Service == service {
			return true
		}
	}
	return false
}

// waitUntil polls cond until it holds or timeout passes (then the test fails, naming what).
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, not a wait for an event
	}
}

// peerBehindProxy is peer on h's Redis reached through a fault proxy, to cut it off.
func (h *harness) peerBehindProxy(instance string) (*harness, *faultproxy.Proxy) {
	h.t.Helper()
	u, err := url.Parse(h.redisURL)
	if err != nil {
		h.t.Fatal(err)
	}
	proxy, err := faultproxy.Start(u.Host)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { proxy.Close() })
	return h.peerVia(instance, "redis://"+proxy.Addr()+u.Path), proxy
}
