package phases_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A run stopped after api deployed (worker is in the wave after) puts api back: the previous config is written and its redeploy queued, and then a shutdown whose
// grace is over cuts the redeploy's wait short. api carries its previous config again (and
// the pipeline's record of it is what it was before the run) while it still runs this run's
// build: the run's left says restored, not deployed. The campaign's seed 1194 found the run
// saying "deployed: carries and runs tag v110" there, while the service carried v1 again.
func TestStoppedRestoreLeftRestoredWhenRedeployCut(t *testing.T) {
	h := newHarness(t)
	y := h.pipelineYAML("prod", []string{"api", "worker"}, "")
	y = strings.Replace(y, "uuid: "+uuidWorker+"\n", "uuid: "+uuidWorker+"\n    wave: 1\n", 1)
	h.start(y)
	h.coolify.SetDeployOutcomes(uuidAPI, coolifytest.Succeed, coolifytest.Hang) // the redeploy hangs
	h.coolify.SetDeployOutcome(uuidWorker, coolifytest.Hang)
	id := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	// Stopped while api's deploy step runs: the step ends (its deployment finishes) and the
	// run stops before worker, or, if worker's wave started first, worker's deployment ends
	// at its deadline; either way api was deployed and is put back.
	h.waitEvent(id, runs.EventDeployStarted, "api")
	if _, err := h.engine.Cancel(context.Background(), id, "test", "stop after api"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(h.coolify.Deployments(uuidAPI)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("api's previous config never redeployed: deployments %+v", h.coolify.Deployments(uuidAPI))
		}
		time.Sleep(5 * time.Millisecond) // polling the fake's state, not waiting out a race
	}
	over, stop := context.WithCancel(context.Background())
	stop() // no grace: the redeploy's wait is cut short at once
	_ = h.engine.Shutdown(over)

	r := h.wait(id)
	if a, _ := h.coolify.App(uuidAPI); a.ImageTag != "v1" {
		t.Fatalf("api carries tag %q, want v1 written back", a.ImageTag)
	}
	var api *runs.Left
	for i := range r.Left {
		if r.Left[i].Service == "api" {
			api = &r.Left[i]
		}
	}
	if api == nil || api.State != runs.LeftRestored || !strings.Contains(api.Detail, "still runs") {
		t.Errorf("left = %+v, want api %s (it carries its previous config again, still runs this run's)", r.Left, runs.LeftRestored)
	}
	if m, err := h.store.PipelineMark(context.Background(), uuidAPI, "prod"); err == nil && m.RunID == id {
		t.Errorf("api's mark of prod names run %s (build %s), want the one before it", m.RunID, m.Build)
	}
}
