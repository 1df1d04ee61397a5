package phases_test

import (
	"context"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Issue 41, item 3: a build more than the pipeline's max_build_ahead ahead of the newest
// build it is known to have (its marks on its services, its runs not ended) is refused at
// submit, naming the build field and the newest build, so a mistaken or hostile build
// cannot leave every later one stale; a rollback, or an admin's allow_build_ahead, passes.
// After the refusal the pipeline's next build deploys as usual.
func TestBuildFarAheadIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		h.start(h.pipelineYAML("prod", []string{"api", "worker"}, "max_build_ahead: 100\n"))
		if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "41", ImageTag: "v41"})); r.Status != runs.StatusSucceeded {
			t.Fatalf("build 41: %s (%s)", r.Status, r.Reason)
		}

		_, _, err := h.engine.Submit(context.Background(), "prod", orchestrator.Trigger{Build: "999999999999999999", ImageTag: "v9"})
		fes := orchestrator.AsFieldErrors(err)
		if len(fes) != 1 || fes[0].Field != "build" || !fes.Refused() {
			t.Fatalf("build 999999999999999999: %v, want one refusal naming build", err)
		}
		for _, want := range []string{"more than 100 ahead", "build 41", "rollback", "allow_build_ahead", "max_build_ahead"} {
			if !strings.Contains(fes[0].Reason, want) {
				t.Errorf("reason %q lacks %q", fes[0].Reason, want)
			}
		}
		if strings.Contains(fes[0].Reason, "999999") {
			t.Errorf("reason %q shows the trigger's build", fes[0].Reason)
		}
		page, err := h.store.List(context.Background(), runs.Filter{Pipeline: "prod", Limit: runs.MaxLimit})
		if err != nil || len(page.Runs) != 1 {
			t.Fatalf("runs of prod: %d (%v), want only build 41's", len(page.Runs), err)
		}

		// The next ordinary build, and one exactly 100 ahead of it, deploy.
		for _, b := range []string{"42", "142"} {
			if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: b, ImageTag: "v" + b})); r.Status != runs.StatusSucceeded {
				t.Errorf("build %s: %s (%s), want succeeded", b, r.Status, r.Reason)
			}
		}
		// A rollback and an admin's allow_build_ahead pass.
		if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "5000", ImageTag: "v50", Rollback: true, Reason: "on purpose"})); r.Status != runs.StatusSucceeded {
			t.Errorf("rollback to build 5000: %s (%s), want succeeded", r.Status, r.Reason)
		}
		if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "90000", ImageTag: "v90", AllowBuildAhead: true})); r.Status != runs.StatusSucceeded {
			t.Errorf("build 90000 allowed by an admin: %s (%s), want succeeded", r.Status, r.Reason)
		}
	})
}

// A pipeline with max_build_ahead: 0 checks nothing.
func TestBuildAheadCheckOff(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, "max_build_ahead: 0\n"))
	h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v1"}))
	if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "20261203052652", ImageTag: "v2"})); r.Status != runs.StatusSucceeded {
		t.Errorf("build 20261203052652: %s (%s), want succeeded", r.Status, r.Reason)
	}
}
