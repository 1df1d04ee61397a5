package phases_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// childEnv marks the child process of TestRestartMarksInterrupted: an engine in its own OS
// process, on the parent's state files and fake Coolify, killed with SIGKILL mid-deploy.
const childEnv = "PHASES_TEST_CHILD"

func TestRestartMarksInterrupted(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		// The child: an engine on the parent's files that submits one run, then blocks
		// until it is killed.
		h := adoptHarness(t)
		h.start(h.pipelineYAML("prod", []string{"api"}, ""))
		id := h.submit("prod", runs.Trigger{Build: "10", ImageTag: "v5"})
		fmt.Println(id)
		<-make(chan struct{})
		return
	}
	h := newHarness(t)
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestartMarksInterrupted$", "-test.v=false")
	cmd.Env = append(os.Environ(), childEnv+"=1", "PHASES_TEST_DIR="+h.dir, "PHASES_TEST_COOLIFY="+h.coolify.URL)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var id string
	if _, err := fmt.Fscanln(out, &id); err != nil {
		t.Fatalf("child did not print its run ID: %v", err)
	}

	// Kill the child once its run deploys, holding the service lock.
	h.waitEvent(id, runs.EventDeployStarted, "api")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	r, err := h.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != runs.StatusInterrupted || !slices.Contains(r.HeldLocks, "coolify:"+uuidAPI) {
		t.Errorf("after restart: status %s, held %v; want interrupted naming coolify:%s", r.Status, r.HeldLocks, uuidAPI)
	}
	if _, err := h.locker.Get(context.Background(), "coolify:"+uuidAPI); !errors.Is(err, locks.ErrNotFound) {
		t.Errorf("leftover service lease: %v, want released at start", err)
	}
	// A new run completes on the same service.
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Succeed)
	if r := h.wait(h.submit("prod", runs.Trigger{Build: "11", ImageTag: "v6"})); r.Status != runs.StatusSucceeded {
		t.Errorf("run after restart: %s (%s)", r.Status, r.Reason)
	}
}
