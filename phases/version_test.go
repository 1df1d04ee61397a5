package phases_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A deployment Coolify reports finished counts only once the service shows the version the
// run deployed (health.version). A service that serves the deployed tag passes; one whose
// old container keeps serving (the probe still answers v1) fails the run, naming the version
// seen and wanted, and the release is rolled back. Each way of reading the version: a JSON
// field, a header, the whole body.
func TestVersionProbe(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		serve      func(w http.ResponseWriter, version string)
	}{
		{"json field", `field: build.tag`, func(w http.ResponseWriter, v string) { fmt.Fprintf(w, `{"build":{"tag":%q}}`, v) }},
		{"header", `header: X-Version`, func(w http.ResponseWriter, v string) { w.Header().Set("X-Version", v) }},
		{"body", ``, func(w http.ResponseWriter, v string) { fmt.Fprintf(w, "%s\n", v) }},
	} {
		for _, stuck := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/old container serving %v", tc.name, stuck), func(t *testing.T) {
				h := newHarness(t)
				probe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					version := "v1"
					if app, _ := h.coolify.App(uuidAPI); !stuck {
						version = app.DeployedImageTag
					}
					tc.serve(w, version)
				}))
				t.Cleanup(probe.Close)
				spec := ""
				if tc.spec != "" {
					spec = ", " + tc.spec
				}
				h.start(fmt.Sprintf(`name: prod
coolify: { url: %s, token: %q }
services:
  - name: api
    uuid: %s
    image_tag: "${trigger.image_tag}"
    health: { version: { url: %q, timeout: 300ms%s } }
`, h.coolifyURL, h.coolifyToken, uuidAPI, probe.URL+"/version", spec))
				r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"}))
				if !stuck {
					if r.Status != runs.StatusSucceeded {
						t.Errorf("run %s (%s), want succeeded: the service serves v2", r.Status, r.Reason)
					}
					return
				}
				if r.Status != runs.StatusFailed || !containsAll(r.Reason, `never showed version "v2"`, `"v1"`, "old container") {
					t.Errorf("run %s (%s), want failed naming v2 wanted and v1 seen", r.Status, r.Reason)
				}
				if app, _ := h.coolify.App(uuidAPI); app.ImageTag != "v1" {
					t.Errorf("api carries %s after the failed run, want v1 restored", app.ImageTag)
				}
			})
		}
	}
}

// A deployment that fails is reported as the old container still running (Coolify's
// rolling update keeps it), naming the tag it is still on.
func TestFailedDeploymentSaysWhatStillRuns(t *testing.T) {
	h := newHarness(t)
	h.coolify.SetDeployOutcomes(uuidAPI, coolifytest.Fail, coolifytest.Succeed)
	h.start(h.pipelineYAML("prod", []string{"api"}, "on_failure: halt\n"))
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"}))
	if r.Status != runs.StatusFailed || !strings.Contains(r.Reason, "api is still on tag v1, not down") {
		t.Errorf("run %s (%s), want failed saying api is still on tag v1", r.Status, r.Reason)
	}
}
