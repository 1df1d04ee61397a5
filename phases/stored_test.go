package phases_test

import (
	"fmt"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Coolify stores what it is sent trimmed, and an empty value as null, which it lists as
// "value": null (coolify.Stored). A secret ending in a newline, a value with spaces around it
// and an empty value sync and verify, and the next run finds nothing to write.
func TestValuesCoolifyTrimsSyncOnceAndStay(t *testing.T) {
	h := newHarness(t)
	h.env["ORCH_SECRET_PEM"] = "-----BEGIN KEY-----\nabc\n-----END KEY-----\n"
	h.start(fmt.Sprintf(`name: prod
coolify:
  url: %s
  token: %q
services:
  - name: api
    uuid: %s
    env:
      - key: PEM
        secret: { source: env, key: PEM }
      - key: PADDED
        value: "  padded  "
        comment: " why "
      - key: EMPTY
        value: ""
    deploy_timeout: 5s
`, h.coolifyURL, h.coolifyToken, uuidAPI))
	for i, want := range []int{3, 0} {
		r := h.wait(h.submit("prod", orchestrator.Trigger{Build: fmt.Sprint(i + 1), By: "test"}))
		if r.Status != runs.StatusSucceeded {
			t.Fatalf("run %d: %s: %s", i+1, r.Status, r.Reason)
		}
		if got := stepOf(t, r, runs.Phase1, "api").Changes.Env; len(got) != want {
			t.Errorf("run %d wrote %d env vars (%v), want %d", i+1, len(got), got, want)
		}
	}
	for key, want := range map[string]string{"PEM": "-----BEGIN KEY-----\nabc\n-----END KEY-----", "PADDED": "padded", "EMPTY": ""} {
		if v, ok := h.coolify.EnvValue(uuidAPI, key, false); !ok || v != want {
			t.Errorf("%s in Coolify: %q (found %v), want %q", key, v, ok, want)
		}
	}
}
