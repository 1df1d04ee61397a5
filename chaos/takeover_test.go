package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// longDeploys: every deployment runs 8 s, longer than the scenarios' 3 s lock TTL.
var longDeploys = coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 8 * time.Second, RunMax: 8 * time.Second})

// writesOverForeignDeployments lists, from the fake's own request log, every mutating request
// to one of apps that arrived while a deployment of that app queued by another run (or by
// nobody) was queued or in progress. Promise 1: it must be empty.
func writesOverForeignDeployments(cf *coolifytest.Server, apps ...string) []string {
	var bad []string
	for _, app := range apps {
		deps := cf.Deployments(app)
		for _, r := range cf.Requests() {
			if r.Method == http.MethodGet || !strings.HasPrefix(r.Path, "/api/v1/applications/"+app) {
				continue
			}
			for _, d := range deps {
				if d.RunID == r.RunID && d.RunID != "" {
					continue
				}
				running := !d.CreatedAt.After(r.Start) && (d.FinishedAt.IsZero() || r.Start.Before(d.FinishedAt))
				if running {
					bad = append(bad, fmt.Sprintf("%s %s by run %q at %s while deployment %s of run %q ran (%s → %s, %s)",
						r.Method, r.Path, r.RunID, r.Start.Format("15:04:05.000"), d.UUID, d.RunID,
						d.CreatedAt.Format("15:04:05.000"), d.FinishedAt.Format("15:04:05.000"), d.Status))
				}
			}
		}
	}
	return bad
}

// everyMutationTraced: every mutating request carries X-Orchestrator-Run and -Fence.
func everyMutationTraced(t *testing.T, cf *coolifytest.Server) {
	t.Helper()
	for _, r := range cf.Requests() {
		if r.Method != http.MethodGet && (r.RunID == "" || r.Fence == "") {
			t.Errorf("%s %s carried run %q fence %q, want both", r.Method, r.Path, r.RunID, r.Fence)
		}
	}
}

// Promise 1 and the takeover: daemon A is killed with kill -9 while its 8-s deployment runs
// (longer than the lock TTL) and does not come back. Daemon B, on the same Redis, takes the
// run over once A's liveness lease expires: the run reads interrupted with every step
// finished and the state of each service, A's deployment is canceled, no lease is left, and
// B's own run never writes to the application while A's deployment runs.
func TestDeadDaemonTakenOverByAnother(t *testing.T) {
	w := newWorld(t, longDeploys)
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML(
		[]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}}, "locks: { ttl: 3s }\n")})
	a := startDaemon(t, "a", w.env("chaos-take-a", dir))
	b := startDaemon(t, "b", w.env("chaos-take-b", dir))

	r1 := a.trigger("prod", runs.Trigger{Build: "1", ImageTag: "v2"})
	waitFor(t, 30*time.Second, "run 1's deployment of a to start", func() bool {
		_, ok := startedDeployment(w.cf, appA, r1.ID)
		return ok
	})
	a.kill()
	// B triggers at once: its Phase 1 reaches a while A's deployment still runs.
	r2 := b.trigger("prod", runs.Trigger{Build: "2", ImageTag: "v3"})

	got := b.waitEnded(r1.ID, 30*time.Second)
	if got.Status != runs.StatusInterrupted || !strings.Contains(got.Reason, "chaos-take-a") {
		t.Errorf("run 1 on B: %s (%s), want interrupted naming the dead daemon", got.Status, got.Reason)
	}
	for _, s := range got.Steps {
		if !s.Status.Done() {
			t.Errorf("run 1 step %s/%s left %s", s.Phase, s.Name, s.Status)
		}
	}
	left := map[string]string{}
	for _, l := range got.Left {
		left[l.Service] = l.State
	}
	if left["a"] != runs.LeftDeployCanceled || left["b"] != runs.LeftSyncedNotDeployed {
		t.Errorf("run 1 left %+v, want a %s and b %s", got.Left, runs.LeftDeployCanceled, runs.LeftSyncedNotDeployed)
	}
	dep1, _ := startedDeployment(w.cf, appA, r1.ID)
	if d, _ := w.cf.Deployment(dep1.UUID); d.Status != "cancelled-by-user" {
		t.Errorf("run 1's deployment %s is %s, want canceled", dep1.UUID, d.Status)
	}

	got2 := b.waitEnded(r2.ID, 90*time.Second)
	if got2.Status != runs.StatusSucceeded {
		t.Fatalf("run 2: %s (%s), want succeeded", got2.Status, got2.Reason)
	}
	for _, bad := range writesOverForeignDeployments(w.cf, appA, appB) {
		t.Error(bad)
	}
	everyMutationTraced(t, w.cf)
	for _, l := range w.heldLocks() {
		t.Errorf("after the runs, %s is still held by %s", l.Key, l.Holder)
	}
}

// Promise 1 with an immediate restart: daemon A is killed with kill -9 mid-deployment and
// restarted at once with the same ORCH_INSTANCE while daemon B has a run waiting for the
// service. A's restart takes over its own leftovers: the deployment is canceled before the
// leases are released, so B never writes over it.
func TestKillMidLongDeploymentAndRestartAtOnce(t *testing.T) {
	w := newWorld(t, longDeploys)
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML(
		[]svc{{name: "a", uuid: appA}}, "locks: { ttl: 3s }\n")})
	a := startDaemon(t, "a", w.env("chaos-restart-a", dir))
	b := startDaemon(t, "b", w.env("chaos-restart-b", dir))

	r1 := a.trigger("prod", runs.Trigger{Build: "1", ImageTag: "v2"})
	waitFor(t, 30*time.Second, "run 1's deployment of a to start", func() bool {
		_, ok := startedDeployment(w.cf, appA, r1.ID)
		return ok
	})
	r2 := b.trigger("prod", runs.Trigger{Build: "2", ImageTag: "v3"})
	a.kill()
	a.restart()

	got := a.waitEnded(r1.ID, 30*time.Second)
	if got.Status != runs.StatusInterrupted {
		t.Errorf("run 1: %s (%s), want interrupted", got.Status, got.Reason)
	}
	if got2 := b.waitEnded(r2.ID, 90*time.Second); got2.Status != runs.StatusSucceeded {
		t.Fatalf("run 2: %s (%s), want succeeded", got2.Status, got2.Reason)
	}
	if bad := writesOverForeignDeployments(w.cf, appA); len(bad) > 0 {
		t.Errorf("writes over another run's deployment:\n%s", strings.Join(bad, "\n"))
	}
	everyMutationTraced(t, w.cf)
	if a2, _ := w.cf.App(appA); a2.DeployedImageTag != "v3" {
		t.Errorf("a runs %q, want run 2's v3", a2.DeployedImageTag)
	}
	for _, l := range w.heldLocks() {
		t.Errorf("after the runs, %s is still held by %s", l.Key, l.Holder)
	}
}

// A second daemon started with the ORCH_INSTANCE of a live one refuses to start, saying
// why, and the first keeps working.
func TestSameInstanceRefusesToStart(t *testing.T) {
	w := newWorld(t)
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML([]svc{{name: "a", uuid: appA}}, "")})
	first := startDaemon(t, "first", w.env("chaos-same", dir))

	env := w.env("chaos-same", dir)
	env["ORCH_LISTEN"] = freeAddr(t)
	env["ORCH_TRIGGER_TOKEN"], env["ORCH_ADMIN_TOKEN"] = triggerToken, adminToken
	env["HOME"] = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("second daemon with the same instance: exit %v (ctx %v), want a refusal\n%s", err, ctx.Err(), out)
	}
	if !strings.Contains(string(out), "another daemon with this instance name is running") || !strings.Contains(string(out), "chaos-same") {
		t.Errorf("refusal does not say why:\n%s", out)
	}
	if r := first.waitEnded(first.trigger("prod", runs.Trigger{Build: "1", ImageTag: "v2"}).ID, 60*time.Second); r.Status != runs.StatusSucceeded {
		t.Errorf("run on the first daemon: %s (%s)", r.Status, r.Reason)
	}
}
