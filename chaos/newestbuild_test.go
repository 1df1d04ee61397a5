package chaos

import (
	"context"
	"encoding/json"
	"fmt"
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

// Scenario (docs/guarantees.md, promise 4, "the newest build wins"): two daemons on one Redis. Build 3 is
// deploying when build 5 and then build 4 are submitted — to different daemons, and to one.
// Build 5 takes coolify:phase1 first; build 4 then finds build 5 on every service: it ends
// superseded, its steps stale naming build 5, and not one write of it reaches Coolify (read
// from the fake's request log). Every service ends running build 5.
func TestNewerBuildNotOverwrittenByOlder(t *testing.T) {
	for _, tc := range []struct {
		name string
		same bool
	}{{"different daemons", false}, {"one daemon", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startOlderAfterNewer(t, tc.same, orchestrator.Trigger{Build: "4", ImageTag: "v4"})
			if s.r5.Status != runs.StatusSucceeded {
				t.Errorf("build 5: %s (%s)", s.r5.Status, s.r5.Reason)
			}
			r4 := s.r4
			if r4.Status != runs.StatusSuperseded || !strings.Contains(r4.Reason, "newer build") {
				t.Errorf("build 4: %s (%q), want superseded: every service carries a newer build", r4.Status, r4.Reason)
			}
			for _, st := range r4.Steps {
				if st.Status != runs.StepStale || !strings.Contains(st.Note, "build 5") || !strings.Contains(st.Note, s.r5.ID) {
					t.Errorf("build 4's %s step %s: %s (%q), want stale naming build 5 and run %s", st.Phase, st.Name, st.Status, st.Note, s.r5.ID)
				}
			}
			h := s.w.cf.History()
			for _, c := range h.Calls {
				if c.Run == r4.ID && c.Mutating() {
					t.Errorf("build 4 reached Coolify with a write: %s", c)
				}
			}
			s.wantRunning(h, "5")
			// The dashboard's run page says so too.
			code, page := s.d4.do(http.MethodGet, "/runs/"+r4.ID, nil, nil)
			if code != http.StatusOK || !strings.Contains(string(page), "stale") || !strings.Contains(string(page), s.r5.ID) {
				t.Errorf("dashboard page of build 4: %d, want it to show the stale steps naming run %s", code, s.r5.ID)
			}
		})
	}
}

// The same with build 4 submitted as a rollback: it passes the guard, every service ends
// running build 4, and the rollback is in the run and in the audit, with who and why.
func TestRollbackToOlderBuild(t *testing.T) {
	for _, tc := range []struct {
		name string
		same bool
	}{{"different daemons", false}, {"one daemon", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startOlderAfterNewer(t, tc.same, orchestrator.Trigger{Build: "4", ImageTag: "v4", Rollback: true, Reason: "build 5 breaks checkout"})
			r4 := s.r4
			if r4.Status != runs.StatusSucceeded || !r4.Trigger.Rollback || r4.Trigger.Reason != "build 5 breaks checkout" {
				t.Errorf("rollback to build 4: %s (%s), trigger %+v", r4.Status, r4.Reason, r4.Trigger)
			}
			s.wantRunning(s.w.cf.History(), "4")
			audit, err := runs.LockAudit(context.Background(), s.w.store(), 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, app := range []string{appA, appB} {
				if !hasRollbackEntry(audit, app, r4) {
					t.Errorf("no rollback audit entry for %s naming run %s, its caller and reason: %+v", app, r4.ID, audit)
				}
			}
		})
	}
}

func hasRollbackEntry(audit []runs.LockAuditEntry, app string, r runs.Run) bool {
	for _, a := range audit {
		if a.Action == "rollback" && a.Key == "coolify:"+app && strings.Contains(a.Reason, r.ID) &&
			strings.Contains(a.Reason, r.Trigger.By) && strings.Contains(a.Reason, r.Trigger.Reason) {
			return true
		}
	}
	return false
}

// olderAfterNewer is the outcome of startOlderAfterNewer.
type olderAfterNewer struct {
	w          *world
	d4         *daemon
	r3, r5, r4 runs.Run
}

// startOlderAfterNewer runs the scenario: build 3 on d1 deploying; build 5 submitted (to d1)
// and holding coolify:phase1; then t4 (build 4) submitted to d2, or to d1 when same. It
// returns the runs as they ended.
func startOlderAfterNewer(t *testing.T, same bool, t4 orchestrator.Trigger) olderAfterNewer {
	t.Helper()
	w := newWorld(t, coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 1500 * time.Millisecond, RunMax: 1500 * time.Millisecond}))
	budgets := "locks:\n  ttl: 30s\n  phase: { timeout: 120s, max_retries: 1 }\n  service: { timeout: 120s, max_retries: 1 }\n"
	dir := pipelineDir(t, map[string]string{
		"prod": w.pipelineYAML([]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}}, budgets),
	})
	d1 := startDaemon(t, "d1", w.env("chaos-newest-build-1", dir))
	d2 := startDaemon(t, "d2", w.env("chaos-newest-build-2", dir))
	d4 := d2
	if same {
		d4 = d1
	}

	r3 := d1.trigger("prod", orchestrator.Trigger{Build: "3", ImageTag: "v3"})
	waitFor(t, 30*time.Second, "build 3's deployment of a to start", func() bool {
		_, ok := startedDeployment(w.cf, appA, r3.ID)
		return ok
	})
	r5 := d1.trigger("prod", orchestrator.Trigger{Build: "5", ImageTag: "v5"})
	waitFor(t, 30*time.Second, "build 5 to hold coolify:phase1", func() bool {
		return d1.run(r5.ID).Status != runs.StatusQueued
	})
	r4 := d4.trigger("prod", t4)

	s := olderAfterNewer{w: w, d4: d4}
	s.r3 = d1.waitEnded(r3.ID, 120*time.Second)
	s.r5 = d1.waitEnded(r5.ID, 120*time.Second)
	s.r4 = d4.waitEnded(r4.ID, 120*time.Second)
	if s.r3.Status != runs.StatusSucceeded {
		t.Errorf("build 3: %s (%s)", s.r3.Status, s.r3.Reason)
	}
	if held := w.heldLocks(); len(held) != 0 {
		t.Errorf("locks held after every run ended: %+v", held)
	}
	return s
}

// wantRunning checks, from the fake's history, that a and b carry and run build b.
func (s olderAfterNewer) wantRunning(h coolifytest.History, build string) {
	for _, app := range []string{appA, appB} {
		st := h.Apps[app]
		for what, c := range map[string]coolifytest.Config{"runs": st.Running, "carries": st.Current} {
			if c.ImageTag != "v"+build || c.Env["BUILD"] != build {
				s.w.t.Errorf("%s %s tag %q BUILD=%q, want v%s and %s", app, what, c.ImageTag, c.Env["BUILD"], build, build)
			}
		}
	}
}

// Supersede across daemons (concurrency: supersede): while coolify:phase1 is held, three
// runs are submitted alternately to two daemons on one Redis and a fourth after them. Each
// newer one ends the pending one before it on the other daemon, which stops waiting for the
// phase lock at once; only the newest deploys, and no request of the superseded runs reaches
// Coolify as a write (the fake's log).
func TestSupersedeAcrossDaemons(t *testing.T) {
	w := newWorld(t)
	budgets := "locks:\n  ttl: 30s\n  phase: { timeout: 120s, max_retries: 1 }\n  service: { timeout: 120s, max_retries: 1 }\n"
	dir := pipelineDir(t, map[string]string{
		"prod": w.pipelineYAML([]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}}, budgets+"concurrency: supersede\n"),
	})
	d1 := startDaemon(t, "d1", w.env("chaos-supersede-1", dir))
	d2 := startDaemon(t, "d2", w.env("chaos-supersede-2", dir))
	blocker, err := w.locker().Acquire(context.Background(), locks.Request{Key: "coolify:phase1", Holder: "chaos#0/blocker"})
	if err != nil {
		t.Fatal(err)
	}

	phase1Waiters := func() int {
		for _, l := range d1.locks() {
			if l.Key == "coolify:phase1" {
				return l.Waiters
			}
		}
		return 0
	}
	store := w.store()
	waiting := func(id string) bool {
		evs, err := store.Events(context.Background(), id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Type == runs.EventLockWaiting && e.LockKey == "coolify:phase1" {
				return true
			}
		}
		return false
	}
	daemons := []*daemon{d1, d2, d1, d2}
	ids := make([]string, len(daemons))
	for i, d := range daemons {
		b := fmt.Sprint(i + 1)
		ids[i] = d.trigger("prod", orchestrator.Trigger{Build: b, ImageTag: "v" + b}).ID
		// The newest pending run waits for the phase lock, and it alone: the one it
		// superseded on the other daemon has stopped waiting.
		waitFor(t, 10*time.Second, fmt.Sprintf("run %d alone waiting for coolify:phase1", i+1), func() bool {
			return waiting(ids[i]) && phase1Waiters() == 1
		})
		if i == 0 {
			continue
		}
		prev := daemons[i-1].run(ids[i-1])
		if prev.Status != runs.StatusSuperseded || !strings.Contains(prev.Reason, ids[i]) {
			t.Errorf("run %d on %s: %s (%q), want superseded by %s from %s", i, daemons[i-1].name, prev.Status, prev.Reason, ids[i], d.name)
		}
	}
	_ = blocker.Release(context.Background())
	if r := d2.waitEnded(ids[3], 60*time.Second); r.Status != runs.StatusSucceeded {
		t.Fatalf("newest run: %s (%s)", r.Status, r.Reason)
	}
	h := w.cf.History()
	for _, c := range h.Calls {
		for _, id := range ids[:3] {
			if c.Run == id && c.Mutating() {
				t.Errorf("superseded run %s reached Coolify with a write: %s", id, c)
			}
		}
	}
	for _, app := range []string{appA, appB} {
		if st := h.Apps[app]; st.Running.ImageTag != "v4" || len(w.cf.Deployments(app)) != 1 {
			t.Errorf("%s runs %q after %d deployments, want v4 after 1", app, st.Running.ImageTag, len(w.cf.Deployments(app)))
		}
	}
}

// Scenario (issue 43, promise 4 on a shared service): two daemons on one Redis, two
// pipelines deploying application a: late (a and b, the main lane) and ops (a alone, a
// hotfix lane). Build 43 of late deploys a and b; build 7 of ops then deploys a; build 42 of
// late arrives late, to the other daemon. It is stale on a as on b: it ends superseded, its
// steps name build 43 and its run, the fake's log shows no write of it, and a keeps running
// ops' build. GET /v1/services shows each pipeline's newest build on a.
//
// In "late's daemon killed", build 43's daemon is killed (kill -9) while its deployment of a
// runs: the other daemon takes the run over (interrupted, nothing rolled back), ops' build 7
// deploys a over it, and build 42 is still stale where build 43 was synced.
func TestSharedServiceKeepsEachPipelinesBuild(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill bool
	}{{"in turn", false}, {"late's daemon killed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 1500 * time.Millisecond, RunMax: 1500 * time.Millisecond}))
			budgets := "locks:\n  ttl: 30s\n  phase: { timeout: 120s, max_retries: 1 }\n  service: { timeout: 120s, max_retries: 1 }\n"
			dir := pipelineDir(t, map[string]string{
				"late": w.pipelineYAML([]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}}, budgets),
				"ops":  w.pipelineYAML([]svc{{name: "a", uuid: appA}}, budgets),
			})
			d1 := startDaemon(t, "d1", w.env("chaos-shared-1", dir))
			d2 := startDaemon(t, "d2", w.env("chaos-shared-2", dir))

			r43 := d1.trigger("late", orchestrator.Trigger{Build: "43", ImageTag: "v43"})
			if tc.kill {
				waitFor(t, 30*time.Second, "build 43's deployment of a to start", func() bool {
					_, ok := startedDeployment(w.cf, appA, r43.ID)
					return ok
				})
				d1.kill()
				waitFor(t, 30*time.Second, "d2 to take build 43's run over", func() bool {
					return d2.run(r43.ID).Status == runs.StatusInterrupted
				})
				// Nothing is rolled back by a takeover: b keeps build 43's sync, not deployed.
				w.allowLeftSynced(appB, r43.ID, "build 43's daemon was killed before it deployed b, and build 42 is stale there")
			} else if r := d1.waitEnded(r43.ID, 60*time.Second); r.Status != runs.StatusSucceeded {
				t.Fatalf("late build 43: %s (%s)", r.Status, r.Reason)
			}
			r7 := d2.trigger("ops", orchestrator.Trigger{Build: "7", ImageTag: "hotfix-7"})
			if r := d2.waitEnded(r7.ID, 60*time.Second); r.Status != runs.StatusSucceeded {
				t.Fatalf("ops build 7: %s (%s)", r.Status, r.Reason)
			}

			r42 := d2.waitEnded(d2.trigger("late", orchestrator.Trigger{Build: "42", ImageTag: "v42"}).ID, 60*time.Second)
			if r42.Status != runs.StatusSuperseded || !strings.Contains(r42.Reason, "newer build") {
				t.Errorf("late build 42: %s (%q), want superseded: every service carries a newer build of late", r42.Status, r42.Reason)
			}
			for _, st := range r42.Steps {
				if st.Status != runs.StepStale || !strings.Contains(st.Note, "build 43") || !strings.Contains(st.Note, r43.ID) {
					t.Errorf("build 42's %s step %s: %s (%q), want stale naming build 43 and run %s", st.Phase, st.Name, st.Status, st.Note, r43.ID)
				}
			}
			h := w.cf.History()
			for _, c := range h.Calls {
				if c.Run == r42.ID && c.Mutating() {
					t.Errorf("build 42 reached Coolify with a write: %s", c)
				}
			}
			for what, c := range map[string]coolifytest.Config{"runs": h.Apps[appA].Running, "carries": h.Apps[appA].Current} {
				if c.ImageTag != "hotfix-7" || c.Env["BUILD"] != "7" {
					t.Errorf("a %s tag %q BUILD=%q, want ops' hotfix-7 and 7", what, c.ImageTag, c.Env["BUILD"])
				}
			}

			// The services view, from the daemon that did not run build 43.
			code, b := d2.do(http.MethodGet, "/v1/services", nil, nil)
			var view struct{ Services []orchestrator.Service }
			if err := json.Unmarshal(b, &view); code != http.StatusOK || err != nil {
				t.Fatalf("GET /v1/services: %d %s (%v)", code, b, err)
			}
			newest := map[string]string{}
			var mark *orchestrator.ServiceMark
			for _, s := range view.Services {
				if s.UUID != appA {
					continue
				}
				mark = s.Mark
				for _, p := range s.Pipelines {
					if p.Newest != nil {
						newest[p.Pipeline] = p.Newest.Build + " " + p.Newest.RunID
					}
				}
			}
			if want := map[string]string{"late": "43 " + r43.ID, "ops": "7 " + r7.ID}; !maps.Equal(newest, want) || mark == nil || mark.RunID != r7.ID {
				t.Errorf("GET /v1/services, a: newest builds %v and mark %+v; want %v, ops' run %s last", newest, mark, want, r7.ID)
			}
		})
	}
}
