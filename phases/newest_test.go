package phases_test

import (
	"cmp"
	"context"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/locks"
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
		// The run store's hash-chained audit log has them, by the daemon (issue 36).
		recs, err := h.store.(runs.AuditLog).AuditRecords(context.Background(), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		logged := map[string]bool{}
		for _, a := range recs {
			if a.Action == "rollback" && a.Subject == "daemon:"+cmp.Or(h.instance, "test-instance") && strings.Contains(a.Reason, rb) && a.Outcome == runs.AuditOK &&
				strings.Contains(a.Reason, "cli:alice") && strings.Contains(a.Reason, "v5 breaks checkout") && strings.Contains(a.Reason, "build 5 of run "+r5) &&
				a.Detail["run"] == rb && a.Detail["replaced_run"] == r5 {
				logged[a.Target] = true
			}
		}
		if !logged["coolify:"+uuidAPI] || !logged["coolify:"+uuidWorker] {
			t.Errorf("audit log %+v, want a rollback record per service by the daemon naming run, who, why and the build replaced", recs)
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
	if w := strings.Join(plan.Problems, "\n"); !strings.Contains(w, "superseded") || !plan.WouldFail {
		t.Errorf("problems %q, want one saying the run would end superseded", w)
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
				t.Fatalf("run %s on %s still executing after run %s superseded it: %v", prev, cmp.Or(owner.instance, "test-instance"), ids[i], err)
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

// sharedPipelines are two pipelines that deploy the same application, api: late (api and
// worker, a main lane) and ops (api alone, a hotfix lane), with extra appended to late's.
func sharedPipelines(h *harness, extra string) []string {
	late := h.pipelineYAML("late", []string{"api", "worker"}, extra)
	ops := h.pipelineYAML("ops", []string{"api"}, "")
	return []string{late, ops}
}

// wantCarries checks, from the fake Coolify, that app uuid runs and carries build b of tag.
func wantCarries(t *testing.T, h *harness, uuid, tag, build string) {
	t.Helper()
	app, _ := h.coolify.App(uuid)
	v, _ := h.coolify.EnvValue(uuid, "BUILD", false)
	if app.ImageTag != tag || app.DeployedImageTag != tag || v != build {
		t.Errorf("%s carries tag %q, runs %q, BUILD=%q; want %s and build %s", uuid, app.ImageTag, app.DeployedImageTag, v, tag, build)
	}
}

// wantStale checks that run r left service name alone in both phases, its steps naming what
// and run by.
func wantStale(t *testing.T, r runs.Run, name, what, by string) {
	t.Helper()
	for _, ph := range []runs.Phase{runs.Phase1, runs.Phase2} {
		st := stepOf(t, r, ph, name)
		if st.Status != runs.StepStale || !strings.Contains(st.Note, what) || !strings.Contains(st.Note, "run "+by) {
			t.Errorf("run %s's %s step %s: %s (%q), want stale naming %s of run %s", r.ID, ph, name, st.Status, st.Note, what, by)
		}
	}
}

// Two pipelines deploy api (issue 43). Build 43 of late deploys it, then build 7 of ops:
// build 42 of late, arriving late, is stale on api as on worker. It ends superseded without a
// single call to Coolify, naming build 43 and its run, and api keeps ops' build. Each
// pipeline's builds compare with its own only: a newer build of late still deploys over ops'.
func TestStaleOnASharedService(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		h.start(sharedPipelines(h, "")...)
		r43 := h.submit("late", orchestrator.Trigger{Build: "43", ImageTag: "v43"})
		if r := h.wait(r43); r.Status != runs.StatusSucceeded {
			t.Fatalf("late build 43: %s (%s)", r.Status, r.Reason)
		}
		r7 := h.submit("ops", orchestrator.Trigger{Build: "7", ImageTag: "hotfix-7"})
		if r := h.wait(r7); r.Status != runs.StatusSucceeded || r.Reason != "" {
			t.Fatalf("ops build 7: %s (%q), want succeeded: late's builds do not make ops' stale", r.Status, r.Reason)
		}

		plan, err := h.engine.Plan(context.Background(), "late", orchestrator.Trigger{Build: "42", ImageTag: "v42"})
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range plan.Services {
			if !strings.Contains(sp.Stale, "build 43") || !strings.Contains(sp.Stale, r43) {
				t.Errorf("plan of late build 42, %s: stale %q, want it to name build 43 and run %s", sp.Name, sp.Stale, r43)
			}
		}

		r42 := h.submit("late", orchestrator.Trigger{Build: "42", ImageTag: "v42"})
		r := h.wait(r42)
		if r.Status != runs.StatusSuperseded || !strings.Contains(r.Reason, "newer build") {
			t.Errorf("late build 42: %s (%q), want superseded: every service carries a newer build of late", r.Status, r.Reason)
		}
		wantStale(t, r, "api", "build 43", r43)
		wantStale(t, r, "worker", "build 43", r43)
		if n := requestsBy(h.coolify, r42); n != 0 {
			t.Errorf("late build 42 made %d requests to Coolify, want none", n)
		}
		wantCarries(t, h, uuidAPI, "hotfix-7", "7")
		wantCarries(t, h, uuidWorker, "v43", "43")
		if n := len(h.coolify.Deployments(uuidAPI)); n != 2 {
			t.Errorf("api deployed %d times, want 2 (late's build 43, ops' build 7)", n)
		}
		api := serviceOf(t, h, uuidAPI)
		if m := api.Mark; len(api.Names) != 1 || api.Names[0] != "api" || m == nil || m.RunID != r7 || m.Phase != string(runs.Phase2) {
			t.Errorf("api in the services view: names %v, mark %+v; want api, deployed by run %s", api.Names, m, r7)
		}
		wantNewest(t, api, map[string]string{"late": "43 " + r43, "ops": "7 " + r7})
		wantNewest(t, serviceOf(t, h, uuidWorker), map[string]string{"late": "43 " + r43})

		r44 := h.submit("late", orchestrator.Trigger{Build: "44", ImageTag: "v44"})
		if r := h.wait(r44); r.Status != runs.StatusSucceeded || r.Reason != "" {
			t.Errorf("late build 44: %s (%q), want succeeded", r.Status, r.Reason)
		}
		wantCarries(t, h, uuidAPI, "v44", "44")
	})
}

// The guard under the service lock in Phase 1: the late run passed the check before Phase 1
// (nothing was marked then) and finds the newer run of its pipeline, and the other
// pipeline's after it, once it holds api's lock. Runs of one engine enter Phase 1 in the
// order they were submitted, so the older run (created first, on daemon b) waits behind a
// run of b's on worker, while the newer run (daemon a) and then ops' (daemon c) take
// coolify:phase1 before it. With order: created the older run is stale even with a higher
// build number.
func TestStaleOnASharedServiceUnderItsLock(t *testing.T) {
	for _, tc := range []struct {
		name, extra  string
		older, newer string // late's builds
		what         string // what the stale note names
	}{
		{"order build", "", "42", "43", "build 43"},
		{"order created", "order: created\n", "44", "43", "a run created at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, backend string) {
				a := newHarnessOn(t, backend)
				pipelines := append(sharedPipelines(a, tc.extra), a.pipelineYAML("other", []string{"worker"}, ""))
				a.start(pipelines...)
				b, c := a.peer("test-instance-b"), a.peer("test-instance-c")
				b.start(pipelines...)
				c.start(pipelines...)
				blocker := holdPhase1(t, a)

				first := b.submit("other", orchestrator.Trigger{Build: "1", ImageTag: "o1"})
				b.waitEvent(first, runs.EventLockWaiting, "")
				older := b.submit("late", orchestrator.Trigger{Build: tc.older, ImageTag: "v" + tc.older})
				newer := a.submit("late", orchestrator.Trigger{Build: tc.newer, ImageTag: "v" + tc.newer})
				a.waitEvent(newer, runs.EventLockWaiting, "")
				hotfix := c.submit("ops", orchestrator.Trigger{Build: "7", ImageTag: "hotfix-7"})
				c.waitEvent(hotfix, runs.EventLockWaiting, "")
				_ = blocker.Release(context.Background())

				for _, w := range []struct {
					h  *harness
					id string
				}{{b, first}, {a, newer}, {c, hotfix}} {
					if r := w.h.wait(w.id); r.Status != runs.StatusSucceeded {
						t.Fatalf("run %s of %s: %s (%s)", w.id, r.Pipeline, r.Status, r.Reason)
					}
				}
				r := b.wait(older)
				if r.Status != runs.StatusSuperseded {
					t.Errorf("late's older run: %s (%q), want superseded", r.Status, r.Reason)
				}
				wantStale(t, r, "api", tc.what, newer)
				wantStale(t, r, "worker", tc.what, newer)
				if w := writesBy(a.coolify, older); len(w) > 0 {
					t.Errorf("late's older run wrote to Coolify: %v", w)
				}
				wantCarries(t, a, uuidAPI, "hotfix-7", "7")
			})
		})
	}
}

// A restore after a failed run puts its own pipeline's build back and leaves the other
// pipeline's alone; the service's mark names the restoring run (the write guard's), but the
// stale notes name the run whose build was put back. Build 44 of late (on a daemon whose late
// also deploys a service Coolify does not have) syncs api over ops' build 7 and fails: api
// carries ops' build 7 again, late's build 42 is stale naming build 43 of its run, ops' build
// 6 is stale naming build 7 of ops' run (not late's run that restored it). A pipeline whose
// first build on api failed has no build there afterwards: its older build is not stale.
func TestRestoreKeepsEachPipelinesBuild(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		web := h.pipelineYAML("web", []string{"api"}, "")
		h.start(append(sharedPipelines(h, ""), web)...)
		r43 := h.submit("late", orchestrator.Trigger{Build: "43", ImageTag: "v43"})
		r7 := h.submit("ops", orchestrator.Trigger{Build: "7", ImageTag: "hotfix-7"})
		for _, id := range []string{r43, r7} {
			if r := h.wait(id); r.Status != runs.StatusSucceeded {
				t.Fatalf("run %s of %s: %s (%s)", id, r.Pipeline, r.Status, r.Reason)
			}
		}
		broken := h.peer("test-instance-b")
		broken.start(h.pipelineYAML("late", []string{"api", "broken"}, ""), h.pipelineYAML("web", []string{"api", "broken"}, ""))
		var r50 string
		for _, tr := range []struct{ pipeline, build string }{{"late", "44"}, {"web", "50"}} {
			id := broken.submit(tr.pipeline, orchestrator.Trigger{Build: tr.build, ImageTag: "v" + tr.build})
			r := broken.wait(id)
			if r.Status != runs.StatusFailed || stepOf(t, r, runs.Phase1, "api").Status != runs.StepRestored {
				t.Fatalf("%s build %s: %s (%s), api %s; want failed at broken with api restored", tr.pipeline, tr.build, r.Status, r.Reason,
					stepOf(t, r, runs.Phase1, "api").Status)
			}
			wantCarries(t, h, uuidAPI, "hotfix-7", "7")
			r50 = id
		}
		// The services view: api's mark names web's run, which restored ops' build 7 last;
		// each pipeline's newest build is its own run's, and web has none.
		api := serviceOf(t, h, uuidAPI)
		if m := api.Mark; m == nil || m.RunID != r50 || m.Pipeline != "ops" || m.Build != "7" {
			t.Errorf("api's mark %+v, want run %s carrying ops' build 7", m, r50)
		}
		wantNewest(t, api, map[string]string{"late": "43 " + r43, "ops": "7 " + r7, "web": ""})

		r42 := h.submit("late", orchestrator.Trigger{Build: "42", ImageTag: "v42"})
		r := h.wait(r42)
		if r.Status != runs.StatusSuperseded {
			t.Errorf("late build 42: %s (%q), want superseded", r.Status, r.Reason)
		}
		wantStale(t, r, "api", "build 43", r43)
		r6 := h.submit("ops", orchestrator.Trigger{Build: "6", ImageTag: "hotfix-6"})
		r = h.wait(r6)
		if r.Status != runs.StatusSuperseded {
			t.Errorf("ops build 6: %s (%q), want superseded", r.Status, r.Reason)
		}
		wantStale(t, r, "api", "build 7", r7)
		wantCarries(t, h, uuidAPI, "hotfix-7", "7")
		r49 := h.submit("web", orchestrator.Trigger{Build: "49", ImageTag: "v49"})
		if r := h.wait(r49); r.Status != runs.StatusSucceeded || r.Reason != "" {
			t.Errorf("web build 49 after web's build 50 failed and was restored: %s (%q), want succeeded", r.Status, r.Reason)
		}
		wantCarries(t, h, uuidAPI, "v49", "49")
	})
}

// serviceOf returns uuid's entry in the engine's services view.
func serviceOf(t *testing.T, h *harness, uuid string) orchestrator.Service {
	t.Helper()
	list, err := h.engine.Services(context.Background())
	if err != nil {
		t.Fatalf("Services: %v", err)
	}
	for _, s := range list {
		if s.UUID == uuid {
			return s
		}
	}
	t.Fatalf("Services: no %s in %+v", uuid, list)
	return orchestrator.Service{}
}

// wantNewest checks each pipeline's newest build on s: "build run", or "" for none.
func wantNewest(t *testing.T, s orchestrator.Service, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, p := range s.Pipelines {
		got[p.Pipeline] = ""
		if p.Newest != nil {
			got[p.Pipeline] = p.Newest.Build + " " + p.Newest.RunID
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s: newest build per pipeline %v, want %v", s.UUID, got, want)
	}
}

// A run taken over from a dead daemon keeps its pipeline's build on the services it synced:
// late's build 43 synced api and its daemon died; the run is taken over (interrupted, nothing
// rolled back), ops' build 7 deploys api, and late's build 42 is still stale there.
func TestStaleOnASharedServiceAfterTakeover(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		ctx := context.Background()
		dead, _, err := h.store.Create(ctx, runs.Run{Pipeline: "late", Instance: "dead-daemon", Trigger: orchestrator.Trigger{Build: "43", ImageTag: "v43"},
			Steps: []runs.Step{{Phase: runs.Phase1, Name: "api", UUID: uuidAPI, Status: runs.StepSynced, Changes: buildChanged},
				{Phase: runs.Phase2, Name: "api", UUID: uuidAPI, Status: runs.StepPending}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.Update(ctx, dead.ID, func(r *runs.Run) error { r.Status = runs.StatusPhase1; return nil }); err != nil {
			t.Fatal(err)
		}
		// Its sync of api, as the dead daemon recorded it under api's lease.
		l, err := h.locker.Acquire(ctx, locks.Request{Key: "coolify:" + uuidAPI, Holder: "late#43/api", Owner: dead.ID})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.PutMark(ctx, runs.Mark{UUID: uuidAPI, RunID: dead.ID, Fence: l.Fence(), Phase: runs.Phase1, At: time.Now().UTC(),
			Pipeline: "late", Build: "43", RunCreated: dead.CreatedAt}); err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)

		h.start(sharedPipelines(h, "")...)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := runs.Follow(wctx, h.store, dead.ID, 0, func(runs.Event) error { return nil }); err != nil {
			t.Fatalf("the dead daemon's run was not taken over: %v", err)
		}
		if r, _ := h.store.Get(ctx, dead.ID); r.Status != runs.StatusInterrupted {
			t.Fatalf("the dead daemon's run: %s (%s), want interrupted", r.Status, r.Reason)
		}
		if r := h.wait(h.submit("ops", orchestrator.Trigger{Build: "7", ImageTag: "hotfix-7"})); r.Status != runs.StatusSucceeded {
			t.Fatalf("ops build 7: %s (%s)", r.Status, r.Reason)
		}
		r := h.wait(h.submit("late", orchestrator.Trigger{Build: "42", ImageTag: "v42"}))
		wantStale(t, r, "api", "build 43", dead.ID)
		wantCarries(t, h, uuidAPI, "hotfix-7", "7")
	})
}
