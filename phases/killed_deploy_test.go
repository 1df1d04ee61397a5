package phases_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// rollbackPipeline deploys api with a short deploy_timeout and rolls back on failure.
func rollbackPipeline(h *harness) string {
	return fmt.Sprintf(`name: prod
coolify: { url: %s, token: %q }
services:
  - name: api
    uuid: %s
    image_tag: "${trigger.image_tag}"
    deploy_timeout: 1s
    env:
      - { key: LOG_LEVEL, value: info }
locks: { ttl: 30s, phase: { timeout: 20s, max_retries: 0 }, service: { timeout: 20s, max_retries: 0 } }
on_failure: rollback
`, h.coolifyURL, h.coolifyToken, uuidAPI)
}

// A daemon killed (SIGKILL) while Phase 2's rollback redeploys the previous config: the
// snapshot was written back and the redeploy queued when it died. Restarted, the daemon takes
// its run over: the redeploy it left running is canceled like any deployment a dead run
// started, and the run does not say the service carries this run's config (it was put back).
func TestKilledDuringRollbackRedeploy(t *testing.T) {
	if runInChild(t, rollbackPipeline) {
		return
	}
	h := newHarness(t)
	// Every deployment hangs: the run's own is canceled at its deploy_timeout, which fails
	// Phase 2 and starts the rollback, whose redeploy hangs too.
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
	cmd, id := startChild(t, h)

	// Kill the child once the rollback's redeploy is queued: the run's own deployment was
	// canceled at its timeout, and the previous config is written back and being deployed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		deps := h.coolify.Deployments(uuidAPI)
		if len(deps) == 2 && deps[0].Status == "cancelled-by-user" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no rollback redeploy: deployments %+v", deps)
		}
		time.Sleep(5 * time.Millisecond) // polling the fake's state, not waiting out a race
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if a, _ := h.coolify.App(uuidAPI); a.ImageTag != "v1" {
		t.Fatalf("image tag %q when the child died, want v1 written back by the rollback", a.ImageTag)
	}

	h.start(rollbackPipeline(h))
	r, err := h.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != runs.StatusInterrupted {
		t.Fatalf("after restart: status %s (%s), want interrupted", r.Status, r.Reason)
	}
	for _, d := range h.coolify.Deployments(uuidAPI) {
		if d.Status == "queued" || d.Status == "in_progress" {
			t.Errorf("deployment %s of the dead run's rollback is still %s after the takeover", d.UUID, d.Status)
		}
	}
	if len(r.Left) != 1 || r.Left[0].State != runs.LeftRestored || !strings.Contains(r.Left[0].Detail, "cancelled-by-user") {
		t.Errorf("left = %+v, want api %s (it carries its previous config again, its redeploy canceled)", r.Left, runs.LeftRestored)
	}
	if ev := findEvent(h.events(id), runs.EventDeployCanceled); ev == nil {
		t.Errorf("no deploy.canceled event for the rollback's redeploy")
	}
}

// A daemon killed (SIGKILL) after Coolify queued its Phase-2 deployment but before the run
// recorded it (here: while the deploy's confirming read of the deployment hangs). Restarted,
// the daemon takes its run over and cancels that deployment too, as one the dead run started,
// and says the service was left with its deployment canceled.
func TestKilledBeforeDeploymentRecorded(t *testing.T) {
	if runInChild(t, apiPipeline) {
		return
	}
	h := newHarness(t)
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
	h.coolify.SetRouteLatency("GET", "/deployments/{uuid}", time.Minute, time.Minute)
	cmd, id := startChild(t, h)
	// Kill the child once Coolify has the deployment: its confirming read hangs, so the run
	// cannot have recorded it.
	deadline := time.Now().Add(30 * time.Second)
	for len(h.coolify.Deployments(uuidAPI)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the child never deployed")
		}
		time.Sleep(5 * time.Millisecond) // polling the fake's state, not waiting out a race
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	h.coolify.SetRouteLatency("GET", "/deployments/{uuid}", 0, 0)
	if s := stepOf(t, mustGet(t, h, id), runs.Phase2, "api"); s.DeploymentUUID != "" {
		t.Fatalf("the run recorded deployment %s: the kill came too late for this test", s.DeploymentUUID)
	}

	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	r := mustGet(t, h, id)
	if r.Status != runs.StatusInterrupted {
		t.Fatalf("after restart: status %s (%s), want interrupted", r.Status, r.Reason)
	}
	deps := h.coolify.Deployments(uuidAPI)
	if len(deps) != 1 || deps[0].Status != "cancelled-by-user" {
		var got []string
		for _, d := range deps {
			got = append(got, d.UUID+" "+d.Status)
		}
		t.Errorf("deployments after the takeover: %v, want the dead run's one canceled", got)
	}
	if len(r.Left) != 1 || r.Left[0].State != runs.LeftDeployCanceled {
		t.Errorf("left = %+v, want api %s", r.Left, runs.LeftDeployCanceled)
	}
	if ev := findEvent(h.events(id), runs.EventDeployCanceled); ev == nil || len(deps) != 1 || ev.Data["deployment_uuid"] != deps[0].UUID {
		t.Errorf("deploy.canceled event = %+v, want one naming the dead run's deployment", ev)
	}
}

func mustGet(t *testing.T, h *harness, id string) runs.Run {
	t.Helper()
	r, err := h.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Phase 1 writes api's env vars, then its image tag write keeps failing (500), which fails
// the run; the daemon is killed (SIGKILL) before the restore of api has written anything
// back. Restarted, the daemon takes its run over, and the run must not say api was left
// untouched: it carries this run's env vars.
func TestKilledWhileRestoringAFailedSync(t *testing.T) {
	if runInChild(t, apiPipeline) {
		return
	}
	h := newHarness(t)
	h.coolify.FailNext(100, coolifytest.Fault{Method: "PATCH", Route: "/applications/{uuid}", Status: http.StatusInternalServerError})
	cmd, id := startChild(t, h)
	// Once the env vars are written and the tag write has failed once, the restore's first
	// call (the guard's look for deployments in progress) is made to hang; kill the child
	// while it hangs.
	waitRequests := func(what string, ok func([]coolifytest.Request) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok(h.coolify.Requests()) {
			if time.Now().After(deadline) {
				t.Fatalf("never saw %s", what)
			}
			time.Sleep(time.Millisecond) // polling the fake's log, not waiting out a race
		}
	}
	waitRequests("the tag write fail", func(reqs []coolifytest.Request) bool {
		return slices.ContainsFunc(reqs, func(q coolifytest.Request) bool { return q.Route == "PATCH /applications/{uuid}" })
	})
	// Both routes the guard may read: the application's newest row until the client has seen
	// its id, the team's active list after.
	guardReads := []string{"/deployments/applications/{uuid}", "/deployments"}
	for _, route := range guardReads {
		h.coolify.SetRouteLatency("GET", route, time.Minute, time.Minute)
	}
	if v, _ := h.coolify.EnvValue(uuidAPI, "LOG_LEVEL", false); v != "info" {
		t.Fatalf("LOG_LEVEL = %q when the tag write failed, want this run's info", v)
	}
	waitRequests("the restore start", func([]coolifytest.Request) bool {
		r := mustGet(t, h, id)
		return r.Status.Terminal() || stepOf(t, r, runs.Phase1, "api").Status == runs.StepFailed
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, route := range guardReads {
		h.coolify.SetRouteLatency("GET", route, 0, 0)
	}
	if v, _ := h.coolify.EnvValue(uuidAPI, "LOG_LEVEL", false); v != "info" {
		t.Fatalf("LOG_LEVEL = %q when the child died, want this run's info (the restore must not have run)", v)
	}

	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	r := mustGet(t, h, id)
	if r.Status != runs.StatusInterrupted {
		t.Fatalf("after restart: status %s (%s), want interrupted", r.Status, r.Reason)
	}
	if len(r.Left) != 1 || r.Left[0].State == runs.LeftUntouched {
		t.Errorf("left = %+v; api carries this run's env vars, not untouched", r.Left)
	}
}
