package phases_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A write whose first attempt reached Coolify but lost its answer (the connection dropped
// after the change was made) and whose retry was turned away with a 429 beyond the client's
// MaxRetryAfter ends on that 429. The 429 proves only that the retry was not acted on, not
// the first attempt: the image tag is this run's, so the Phase-1 failure must put it back.
func TestRetriedWriteEndingOn429IsStillRestored(t *testing.T) {
	h := newHarness(t)
	h.start(h.onePipeline(uuidAPI, "      - { key: LOG_LEVEL, value: info }\n", false, ""))
	h.coolify.FailNext(1, coolifytest.Fault{Method: "PATCH", Route: "/applications/{uuid}", Status: coolifytest.DropConnection, AfterEffect: true})
	h.coolify.FailNext(1, coolifytest.Fault{Method: "PATCH", Route: "/applications/{uuid}", Status: http.StatusTooManyRequests,
		Message: "Too Many Attempts.", RetryAfter: time.Minute})
	id := h.submit("prod", orchestrator.Trigger{ImageTag: "v2"})
	r := h.wait(id)
	if r.Status != runs.StatusFailed {
		t.Fatalf("status = %s, want failed", r.Status)
	}
	if a, _ := h.coolify.App(uuidAPI); a.ImageTag != "v1" {
		var msgs []string
		for _, e := range h.events(id) {
			if e.Type == runs.EventServiceRestored || e.Type == runs.EventServiceFailed {
				msgs = append(msgs, string(e.Type)+": "+e.Message)
			}
		}
		t.Errorf("image tag left at %q after the failed run, want v1 put back; run said: %s",
			a.ImageTag, strings.Join(msgs, " | "))
	}
	if s := stepOf(t, r, runs.Phase1, "app"); !strings.Contains(s.Error, "an earlier attempt may have taken effect") {
		t.Errorf("step error %q does not say the tag write may have taken effect", s.Error)
	}
	if v, _ := h.coolify.EnvValue(uuidAPI, "LOG_LEVEL", false); v != "debug" {
		t.Errorf("LOG_LEVEL = %q, want debug restored", v)
	}
}

// Coolify queues the deployment but its answer to POST /deploy is lost (a 500 after the
// change was made): the deploy is not sent again blindly; the engine reads the application's
// deployments, finds the one it started, and follows it like any other. The run succeeds with
// one deployment, recorded on its step.
func TestDeployOfUnknownOutcomeIsFoundByReading(t *testing.T) {
	h := newHarness(t)
	h.start(h.onePipeline(uuidAPI, "      - { key: LOG_LEVEL, value: info }\n", false, ""))
	h.coolify.FailNext(1, coolifytest.Fault{Method: "POST", Route: "/deploy", Status: http.StatusInternalServerError, AfterEffect: true})
	r := h.wait(h.submit("prod", orchestrator.Trigger{ImageTag: "v2"}))
	deps := h.coolify.Deployments(uuidAPI)
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s (%s), want succeeded: its deployment was queued", r.Status, r.Reason)
	}
	if len(deps) != 1 || deps[0].Status != "finished" || stepOf(t, r, runs.Phase2, "app").DeploymentUUID != deps[0].UUID {
		t.Errorf("deployments %d, step %+v; want the one deployment, finished and recorded", len(deps), stepOf(t, r, runs.Phase2, "app"))
	}
}

// The same 500 when Coolify did not queue anything: the engine reads the application's
// deployments, finds none queued, running or created since its request, and only then asks
// again; the run succeeds with the one deployment of the second request.
func TestDeployOfUnknownOutcomeNotQueuedIsAskedAgain(t *testing.T) {
	h := newHarness(t)
	h.start(h.onePipeline(uuidAPI, "      - { key: LOG_LEVEL, value: info }\n", false, "on_failure: halt\n"))
	h.coolify.FailNext(1, coolifytest.Fault{Method: "POST", Route: "/deploy", Status: http.StatusInternalServerError})
	r := h.wait(h.submit("prod", orchestrator.Trigger{ImageTag: "v2"}))
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s (%s), want succeeded after asking again", r.Status, r.Reason)
	}
	deploys := h.coolify.RequestsTo("POST /deploy")
	if len(deploys) != 2 {
		t.Fatalf("POST /deploy sent %d times, want twice (the second after reading that the first queued nothing)", len(deploys))
	}
	var read bool
	for _, q := range h.coolify.Requests() {
		if q.Method == http.MethodGet && strings.HasPrefix(q.Route, "GET /deployments") && q.Start.After(deploys[0].End) && q.Start.Before(deploys[1].Start) {
			read = true
		}
	}
	if !read {
		t.Error("the second deploy was sent without reading the application's deployments after the first")
	}
	if deps := h.coolify.Deployments(uuidAPI); len(deps) != 1 || stepOf(t, r, runs.Phase2, "app").DeploymentUUID != deps[0].UUID {
		t.Errorf("%d deployments, step %+v; want one, recorded", len(deps), stepOf(t, r, runs.Phase2, "app"))
	}
}

// A deploy whose answer was lost (the connection dropped after Coolify queued it) and whose
// deployment ended before the engine read: not running any more, it is found among the
// application's deployments as the one created since the request, and followed to its end.
// One deployment, not two.
func TestDeployOfUnknownOutcomeThatEndedIsAdopted(t *testing.T) {
	h := newHarness(t)
	h.start(h.onePipeline(uuidAPI, "      - { key: LOG_LEVEL, value: info }\n", false, "on_failure: halt\n"))
	// The deployment ends before the engine's first read of the active ones: that read is
	// delayed past the fake's 60 ms deployment.
	h.coolify.SetRouteLatency("GET", "/deployments/applications/{uuid}", 150*time.Millisecond, 150*time.Millisecond)
	h.coolify.FailNext(1, coolifytest.Fault{Method: "POST", Route: "/deploy", Status: coolifytest.DropConnection, AfterEffect: true})
	r := h.wait(h.submit("prod", orchestrator.Trigger{ImageTag: "v2"}))
	deps := h.coolify.Deployments(uuidAPI)
	if r.Status != runs.StatusSucceeded || len(deps) != 1 || len(h.coolify.RequestsTo("POST /deploy")) != 1 {
		t.Fatalf("run %s (%s) with %d deployments from %d deploys; want succeeded, one of each", r.Status, r.Reason, len(deps), len(h.coolify.RequestsTo("POST /deploy")))
	}
	if stepOf(t, r, runs.Phase2, "app").DeploymentUUID != deps[0].UUID {
		t.Errorf("step %+v, want deployment %s recorded", stepOf(t, r, runs.Phase2, "app"), deps[0].UUID)
	}
}

// Coolify queues the deployment and answers with its UUID, but every try of the deploy's
// confirming read of it fails (500): the deployment is this run's all the same, and the run
// follows it instead of failing with it left running unwatched.
func TestDeployQueuedButNotConfirmedIsFollowed(t *testing.T) {
	h := newHarness(t)
	h.start(h.onePipeline(uuidAPI, "      - { key: LOG_LEVEL, value: info }\n", false, "on_failure: halt\n"))
	// The guard's reads use other routes: the first reads of /deployments/{uuid} are the
	// confirmation's (the client tries 4 times).
	h.coolify.FailNext(4, coolifytest.Fault{Method: "GET", Route: "/deployments/{uuid}", Status: http.StatusInternalServerError})
	r := h.wait(h.submit("prod", orchestrator.Trigger{ImageTag: "v2"}))
	deps := h.coolify.Deployments(uuidAPI)
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s (%s), want succeeded: its deployment was queued", r.Status, r.Reason)
	}
	if len(deps) != 1 || stepOf(t, r, runs.Phase2, "app").DeploymentUUID != deps[0].UUID {
		t.Errorf("%d deployments, step %+v; want one, recorded on the step", len(deps), stepOf(t, r, runs.Phase2, "app"))
	}
}
