package phases_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// writesBy returns the mutating requests run id made to the fake Coolify, from its log.
func writesBy(cf *coolifytest.Server, id string) []string {
	var out []string
	for _, r := range cf.Requests() {
		if r.RunID == id && r.Method != http.MethodGet {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

// requestsBy counts every request run id made to the fake Coolify.
func requestsBy(cf *coolifytest.Server, id string) int {
	n := 0
	for _, r := range cf.Requests() {
		if r.RunID == id {
			n++
		}
	}
	return n
}

// runsOn reports the tag an application runs (its last finished deployment's).
func runsOn(t *testing.T, h *harness, uuid string) string {
	t.Helper()
	app, ok := h.coolify.App(uuid)
	if !ok {
		t.Fatalf("no application %s", uuid)
	}
	return app.DeployedImageTag
}

// An older build that arrives after a newer one was deployed ends superseded without a single
// call to Coolify, its steps stale, naming the newer build and its run; a newer build still
// deploys.
func TestStaleBuildNeverWritten(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		h.start(h.pipelineYAML("prod", []string{"api", "worker"}, ""))
		r5 := h.submit("prod", orchestrator.Trigger{Build: "5", ImageTag: "v5"})
		if r := h.wait(r5); r.Status != runs.StatusSucceeded {
			t.Fatalf("build 5: %s (%s)", r.Status, r.Reason)
		}

		r4 := h.submit("prod", orchestrator.Trigger{Build: "4", ImageTag: "v4"})
		r := h.wait(r4)
		if r.Status != runs.StatusSuperseded || !strings.Contains(r.Reason, "newer build") {
			t.Errorf("build 4: %s (%q), want superseded: every service carries a newer build", r.Status, r.Reason)
		}
		for _, ph := range []runs.Phase{runs.Phase1, runs.Phase2} {
			for _, name := range []string{"api", "worker"} {
				st := stepOf(t, r, ph, name)
				if st.Status != runs.StepStale || !strings.Contains(st.Note, "build 5") || !strings.Contains(st.Note, r5) {
					t.Errorf("build 4's %s step %s: %s (%q), want stale naming build 5 and run %s", ph, name, st.Status, st.Note, r5)
				}
			}
		}
		if n := requestsBy(h.coolify, r4); n != 0 {
			t.Errorf("build 4 made %d requests to Coolify, want none", n)
		}
		for _, uuid := range []string{uuidAPI, uuidWorker} {
			if got := runsOn(t, h, uuid); got != "v5" {
				t.Errorf("%s runs %q, want v5", uuid, got)
			}
		}

		r6 := h.submit("prod", orchestrator.Trigger{Build: "6", ImageTag: "v6"})
		if r := h.wait(r6); r.Status != runs.StatusSucceeded || r.Reason != "" {
			t.Errorf("build 6: %s (%q), want succeeded", r.Status, r.Reason)
		}
		if got := runsOn(t, h, uuidAPI); got != "v6" {
			t.Errorf("api runs %q, want v6", got)
		}
	})
}

// With order: none (or a build that is not a number), the last run wins as before.
func TestOrderNoneKeepsLastRunWins(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, "order: none\n"))
	for _, b := range []string{"5", "4"} {
		if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: b, ImageTag: "v" + b})); r.Status != runs.StatusSucceeded {
			t.Fatalf("build %s: %s (%s)", b, r.Status, r.Reason)
		}
	}
	if got := runsOn(t, h, uuidAPI); got != "v4" {
		t.Errorf("api runs %q, want v4 (order: none)", got)
	}
}

// A rollback deploys an older build on purpose: it passes the guard and is recorded with who
// and why, in the run and in the audit (one entry per service it rolled back).
func TestRollbackPassesTheGuard(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		h.start(h.pipelineYAML("prod", []string{"api", "worker"}, ""))
		r5 := h.submit("prod", orchestrator.Trigger{Build: "5", ImageTag: "v5"})
		h.wait(r5)
		rb := h.submit("prod", orchestrator.Trigger{Build: "4", ImageTag: "v4", Rollback: true, Reason: "v5 breaks checkout", By: "cli:alice"})
		r := h.wait(rb)
		if r.Status != runs.StatusSucceeded || !r.Trigger.Rollback || r.Trigger.Reason != "v5 breaks checkout" {
			t.Fatalf("rollback: %s (%s), trigger %+v", r.Status, r.Reason, r.Trigger)
		}
		for _, uuid := range []string{uuidAPI, uuidWorker} {
			if got := runsOn(t, h, uuid); got != "v4" {
				t.Errorf("%s runs %q, want v4", uuid, got)
			}
		}
		if ev := h.events(rb)[0]; ev.Type != runs.EventRunQueued || !strings.Contains(ev.Message, "rollback to build 4") || !strings.Contains(ev.Message, "v5 breaks checkout") {
			t.Errorf("queued event %q, want it to say rollback and why", ev.Message)
		}
		audit, err := h.locker.Audit(context.Background(), 50)
		if err != nil {
			t.Fatal(err)
		}
		rolled := map[string]bool{}
		for _, a := range audit {
			if a.Action == "rollback" && strings.Contains(a.Reason, rb) && strings.Contains(a.Reason, "cli:alice") &&
				strings.Contains(a.Reason, "v5 breaks checkout") && strings.Contains(a.Reason, "build 5 of run "+r5) {
				rolled[a.Key] = true
			}
		}
		if !rolled["coolify:"+uuidAPI] || !rolled["coolify:"+uuidWorker] {
			t.Errorf("audit %+v, want a rollback entry per service naming run, who, why and the build replaced", audit)
		}
		// After the rollback build 4 is on the services: build 3 is stale, build 6 deploys.
		if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "3", ImageTag: "v3"})); r.Status != runs.StatusSuperseded {
			t.Errorf("build 3 after the rollback to 4: %s (%s), want superseded", r.Status, r.Reason)
		}
		if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "6", ImageTag: "v6"})); r.Status != runs.StatusSucceeded {
			t.Errorf("build 6 after the rollback: %s (%s)", r.Status, r.Reason)
		}
	})
}

// A plan says which services a run of an older build would leave alone.
func TestPlanReportsStaleServices(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api", "worker"}, ""))
	r5 := h.submit("prod", orchestrator.Trigger{Build: "5", ImageTag: "v5"})
	h.wait(r5)
	ctx := context.Background()
	plan, err := h.engine.Plan(ctx, "prod", orchestrator.Trigger{Build: "4", ImageTag: "v4"})
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range plan.Services {
		if !strings.Contains(sp.Stale, "build 5") || !strings.Contains(sp.Stale, r5) {
			t.Errorf("plan of build 4, %s: stale %q, want it to name build 5 and run %s", sp.Name, sp.Stale, r5)
		}
	}
	if w := strings.Join(plan.Warnings, "\n"); !strings.Contains(w, "superseded") {
		t.Errorf("warnings %q, want one saying the run would end superseded", w)
	}
	for _, tr := range []orchestrator.Trigger{{Build: "6", ImageTag: "v6"}, {Build: "4", ImageTag: "v4", Rollback: true}} {
		plan, err := h.engine.Plan(ctx, "prod", tr)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range plan.Services {
			if sp.Stale != "" {
				t.Errorf("plan of %+v, %s: stale %q, want none", tr, sp.Name, sp.Stale)
			}
		}
	}
}

// Supersede across daemons: with concurrency: supersede, a newer run submitted to either of
// two daemons sharing the store ends the pending runs of the other one too, which stop waiting
// for coolify:phase1 at once; a run submitted with an older build than a pending one is the
// one superseded. None of the superseded runs writes to Coolify.
func TestSupersedeAcrossDaemons(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		a := newHarnessOn(t, backend)
		pipeline := a.pipelineYAML("prod", []string{"api"}, "concurrency: supersede\n")
		a.start(pipeline)
		b := a.peer("test-instance-b")
		b.start(pipeline)
		blocker := holdPhase1(t, a)

		// Three pending runs, alternately on the two daemons, each superseded by the next.
		daemons := []*harness{a, b, a, b}
		ids := make([]string, len(daemons))
		for i, d := range daemons {
			build := string(rune('1' + i))
			ids[i] = d.submit("prod", orchestrator.Trigger{Build: build, ImageTag: "v" + build})
			d.waitEvent(ids[i], runs.EventLockWaiting, "")
			if i == 0 {
				continue
			}
			prev, owner := ids[i-1], daemons[i-1]
			// Its own daemon stops executing it long before the 20 s phase budget would.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := owner.engine.Wait(ctx, prev)
			cancel()
			if err != nil {
				t.Fatalf("run %s on %s still executing after run %s superseded it: %v", prev, cmpOr(owner.instance, "test-instance"), ids[i], err)
			}
			r, _ := a.store.Get(context.Background(), prev)
			if r.Status != runs.StatusSuperseded || !strings.Contains(r.Reason, ids[i]) {
				t.Errorf("run %d (%s): %s (%q), want superseded by %s", i, prev, r.Status, r.Reason, ids[i])
			}
		}
		// An older build submitted now is superseded by the pending newer one, at once.
		old, _, err := a.engine.Submit(context.Background(), "prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
		if err != nil {
			t.Fatal(err)
		}
		if old.Status != runs.StatusSuperseded || !strings.Contains(old.Reason, ids[3]) {
			t.Errorf("build 2 submitted while build 4 is pending: %s (%q), want superseded by %s", old.Status, old.Reason, ids[3])
		}

		_ = blocker.Release(context.Background())
		if r := b.wait(ids[3]); r.Status != runs.StatusSucceeded {
			t.Fatalf("newest run: %s (%s)", r.Status, r.Reason)
		}
		if got := runsOn(t, a, uuidAPI); got != "v4" || len(a.coolify.Deployments(uuidAPI)) != 1 {
			t.Errorf("api runs %q after %d deployments, want v4 after 1", got, len(a.coolify.Deployments(uuidAPI)))
		}
		for _, id := range append(ids[:3:3], old.ID) {
			if w := writesBy(a.coolify, id); len(w) > 0 {
				t.Errorf("superseded run %s wrote to Coolify: %v", id, w)
			}
		}
	})
}

// A run that finds a newer build on some services only writes and deploys the others: the
// stale ones are left, reported stale, and the run succeeds saying so. (Here the pipeline
// grew a service between the two builds: the second daemon has the new definition.)
func TestStaleServicesLeftOthersDeployed(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	r5 := h.submit("prod", orchestrator.Trigger{Build: "5", ImageTag: "v5"})
	h.wait(r5)
	p := h.peer("test-instance-b")
	p.start(p.pipelineYAML("prod", []string{"api", "worker"}, ""))
	r4 := p.submit("prod", orchestrator.Trigger{Build: "4", ImageTag: "v4"})
	r := p.wait(r4)
	if r.Status != runs.StatusSucceeded || !strings.Contains(r.Reason, "stale") || !strings.Contains(r.Reason, "api") {
		t.Errorf("build 4: %s (%q), want succeeded naming api as stale", r.Status, r.Reason)
	}
	for _, ph := range []runs.Phase{runs.Phase1, runs.Phase2} {
		if st := stepOf(t, r, ph, "api"); st.Status != runs.StepStale || !strings.Contains(st.Note, r5) {
			t.Errorf("%s step api: %s (%q), want stale naming run %s", ph, st.Status, st.Note, r5)
		}
	}
	if st := stepOf(t, r, runs.Phase2, "worker"); st.Status != runs.StepHealthy {
		t.Errorf("phase2 step worker: %s (%s), want healthy", st.Status, st.Error)
	}
	for _, w := range writesBy(h.coolify, r4) {
		if strings.Contains(w, uuidAPI) {
			t.Errorf("build 4 wrote to api: %s", w)
		}
	}
	if n := len(h.coolify.Deployments(uuidAPI)); n != 1 {
		t.Errorf("api deployed %d times, want once (by build 5)", n)
	}
	if api, worker := runsOn(t, h, uuidAPI), runsOn(t, h, uuidWorker); api != "v5" || worker != "v4" {
		t.Errorf("api runs %q, worker %q; want v5 and v4", api, worker)
	}
}
