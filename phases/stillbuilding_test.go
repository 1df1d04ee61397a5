package phases_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// stillBuildingPipeline is a one-service pipeline whose deployment times out at once and is
// canceled for at most cancelTimeout.
func (h *harness) stillBuildingPipeline(cancelTimeout string) string {
	return fmt.Sprintf(`name: prod
coolify: { url: %s, token: %q }
services:
  - name: app
    uuid: %s
    image_tag: "${trigger.image_tag}"
    deploy_timeout: 500ms
    cancel_timeout: %s
    env: [{ key: LOG_LEVEL, value: info }]
locks: { ttl: 30s, phase: { timeout: 20s, max_retries: 0 }, service: { timeout: 20s, max_retries: 0 } }
`, h.coolifyURL, h.coolifyToken, uuidAPI, cancelTimeout)
}

// writesDuring returns the fake's mutating requests to app other than cancels that arrived
// while deployment dep was queued or in progress, from after its first cancel on.
func writesDuring(h *harness, app, dep string) []string {
	d, _ := h.coolify.Deployment(dep)
	var firstCancel time.Time
	var out []string
	for _, q := range h.coolify.Requests() {
		switch {
		case q.Route == "POST /deployments/{uuid}/cancel" && strings.Contains(q.Path, dep) && firstCancel.IsZero():
			firstCancel = q.Start
		case q.Method == http.MethodGet || strings.HasSuffix(q.Path, "/cancel") || firstCancel.IsZero():
		case !strings.Contains(q.Path, app) && !strings.Contains(q.RawQuery, app):
		case d.FinishedAt.IsZero() || q.Start.Before(d.FinishedAt):
			out = append(out, q.Method+" "+q.Path)
		}
	}
	return out
}

// A deployment of the run's own that outlives deploy_timeout is canceled, and Coolify refuses
// the first three cancels (500, nothing canceled). The run writes nothing to the application
// until a read shows the deployment ended: the restore of its previous config comes after,
// never into the build it failed to stop (Coolify reads the env vars and the tag while it
// builds).
func TestNoWriteWhileTheRunsOwnDeploymentMayBuild(t *testing.T) {
	h := newHarness(t)
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
	h.coolify.FailNext(3, coolifytest.Fault{Method: "POST", Route: "/deployments/{uuid}/cancel", Status: http.StatusInternalServerError,
		Message: "Failed to cancel deployment"})
	h.start(h.stillBuildingPipeline("30s"))
	r := h.wait(h.submit("prod", orchestrator.Trigger{ImageTag: "v2"}))
	deps := h.coolify.Deployments(uuidAPI)
	if r.Status != runs.StatusFailed || len(deps) == 0 {
		t.Fatalf("run %s (%s) after %d deployments, want failed", r.Status, r.Reason, len(deps))
	}
	dep := deps[0]
	if dep.Status != "cancelled-by-user" {
		t.Errorf("the stuck deployment ends %q, want cancelled-by-user", dep.Status)
	}
	if w := writesDuring(h, uuidAPI, dep.UUID); len(w) > 0 {
		t.Errorf("writes to the application while its deployment %s could still build: %v", dep.UUID, w)
	}
	if a, _ := h.coolify.App(uuidAPI); a.ImageTag != "v1" {
		t.Errorf("the tag is %q after the run, want v1 put back once the deployment ended", a.ImageTag)
	}
}

// stillBuildingObserver counts DeploymentStillBuilding.
type stillBuildingObserver struct {
	takeovers
	mu sync.Mutex
	n  int
}

func (o *stillBuildingObserver) DeploymentStillBuilding(string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
}

// The same deployment when Coolify refuses every cancel: after cancel_timeout the run fails,
// naming the deployment and saying it is still in progress in Coolify and what to do; it
// writes nothing more to the application (no restore over a build that may read it), says the
// service's state is unknown, releases its lock loudly (a deploy.still_running event, the
// metric) and holds no lease afterwards.
func TestADeploymentThatNeverEndsIsLeftLoudly(t *testing.T) {
	h := newHarness(t)
	obs := &stillBuildingObserver{}
	h.observer = obs
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
	h.coolify.FailNext(1000, coolifytest.Fault{Method: "POST", Route: "/deployments/{uuid}/cancel", Status: http.StatusInternalServerError,
		Message: "Failed to cancel deployment"})
	h.start(h.stillBuildingPipeline("2s"))
	r := h.wait(h.submit("prod", orchestrator.Trigger{ImageTag: "v2"}))
	deps := h.coolify.Deployments(uuidAPI)
	if len(deps) != 1 {
		t.Fatalf("%d deployments, want 1", len(deps))
	}
	dep := deps[0]
	if r.Status != runs.StatusFailed || !strings.Contains(r.Reason, dep.UUID) || !strings.Contains(r.Reason, "still in_progress in Coolify") ||
		!strings.Contains(r.Reason, "cancel the deployment in Coolify") {
		t.Errorf("run %s (%s), want failed naming deployment %s as still in progress in Coolify and what to do", r.Status, r.Reason, dep.UUID)
	}
	if d, _ := h.coolify.Deployment(dep.UUID); d.Status != "in_progress" {
		t.Fatalf("the deployment is %s; the test needs it still building", d.Status)
	}
	if w := writesDuring(h, uuidAPI, dep.UUID); len(w) > 0 {
		t.Errorf("writes to the application while its deployment %s still builds: %v", dep.UUID, w)
	}
	if a, _ := h.coolify.App(uuidAPI); a.ImageTag != "v2" {
		t.Errorf("the tag is %q, want v2 left as it was (never restored over a build)", a.ImageTag)
	}
	if len(r.Left) != 1 || r.Left[0].State != runs.LeftUnknown || !strings.Contains(r.Left[0].Detail, dep.UUID) {
		t.Errorf("left %+v, want app unknown, naming the deployment", r.Left)
	}
	if findEvent(h.events(r.ID), runs.EventDeployStillRunning) == nil {
		t.Error("no deploy.still_running event")
	}
	obs.mu.Lock()
	n := obs.n
	obs.mu.Unlock()
	if n != 1 {
		t.Errorf("DeploymentStillBuilding counted %d times, want 1", n)
	}
	if infos, err := h.locker.List(t.Context(), ""); err != nil || len(infos) > 1 { // the daemon's own liveness lease
		t.Errorf("leases after the run: %+v (%v), want none of the run's", infos, err)
	}
}
