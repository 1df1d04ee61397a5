package phases_test

import (
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A daemon started while its Redis cannot be reached (a failover under way, Redis not up
// yet) waits for it to come back instead of failing its start: it takes its liveness lease
// once the backend answers, then runs as usual.
func TestStartWaitsForTheLockBackend(t *testing.T) {
	a, proxy := newHarnessOn(t, "redis").peerBehindProxy("daemon-a")
	proxy.Partition(true)
	heal := time.AfterFunc(1500*time.Millisecond, proxy.Heal) // the outage's length
	defer heal.Stop()
	a.start(a.pipelineYAML("prod", []string{"api"}, ""))
	if r := a.wait(a.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})); r.Status != runs.StatusSucceeded {
		t.Fatalf("status = %s (%s)", r.Status, r.Reason)
	}
}
