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

// childEnv names, in a child process of a kill test, the test it runs: an engine in its own
// OS process, on the parent's state files and fake Coolify, killed with SIGKILL.
const childEnv = "PHASES_TEST_CHILD"

// apiPipeline is the pipeline prod with the one service api.
func apiPipeline(h *harness) string { return h.pipelineYAML("prod", []string{"api"}, "") }

// runInChild is the child side of a kill test: in the process startChild started for this
// test, it starts an engine on the parent's files with pipeline, submits one run of prod,
// prints its ID and blocks until it is killed. In the parent it returns false at once.
func runInChild(t *testing.T, pipeline func(*harness) string) bool {
	if os.Getenv(childEnv) != t.Name() {
		return false
	}
	h := adoptHarness(t)
	h.start(pipeline(h))
	fmt.Println(h.submit("prod", orchestrator.Trigger{Build: "10", ImageTag: "v5"}))
	<-make(chan struct{})
	return true
}

// startChild runs the current test again in a child process (see runInChild) on h's state
// files and fake Coolify, and returns it with the ID of the run it submitted. The child is
// killed when the test ends, if it is still running.
func startChild(t *testing.T, h *harness) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v=false")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name(), "PHASES_TEST_DIR="+h.dir, "PHASES_TEST_COOLIFY="+h.coolify.URL)
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
	return cmd, id
}

func TestRestartMarksInterrupted(t *testing.T) {
	if runInChild(t, apiPipeline) {
		return
	}
	h := newHarness(t)
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
	cmd, id := startChild(t, h)

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
