package phases_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A Coolify service (docker compose) is deployed by a restart, which Coolify answers before
// its job runs: its status reads "running:*" from before until the job starts. The deploy
// step waits for the restart to show and the service to run again, so it ends after the job.
func TestServiceDeployWaitsForTheRestartJob(t *testing.T) {
	h := newHarness(t, coolifytest.WithTiming(coolifytest.Timing{Queued: 100 * time.Millisecond,
		RunMin: 200 * time.Millisecond, RunMax: 200 * time.Millisecond}), coolifytest.WithStatusLag(100*time.Millisecond))
	svc := h.coolify.AddService(coolifytest.Service{Name: "search"})
	h.coolify.SetEnv(svc.UUID, coolifytest.Env{Key: "MEILI_ENV", Value: coolifytest.Str("development")})
	h.startService(svc.UUID, "5s", `
    env:
      - key: MEILI_ENV
        value: production`)
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", By: "test"}))
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s: %s", r.Status, r.Reason)
	}
	st, _ := h.coolify.ServiceState(svc.UUID)
	if st.Restarts != 1 {
		t.Fatalf("%d restarts, want 1", st.Restarts)
	}
	if step := stepOf(t, r, runs.Phase2, "search"); step.EndedAt.Before(st.JobEnd) {
		t.Errorf("the deploy step ended at %s, %s before the restart's job did",
			step.EndedAt.Format(time.StampMicro), st.JobEnd.Sub(step.EndedAt))
	}
	if v, _ := h.coolify.EnvValue(svc.UUID, "MEILI_ENV", false); v != "production" {
		t.Errorf("MEILI_ENV is %q, want production", v)
	}
}

// A restart whose job never runs (a stalled queue) leaves the status as it was: the deploy
// step fails at its deploy timeout saying so, instead of taking the old containers for new.
func TestServiceRestartThatNeverShowsFails(t *testing.T) {
	h := newHarness(t, coolifytest.WithTiming(coolifytest.Timing{Queued: time.Hour, RunMin: time.Second, RunMax: time.Second}))
	svc := h.coolify.AddService(coolifytest.Service{Name: "search"})
	h.startService(svc.UUID, "300ms", "")
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", By: "test"}))
	step := stepOf(t, r, runs.Phase2, "search")
	if r.Status != runs.StatusFailed || !strings.Contains(step.Error, "never showed the service restarting") {
		t.Fatalf("run %s (%s), step error %q; want it failed: the restart never showed", r.Status, r.Reason, step.Error)
	}
}

// startService starts the engine over pipeline "prod" of the one Coolify service uuid, named
// search, with the given deploy timeout and extra YAML of its service entry.
func (h *harness) startService(uuid, deployTimeout, extra string) {
	h.start(fmt.Sprintf(`name: prod
coolify:
  url: %s
  token: %q
services:
  - name: search
    uuid: %s
    kind: service
    deploy_timeout: %s%s
`, h.coolifyURL, h.coolifyToken, uuid, deployTimeout, extra))
}
