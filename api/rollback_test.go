package api_test

import (
	"net/http"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A trigger body may ask for a rollback, with a reason; the run records both, and who asked.
// A reason that is not text is refused, naming the field (a reason goes with any trigger:
// TestAPITriggerOrigin).
func TestTriggerRollback(t *testing.T) {
	f := newFixture(t)
	rec := f.do("POST", "/v1/pipelines/demo/runs", triggerToken,
		map[string]any{"build": "41", "image_tag": "v41", "rollback": true, "reason": "v42 breaks checkout"})
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status: got %d, want 202: %s", rec.Code, rec.Body)
	}
	got := decodeJSON[struct{ Run runs.Run }](t, rec)
	if tr := got.Run.Trigger; !tr.Rollback || tr.Reason != "v42 breaks checkout" || tr.By != "api:trigger" {
		t.Errorf("trigger: got %+v, want a rollback by api:trigger with its reason", tr)
	}
	wantError(t, f.do("POST", "/v1/pipelines/demo/runs", triggerToken,
		map[string]any{"build": "41", "image_tag": "v41", "rollback": true, "reason": "bad\x00reason"}), 400, "reason")
}

// A webhook rule with rollback: true starts rollbacks, saying which rule.
func TestWebhookRuleRollback(t *testing.T) {
	f := newFixture(t, func(d *config.Daemon) { d.Webhooks.Generic.Rules[0].Rollback = true })
	a := wantHook(t, f, delivery("generic", "", "gen-rb", payload(t, "generic.json"), genericSecret), 202, "triggered")
	if tr := a.Run.Trigger; !tr.Rollback || tr.Reason != "webhook rule rules[0] deploys rollbacks" || tr.By != "webhook:generic:gen-rb" {
		t.Errorf("trigger: got %+v, want a rollback by the delivery naming its rule", tr)
	}
}
