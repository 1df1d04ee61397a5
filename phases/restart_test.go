package phases_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
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
		id := h.submit("prod", orchestrator.Trigger{Build: "10", ImageTag: "v5"})
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
	if r.Status != runs.StatusInterrupted || len(r.HeldLocks) != 0 {
		t.Errorf("after restart: status %s, held %v; want interrupted, none held", r.Status, r.HeldLocks)
	}
	var interrupted, canceled *runs.Event
	for _, ev := range h.events(id) {
		switch ev.Type {
		case runs.EventRunInterrupted:
			interrupted = &ev
		case runs.EventDeployCanceled:
			canceled = &ev
		}
	}
	if interrupted == nil || !slices.Contains(strings.Split(interrupted.Data[runs.DataHeldLocks], ","), "coolify:"+uuidAPI) {
		t.Errorf("run.interrupted event %+v, want it to name the released coolify:%s", interrupted, uuidAPI)
	}
	// The hung deployment the dead life started was canceled before its lease was released.
	deps := h.coolify.Deployments(uuidAPI)
	if canceled == nil || len(deps) != 1 || deps[0].Status != "cancelled-by-user" || canceled.Data["deployment_uuid"] != deps[0].UUID {
		t.Errorf("deploy.canceled event %+v, deployments %+v; want the hung deployment canceled", canceled, deps)
	}
	if want := []runs.Left{{Service: "api", UUID: uuidAPI, State: runs.LeftDeployCanceled}}; len(r.Left) != 1 || r.Left[0].Service != "api" || r.Left[0].State != runs.LeftDeployCanceled {
		t.Errorf("left = %+v, want %+v", r.Left, want)
	}
	for _, s := range r.Steps {
		if !s.Status.Done() || (s.Phase == runs.Phase2 && s.Status != runs.StepInterrupted) {
			t.Errorf("step %s/%s is %s after the takeover", s.Phase, s.Name, s.Status)
		}
	}
	if _, err := h.locker.Get(context.Background(), "coolify:"+uuidAPI); !errors.Is(err, locks.ErrNotFound) {
		t.Errorf("leftover service lease: %v, want released at start", err)
	}
	// A new run completes on the same service.
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Succeed)
	if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "11", ImageTag: "v6"})); r.Status != runs.StatusSucceeded {
		t.Errorf("run after restart: %s (%s)", r.Status, r.Reason)
	}
}
