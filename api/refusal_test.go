package api_test

import (
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
)

// webPipeline is a public web app whose build-time env takes a trigger param.
const webPipeline = `
name: web
coolify: { url: https://coolify.example.com, token: t }
services:
  - uuid: web123
    image_tag: "${trigger.image_tag}"
    env:
      - { key: NEXT_PUBLIC_NOTE, value: "${trigger.params.note}", is_buildtime: true }
`

// Issue 41, item 2: a trigger param that would reach Coolify as a shared-variable reference
// ({{team.PROD_DB_PASSWORD}} in a public app's build-time env) is refused with 422, naming
// the param, and starts no run; the answer does not echo the value.
func TestTriggerSharedVariableReferenceRefused(t *testing.T) {
	f := newFixture(t)
	p, err := config.LoadPipelineBytes("web.yaml", []byte(webPipeline), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	f.engine.pipelines["web"] = []string{"web"}
	f.engine.resolvers = map[string]*config.Pipeline{"web": p}

	rec := f.do("POST", "/v1/pipelines/web/runs", triggerToken, map[string]any{
		"image_tag": "v1", "params": map[string]string{"note": "{{team.PROD_DB_PASSWORD}}"},
	})
	e := wantError(t, rec, 422, "params.note")
	if e.Error.Code != "refused" {
		t.Errorf("code %q, want refused", e.Error.Code)
	}
	if strings.Contains(rec.Body.String(), "PROD_DB_PASSWORD") {
		t.Errorf("the answer echoes the value: %s", rec.Body)
	}
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}
	// A malformed trigger is still a 400, with the refusal among its problems.
	rec = f.do("POST", "/v1/pipelines/web/runs", triggerToken, map[string]any{
		"image_tag": "-bad", "params": map[string]string{"note": "{{team.PROD_DB_PASSWORD}}"},
	})
	wantError(t, rec, 400, "image_tag")
	// An ordinary note starts the run.
	rec = f.do("POST", "/v1/pipelines/web/runs", triggerToken, map[string]any{"image_tag": "v1", "params": map[string]string{"note": "hello"}})
	if rec.Code != 202 {
		t.Fatalf("status %d, want 202: %s", rec.Code, rec.Body)
	}
}
