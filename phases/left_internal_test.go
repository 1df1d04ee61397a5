package phases

import (
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A takeover of a run that died while its restore put back another run's sync the service
// never ran says so, unless the restore's redeploy is seen to have finished: the service
// then carries one config and runs another, and the run's left must not hide it.
func TestTakeoverLeftOfAnUnrunRestore(t *testing.T) {
	before := runs.Mark{RunID: "r99", Pipeline: "back", Build: "99"}
	ran := &runs.Running{RunID: "r510", Pipeline: "front", Build: "510"}
	note := unrunNote(&svcState{before: before, beforeRunning: ran})
	run := func(p2 *runs.Step) runs.Run {
		steps := []runs.Step{{Phase: runs.Phase1, Name: "worker", UUID: "w", Status: runs.StepRestored, Note: note}}
		if p2 != nil {
			steps = append(steps, *p2)
		}
		return runs.Run{Steps: steps}
	}
	redeploy := &runs.Step{Phase: runs.Phase2, Name: "worker", UUID: "w", DeploymentUUID: "d1",
		RestoredAt: time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		name   string
		r      runs.Run
		ends   map[string]deployEnd
		unrun  bool
		detail string
	}{
		{"died before the redeploy", run(nil), nil, true, "it runs build 510 of front, run r510"},
		{"its redeploy failed", run(redeploy), map[string]deployEnd{"worker": {"d1", coolify.StatusFailed}}, true, "build 99 of back, run r99"},
		{"its redeploy finished", run(redeploy), map[string]deployEnd{"worker": {"d1", coolify.StatusFinished}}, false, "ended finished"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			left := leftStates(tc.r, tc.ends)
			if len(left) != 1 || left[0].State != runs.LeftRestored {
				t.Fatalf("left = %+v, want worker restored", left)
			}
			d := left[0].Detail
			if got := strings.Contains(d, "was not redeployed"); got != tc.unrun || !strings.Contains(d, tc.detail) {
				t.Errorf("detail %q: says not redeployed = %v, want %v, and %q in it", d, got, tc.unrun, tc.detail)
			}
		})
	}
}
