package api_test

import (
	"encoding/json"
	"strconv"
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

// Issue 41, item 3: a signed delivery whose build is past the documented bound
// (orchestrator.MaxBuildNumber) starts nothing, so it cannot leave every later build of the
// pipeline stale: 422 naming the rule's build field, as a string or as a JSON number.
func TestWebhookBuildPastTheBoundRefused(t *testing.T) {
	f := newFixture(t)
	for i, build := range []string{`"99999999999999999999999999"`, `99999999999999999999999999`} {
		body := []byte(`{"event":"build.succeeded","repository":"acme/x","build":` + build + `}`)
		rec := f.serve(delivery("generic", "", "b-"+strconv.Itoa(i), body, genericSecret))
		wantError(t, rec, 422, "webhooks rules[0].trigger.build")
		if strings.Contains(rec.Body.String(), "99999999999999999999999999") {
			t.Errorf("the answer echoes the build: %s", rec.Body)
		}
	}
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}
	// At the bound it runs.
	body := []byte(`{"event":"build.succeeded","repository":"acme/x","build":"999999999999999999"}`)
	if rec := f.serve(delivery("generic", "", "b-ok", body, genericSecret)); rec.Code != 202 {
		t.Fatalf("build at the bound: status %d, want 202: %s", rec.Code, rec.Body)
	}
}

// Issue 41, item 3: only the admin token may let a build further ahead than the pipeline's
// max_build_ahead through (allow_build_ahead); the trigger token asking for it is refused
// with 403 naming the field, and starts nothing.
func TestAllowBuildAheadNeedsTheAdminToken(t *testing.T) {
	f := newFixture(t)
	body := map[string]any{"build": "5000", "image_tag": "v1", "allow_build_ahead": true}
	rec := f.do("POST", "/v1/pipelines/demo/runs", triggerToken, body)
	e := wantError(t, rec, 403, "allow_build_ahead")
	if !strings.Contains(e.Error.Message, "needs the admin role") {
		t.Errorf("message %q does not name the admin role", e.Error.Message)
	}
	if n := f.runCount(); n != 0 {
		t.Fatalf("runs: got %d, want 0", n)
	}
	rec = f.do("POST", "/v1/pipelines/demo/runs", adminToken, body)
	if rec.Code != 202 {
		t.Fatalf("admin: status %d, want 202: %s", rec.Code, rec.Body)
	}
	var got struct {
		Run struct {
			Trigger struct {
				AllowBuildAhead bool   `json:"allow_build_ahead"`
				By              string `json:"by"`
			} `json:"trigger"`
		} `json:"run"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if !got.Run.Trigger.AllowBuildAhead || got.Run.Trigger.By != "api:admin" {
		t.Errorf("run's trigger %+v, want allow_build_ahead by api:admin", got.Run.Trigger)
	}
}
