package phases_test

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
	"github.com/deploy-orchestrator/orchestrator/phases"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// mutating reports whether a request to the fake Coolify changes a resource's config.
func mutating(r coolifytest.Request) bool {
	return (r.Method == http.MethodPatch || r.Method == http.MethodPost || r.Method == http.MethodDelete) &&
		strings.HasPrefix(r.Path, "/api/v1/applications/")
}

// A deployment nobody recorded (started from Coolify's UI, say) is in progress when a run
// reaches the service: the run writes nothing until it has ended, and when it outlives the
// service's deploy_timeout, the run cancels it and says so in its events and the audit.
func TestPhase1WaitsForADeploymentItDidNotStart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		h.start(h.pipelineYAML("prod", []string{"api"}, ""))
		h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
		foreign, err := coolify.New(h.coolifyURL, h.coolifyToken).Deploy(context.Background(), uuidAPI, false)
		if err != nil {
			t.Fatal(err)
		}
		h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Succeed)

		id := h.submit("prod", orchestrator.Trigger{Build: "21", ImageTag: "v21"})
		r := h.wait(id)
		if r.Status != runs.StatusSucceeded {
			t.Fatalf("status %s (%s)", r.Status, r.Reason)
		}
		dep, ok := h.coolify.Deployment(foreign.DeploymentUUID)
		if !ok || dep.Status != "cancelled-by-user" {
			t.Fatalf("foreign deployment %+v, want canceled after the deploy timeout", dep)
		}
		var cancelSeq uint64
		for _, req := range h.coolify.Requests() {
			if req.Method == http.MethodPost && strings.HasSuffix(req.Path, "/deployments/"+foreign.DeploymentUUID+"/cancel") {
				cancelSeq = req.Seq
			}
		}
		if cancelSeq == 0 {
			t.Fatal("no cancel request reached Coolify")
		}
		writes := 0
		for _, req := range h.coolify.Requests() {
			if mutating(req) && req.RunID == id {
				writes++
				if req.Seq < cancelSeq {
					t.Errorf("%s %s (seq %d) was sent while deployment %s was in progress (canceled at seq %d)", req.Method, req.Path, req.Seq, foreign.DeploymentUUID, cancelSeq)
				}
			}
		}
		if writes == 0 {
			t.Fatal("the run wrote nothing: the test shows nothing")
		}
		ev := findEvent(h.events(id), runs.EventDeployCanceled)
		if ev == nil || ev.Data["deployment_uuid"] != foreign.DeploymentUUID || ev.Phase != runs.Phase1 {
			t.Errorf("deploy.canceled event = %+v, want one naming %s in phase 1", ev, foreign.DeploymentUUID)
		}
		audit := auditLog(t, h)
		if len(audit) == 0 || audit[0].Action != runs.AuditCancelDeployment || audit[0].Target != "coolify:"+uuidAPI ||
			!strings.Contains(audit[0].Reason, foreign.DeploymentUUID) || audit[0].Detail["deployment"] != foreign.DeploymentUUID ||
			audit[0].Detail["run"] != id || audit[0].Outcome != runs.AuditOK {
			t.Errorf("audit = %+v, want a cancel_deployment record naming %s", audit, foreign.DeploymentUUID)
		}
	})
}

// auditLog returns the run store's audit log, newest first, after checking its chain.
func auditLog(t *testing.T, h *harness) []runs.AuditRecord {
	t.Helper()
	al := h.store.(runs.AuditLog)
	ctx := context.Background()
	anchor, head, err := al.AuditEnds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := al.AuditRecords(ctx, anchor.Seq, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := runs.VerifyAudit(anchor, head, recs); err != nil {
		t.Fatalf("audit log: %v", err)
	}
	slices.Reverse(recs)
	return recs
}

func findEvent(evs []runs.Event, typ runs.EventType) *runs.Event {
	for i := range evs {
		if evs[i].Type == typ {
			return &evs[i]
		}
	}
	return nil
}

// buildChanged is a Phase-1 step's record of one changed env var.
var buildChanged = runs.Changes{Env: []orchestrator.EnvChange{{Key: "BUILD", Action: orchestrator.EnvUpdate, ValueChanged: true}}}

// deadRun stores a run of prod build 7 as the daemon "dead-daemon" left it when it died: in
// status st, holding the lock keys held (as recorded in the run; nil for none), with steps.
func (h *harness) deadRun(t *testing.T, st runs.Status, held []string, steps ...runs.Step) runs.Run {
	t.Helper()
	ctx := context.Background()
	r, _, err := h.store.Create(ctx, runs.Run{Pipeline: "prod", Instance: "dead-daemon", Trigger: orchestrator.Trigger{Build: "7"}, Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	r, err = h.store.Update(ctx, r.ID, func(r *runs.Run) error {
		r.Status, r.HeldLocks = st, held
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// takeOver starts this harness's daemon with pipeline prod on services, waits until it has
// ended the dead daemon's run id, and returns that run as it ended.
func (h *harness) takeOver(t *testing.T, id string, services ...string) runs.Run {
	t.Helper()
	h.start(h.pipelineYAML("prod", services, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := runs.Follow(ctx, h.store, id, 0, func(runs.Event) error { return nil }); err != nil {
		t.Fatalf("the dead daemon's run was not taken over: %v", err)
	}
	r, err := h.store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// leftStates maps each service (or mobile step) of a taken-over run's Left to its state.
func leftStates(r runs.Run) map[string]string {
	left := map[string]string{}
	for _, l := range r.Left {
		left[l.Service] = l.State
	}
	return left
}

// A daemon that died mid-deploy and does not come back: another daemon on the same store
// finds its liveness lease expired, cancels the deployment the dead run started, releases
// its lease, ends the run as interrupted with every step finished, and says what state each
// service was left in.
func TestDeadDaemonsRunIsTakenOver(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		ctx := context.Background()
		// The dead daemon's run: api synced and deploying, worker synced, not deployed.
		h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
		dep, err := coolify.New(h.coolifyURL, h.coolifyToken).Deploy(ctx, uuidAPI, false)
		if err != nil {
			t.Fatal(err)
		}
		dead := h.deadRun(t, runs.StatusPhase2, []string{"coolify:phase2", "coolify:" + uuidAPI},
			runs.Step{Phase: runs.Phase1, Name: "api", UUID: uuidAPI, Status: runs.StepSynced, Changes: buildChanged},
			runs.Step{Phase: runs.Phase1, Name: "worker", UUID: uuidWorker, Status: runs.StepSynced, Changes: buildChanged},
			runs.Step{Phase: runs.Phase2, Name: "api", UUID: uuidAPI, Status: runs.StepRunning, DeploymentUUID: dep.DeploymentUUID},
			runs.Step{Phase: runs.Phase2, Name: "worker", UUID: uuidWorker, Status: runs.StepPending})
		// Its leases, still on the backend (held here only so they exist; the takeover must
		// force-release them).
		for _, key := range []string{"coolify:phase2", "coolify:" + uuidAPI} {
			l, err := h.locker.Acquire(ctx, locks.Request{Key: key, Holder: "prod#7/x", Owner: "dead-run-" + key, TTL: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
		}

		r := h.takeOver(t, dead.ID, "api", "worker")
		if r.Status != runs.StatusInterrupted || !strings.Contains(r.Reason, "dead-daemon") || len(r.HeldLocks) != 0 {
			t.Fatalf("taken-over run: %s (%s), held %v", r.Status, r.Reason, r.HeldLocks)
		}
		for _, s := range r.Steps {
			if !s.Status.Done() {
				t.Errorf("step %s/%s left %s", s.Phase, s.Name, s.Status)
			}
		}
		if s := stepOf(t, r, runs.Phase2, "api"); s.Status != runs.StepInterrupted {
			t.Errorf("phase-2 api step %s, want interrupted", s.Status)
		}
		if left := leftStates(r); left["api"] != runs.LeftDeployCanceled || left["worker"] != runs.LeftSyncedNotDeployed {
			t.Errorf("left = %+v, want api %s, worker %s", r.Left, runs.LeftDeployCanceled, runs.LeftSyncedNotDeployed)
		}
		if d, _ := h.coolify.Deployment(dep.DeploymentUUID); d.Status != "cancelled-by-user" {
			t.Errorf("the dead run's deployment is %s, want canceled", d.Status)
		}
		held, err := h.locker.List(ctx, "coolify:")
		if err != nil || len(held) != 0 {
			t.Errorf("leases after the takeover: %+v, %v; want none", held, err)
		}
		if ev := findEvent(h.events(dead.ID), runs.EventDeployCanceled); ev == nil || ev.Data["deployment_uuid"] != dep.DeploymentUUID {
			t.Errorf("deploy.canceled event = %+v", ev)
		}
		// The takeover's audit entry is written after the run's end, under the takeover
		// lease: once that lease is free, the takeover is over.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		done, err := h.locker.Acquire(wctx, locks.Request{Key: orchestrator.DaemonTakeoverKey("dead-daemon"), Holder: "test#0/observer",
			Budget: locks.Budget{Timeout: 30 * time.Second}})
		if err != nil {
			t.Fatalf("the takeover did not end: %v", err)
		}
		_ = done.Release(ctx)
		actions := map[string]bool{}
		for _, a := range auditLog(t, h) {
			actions[a.Action] = true
			if a.Action == runs.AuditForceRelease && (a.Detail["evicted_holder"] != "prod#7/x" || a.Detail["evicted_fence"] == "" ||
				a.Subject != "daemon:"+cmp.Or(h.instance, "test-instance")) {
				t.Errorf("force_release record %+v, want the daemon evicting prod#7/x with its fence", a)
			}
		}
		if !actions["takeover"] || !actions["cancel_deployment"] || !actions["force_release"] {
			t.Errorf("audit actions %v, want takeover, cancel_deployment and force_release", actions)
		}
	})
}

// A dead run that sent a deploy without recording it no longer holds the service's lease
// (it expired, a short lock TTL): another run holds it now and deploys. The takeover cannot
// tell that deployment from the dead run's, so it leaves it running.
func TestTakeoverLeavesADeploymentItCannotTellIsItsOwn(t *testing.T) {
	h := newHarnessOn(t, "sqlite")
	ctx := context.Background()
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
	dep, err := coolify.New(h.coolifyURL, h.coolifyToken).Deploy(ctx, uuidAPI, false)
	if err != nil {
		t.Fatal(err)
	}
	dead := h.deadRun(t, runs.StatusPhase2, nil,
		runs.Step{Phase: runs.Phase1, Name: "api", UUID: uuidAPI, Status: runs.StepSynced, Changes: buildChanged},
		runs.Step{Phase: runs.Phase2, Name: "api", UUID: uuidAPI, Status: runs.StepRunning, DeployRequestedAt: time.Now().UTC()})
	other, err := h.locker.Acquire(ctx, locks.Request{Key: "coolify:" + uuidAPI, Holder: "prod#8/api", Owner: "another-run", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)

	h.takeOver(t, dead.ID, "api")
	if d, _ := h.coolify.Deployment(dep.DeploymentUUID); d.Status == "cancelled-by-user" {
		t.Errorf("the takeover canceled deployment %s, which the run holding the service's lease may have started", dep.DeploymentUUID)
	}
	if ev := findEvent(h.events(dead.ID), runs.EventDeployCanceled); ev != nil {
		t.Errorf("deploy.canceled event = %+v, want none", ev)
	}
}

// A dead run that sent a deploy without recording it, and still holds the service's lease:
// by the takeover the deployment has ended. The application's newest deployment, created no
// earlier than the request, is the run's, and its end is what the service was left in; one
// created before the request is someone else's and says nothing of it.
func TestTakeoverFindsTheEndOfAnUnrecordedDeployment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome coolifytest.Outcome
		before  bool // the deployment was created a second before the request
		want    string
	}{
		{"finished", coolifytest.Succeed, false, runs.LeftDeployed},
		{"failed", coolifytest.Fail, false, runs.LeftSyncedNotDeployed},
		{"an earlier one", coolifytest.Succeed, true, runs.LeftSyncedNotDeployed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessOn(t, "sqlite")
			ctx := context.Background()
			h.coolify.SetDeployOutcome(uuidAPI, tc.outcome)
			cl := coolify.New(h.coolifyURL, h.coolifyToken)
			requested := time.Now().UTC()
			dep, err := cl.Deploy(ctx, uuidAPI, false)
			if err != nil {
				t.Fatal(err)
			}
			d, err := cl.WaitDeployment(ctx, dep.DeploymentUUID, 10*time.Second)
			if d == nil || !d.Status.Terminal() {
				t.Fatalf("deployment %s did not end: %v", dep.DeploymentUUID, err)
			}
			if tc.before {
				requested = d.CreatedAt.Truncate(time.Second).Add(time.Second)
			}
			dead := h.deadRun(t, runs.StatusPhase2, []string{"coolify:" + uuidAPI},
				runs.Step{Phase: runs.Phase1, Name: "api", UUID: uuidAPI, Status: runs.StepSynced, Changes: buildChanged},
				runs.Step{Phase: runs.Phase2, Name: "api", UUID: uuidAPI, Status: runs.StepRunning, DeployRequestedAt: requested})
			l, err := h.locker.Acquire(ctx, locks.Request{Key: "coolify:" + uuidAPI, Holder: "prod#7/api", Owner: "dead-run", TTL: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)

			r := h.takeOver(t, dead.ID, "api")
			var got runs.Left
			for _, x := range r.Left {
				if x.Service == "api" {
					got = x
				}
			}
			if got.State != tc.want {
				t.Errorf("api left %+v, want %s", got, tc.want)
			}
			if names := strings.Contains(got.Detail, dep.DeploymentUUID); names == tc.before {
				t.Errorf("api left %+v: naming deployment %s is %v, want %v", got, dep.DeploymentUUID, names, !tc.before)
			}
		})
	}
}

// A dead run whose mobile step was past its lock (reading or writing Flagsmith) leaves the
// feature in an unknown state, and its left says so beside the services.
func TestTakeoverNamesAMobileWriteUnderWay(t *testing.T) {
	h := newHarnessOn(t, "sqlite")
	dead := h.deadRun(t, runs.StatusMobile, nil,
		runs.Step{Phase: runs.Phase1, Name: "api", UUID: uuidAPI, Status: runs.StepSynced},
		runs.Step{Phase: runs.Phase2, Name: "api", UUID: uuidAPI, Status: runs.StepHealthy},
		runs.Step{Phase: runs.PhaseMobile, Name: "min-version", Status: runs.StepRunning, LockKey: "mobile:flagsmith:min_version"})
	r := h.takeOver(t, dead.ID, "api")
	if left := leftStates(r); left["api"] != runs.LeftDeployed || left["min-version"] != runs.LeftWriteUnknown {
		t.Errorf("left = %+v, want api %s and min-version %s", r.Left, runs.LeftDeployed, runs.LeftWriteUnknown)
	}
}

// A second daemon started with an instance name whose liveness lease is held refuses to
// start, and takes nothing over.
func TestSecondDaemonWithTheSameInstanceRefusesToStart(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	// The second daemon: its own Locker on the same lock database.
	d, err := sqlitelock.Open(filepath.Join(h.dir, "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	second := locks.New(d, locks.Options{PollInterval: 50 * time.Millisecond})
	t.Cleanup(func() { second.Close() })
	e, err := phases.New(phases.Deps{Store: h.store, Marks: h.store, Locker: second,
		Coolify:  func(url, token string) phases.Coolify { return coolify.New(url, token) },
		Instance: "test-instance", LivenessTTL: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Start(context.Background())
	if !errors.Is(err, phases.ErrInstanceLive) || !strings.Contains(err.Error(), "test-instance") {
		t.Fatalf("second Start: %v, want ErrInstanceLive naming the instance", err)
	}
	// It refuses on seeing the lease renewed, and never suggests evicting the live daemon.
	if !strings.Contains(err.Error(), "renewed it at") || strings.Contains(err.Error(), "locks release") ||
		!strings.Contains(err.Error(), "do not force-release") {
		t.Errorf("second Start: %v, want a refusal on the renewal that warns against a forced release", err)
	}
	// The first daemon still works.
	if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})); r.Status != runs.StatusSucceeded {
		t.Fatalf("run on the first daemon: %s (%s)", r.Status, r.Reason)
	}
}

// panicky is the real client with a fault injected: SetImageTag panics.
type panicky struct{ phases.Coolify }

func (panicky) SetImageTag(context.Context, string, string) error { panic("injected fault") }

// A panic in a run's goroutine ends the run as failed and releases its leases; the daemon
// (here: the engine) goes on.
func TestPanicInARunFailsTheRun(t *testing.T) {
	h := newHarness(t)
	ps := map[string]*config.Pipeline{}
	p, err := config.LoadPipelineBytes("p.yaml", []byte(h.pipelineYAML("prod", []string{"api"}, "")), func(k string) string { return h.env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ps[p.Name] = p
	e, err := phases.New(phases.Deps{Store: h.store, Marks: h.store, Locker: h.locker, Pipelines: ps,
		Coolify: func(url, token string) phases.Coolify {
			return panicky{coolify.New(url, token, coolify.WithPollInterval(10*time.Millisecond))}
		},
		Getenv: func(k string) string { return h.env[k] }, EnvPrefix: "ORCH_SECRET_",
		Instance: "panic-instance", LivenessTTL: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	r, _, err := e.Submit(context.Background(), "prod", orchestrator.Trigger{Build: "1", ImageTag: "v9"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(context.Background(), r.ID); err != nil {
		t.Fatal(err)
	}
	got, err := h.store.Get(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != runs.StatusFailed || !strings.Contains(got.Reason, "injected fault") || len(got.HeldLocks) != 0 {
		t.Errorf("run after a panic: %s (%s), held %v; want failed naming the panic, nothing held", got.Status, got.Reason, got.HeldLocks)
	}
	if held, err := h.locker.List(context.Background(), "coolify:"); err != nil || len(held) != 0 {
		t.Errorf("leases after the panic: %+v, %v; want none", held, err)
	}
}
