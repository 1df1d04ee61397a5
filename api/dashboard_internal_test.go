package api

import (
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

func TestHumanDurationMatchesRunJS(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{850 * time.Millisecond, "850ms"},
		{12340 * time.Millisecond, "12.3s"},
		{4*time.Minute + 5*time.Second, "4m05s"},
	} {
		if got := humanDuration(c.d); got != c.want {
			t.Errorf("humanDuration(%s): got %q, want %q", c.d, got, c.want)
		}
	}
}

func TestStepDetail(t *testing.T) {
	for _, c := range []struct {
		s    runs.Step
		want string
	}{
		{runs.Step{Error: "health check failed"}, "health check failed"},
		{runs.Step{Status: runs.StepWaitingLock, LockKey: "coolify:abc"}, "waiting for coolify:abc"},
		{runs.Step{Changes: runs.Changes{ImageTag: &orchestrator.TagChange{Old: "v1", New: "v2"}, Env: []orchestrator.EnvChange{
			{Key: "A", Action: orchestrator.EnvCreate},
			{Key: "B", Action: orchestrator.EnvUpdate, Flags: []orchestrator.FlagChange{{Name: "is_literal", Old: true, New: false}}, Comment: &orchestrator.CommentChange{Old: "ops", New: ""}},
		}}},
			`tag v1 → v2; env: A created, B (is_literal true → false, comment "ops" → "")`},
		{runs.Step{DeploymentUUID: "dpl-1", Changes: runs.Changes{Fields: []string{"ios.latest_version"}}},
			"fields: ios.latest_version; deployment dpl-1"},
		// A superseded step says why it was not deployed: its event's message, else the
		// general reason.
		{runs.Step{Phase: runs.Phase2, Name: "api", Status: runs.StepSuperseded},
			"not deployed: run r-2 re-synced it at fence 9"},
		{runs.Step{Phase: runs.Phase2, Name: "web", Status: runs.StepSuperseded}, supersededNote},
	} {
		notes := map[string]string{"phase2/api": "not deployed: run r-2 re-synced it at fence 9"}
		if got := stepDetail(c.s, notes); got != c.want {
			t.Errorf("stepDetail(%+v): got %q, want %q", c.s, got, c.want)
		}
	}
}
