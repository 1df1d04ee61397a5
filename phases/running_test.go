package phases_test

import (
	"context"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// What runs now: after a run verified its deployment, the services view shows the service
// running that build (tag, commit, app version, the run, its deployment), and that Coolify
// shows no deployment in progress. A later run whose deployment fails and is rolled back
// puts the earlier build back as what runs (restored by the later run). While a deployment
// runs, the view names it in progress.
func TestServicesShowWhatRunsNow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		h.start(h.pipelineYAML("prod", []string{"api"}, ""))
		ctx := context.Background()
		first := h.wait(h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2", Commit: "c0ffee2", AppVersion: "2.0.0"}))
		if first.Status != runs.StatusSucceeded {
			t.Fatalf("run %s (%s)", first.Status, first.Reason)
		}
		api := func() orchestrator.Service {
			t.Helper()
			list, err := h.engine.Services(ctx)
			if err != nil || len(list) != 1 {
				t.Fatalf("services: %+v, %v", list, err)
			}
			return list[0]
		}
		s := api()
		if r := s.Running; r == nil || r.ImageTag != "v2" || r.Commit != "c0ffee2" || r.AppVersion != "2.0.0" || r.RunID != first.ID ||
			r.Build != "2" || r.Deployment != stepOf(t, first, runs.Phase2, "api").DeploymentUUID || r.Restored {
			t.Errorf("running after the first run: %+v, want v2 of run %s", s.Running, first.ID)
		}
		if s.InProgress == nil || len(s.InProgress) != 0 || s.InProgressUnread != "" {
			t.Errorf("in progress %v (%q), want none, read from Coolify", s.InProgress, s.InProgressUnread)
		}

		h.coolify.SetDeployOutcomes(uuidAPI, coolifytest.Fail, coolifytest.Succeed)
		second := h.wait(h.submit("prod", orchestrator.Trigger{Build: "3", ImageTag: "v3", Commit: "c0ffee3"}))
		if second.Status != runs.StatusFailed {
			t.Fatalf("second run %s (%s), want failed", second.Status, second.Reason)
		}
		s = api()
		if r := s.Running; r == nil || r.ImageTag != "v2" || r.RunID != first.ID || !r.Restored || r.RestoredBy != second.ID {
			t.Errorf("running after the rollback: %+v, want v2 of run %s put back by %s", s.Running, first.ID, second.ID)
		}

		h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
		id := h.submit("prod", orchestrator.Trigger{Build: "4", ImageTag: "v4"})
		dep := h.waitEvent(id, runs.EventDeployStarted, "api").Data["deployment_uuid"]
		if s := api(); len(s.InProgress) != 1 || s.InProgress[0] != dep {
			t.Errorf("in progress %v while deployment %s runs", s.InProgress, dep)
		}
		if _, err := h.engine.Cancel(ctx, id, "test", ""); err != nil {
			t.Fatal(err)
		}
		h.wait(id)
	})
}
