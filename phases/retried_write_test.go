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
