package config

import (
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

// sharedRefPipeline is a public web app whose build-time env takes trigger params.
const sharedRefPipeline = `
coolify: { url: https://coolify.example.com, token: t }
services:
  - uuid: web123
    image_tag: "${trigger.image_tag}"
    env:
      - { key: NEXT_PUBLIC_NOTE, value: "${trigger.params.note}", is_buildtime: true }
      - { key: NEXT_PUBLIC_PAIR, value: "${trigger.params.a}${trigger.params.b}" }
      - { key: DATABASE_URL, value: "{{project.DB_URL}}?app=${trigger.params.app}" }
`

// Issue 41, item 2: Coolify replaces {{team.X}}, {{project.X}} and {{environment.X}} in an
// env value with the shared variable when it builds. A trigger value that would reach
// Coolify as such a reference, alone or with the file's text around it, is refused, naming
// the trigger's field, as a refusal (422), not as a malformed request.
func TestResolveRefusesSharedVariableReferencesFromTheTrigger(t *testing.T) {
	p, err := LoadPipelineBytes("web.yaml", []byte(sharedRefPipeline), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	ok := map[string]string{"note": "hello {world}", "a": "x", "b": "y", "app": "web"}
	// The file's own {{project.DB_URL}} and {{team. are the operator's and pass through.
	r, err := p.Resolve(orchestrator.Trigger{ImageTag: "v1", Params: ok})
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if got := r.Services[0].Env[2].Value.Reveal(); got != "{{project.DB_URL}}?app=web" {
		t.Errorf("DATABASE_URL = %q, want the file's reference kept", got)
	}
	for _, tc := range []struct {
		name, param, value string
	}{
		{"a team secret", "note", "{{team.PROD_DB_PASSWORD}}"},
		{"inside text", "note", "see {{environment.STRIPE_SECRET}} here"},
		{"spaced and upper case", "note", "{{ TEAM . PROD_DB_PASSWORD }}"},
		{"two params that make one", "a", "{{project."},
		{"beside the file's own reference", "app", "x{{team.PROD_DB_PASSWORD}}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := withParams(ok, tc.param, tc.value)
			if tc.param == "a" {
				params["b"] = "DB_PASSWORD}}"
			}
			_, err := p.Resolve(orchestrator.Trigger{ImageTag: "v1", Params: params})
			ps := mustProblems(t, err)
			var pr Problem
			found := false
			for _, x := range ps {
				if x.Trigger == "params."+tc.param {
					pr, found = x, true
				}
			}
			if !found {
				t.Fatalf("no problem names params.%s; got:\n%s", tc.param, strings.Join(ps.Lines(), "\n"))
			}
			if !pr.Refused || !strings.Contains(pr.Message, "shared") || !strings.Contains(pr.Message, "allow_shared_refs_from_trigger") {
				t.Errorf("problem %+v: want a refusal naming shared variables and allow_shared_refs_from_trigger", pr)
			}
			if strings.Contains(pr.Message, "PROD_DB_PASSWORD") || strings.Contains(pr.Message, "STRIPE") {
				t.Errorf("problem %q shows the trigger's value", pr.Message)
			}
			fes := orchestrator.AsFieldErrors(err)
			if len(fes) == 0 || !fes.Refused() {
				t.Errorf("field errors %v: want refusals only (a 422)", fes)
			}
		})
	}
	// A file that lets the trigger name the variable of its own reference is refused whatever
	// the name.
	y := strings.Replace(sharedRefPipeline, `value: "${trigger.params.note}"`, `value: "{{team.${trigger.params.note}}}"`, 1)
	q, err := LoadPipelineBytes("web.yaml", []byte(y), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	_, err = q.Resolve(orchestrator.Trigger{ImageTag: "v1", Params: withParams(ok, "note", "PUBLIC_LABEL")})
	wantProblem(t, mustProblems(t, err), "services[0].env[0].value", "shared")

	// Values that form no reference pass.
	for _, v := range []string{"{{", "}}", "{{team}}", "{{teams.X}}", "{ {team.X} }"} {
		if _, err := p.Resolve(orchestrator.Trigger{ImageTag: "v1", Params: withParams(ok, "note", v)}); err != nil {
			t.Errorf("note %q: %v, want it passed", v, err)
		}
	}
}

// The opt-in: an env entry with allow_shared_refs_from_trigger: true takes a trigger's
// reference as written, for that variable only.
func TestSharedVariableReferencesFromTheTriggerOptIn(t *testing.T) {
	y := strings.Replace(sharedRefPipeline, `value: "${trigger.params.note}", is_buildtime: true`,
		`value: "${trigger.params.note}", is_buildtime: true, allow_shared_refs_from_trigger: true`, 1)
	p, err := LoadPipelineBytes("web.yaml", []byte(y), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	params := map[string]string{"note": "{{environment.PUBLIC_NOTE}}", "a": "x", "b": "y", "app": "web"}
	r, err := p.Resolve(orchestrator.Trigger{ImageTag: "v1", Params: params})
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if got := r.Services[0].Env[0].Value.Reveal(); got != "{{environment.PUBLIC_NOTE}}" {
		t.Errorf("NEXT_PUBLIC_NOTE = %q, want the reference as sent", got)
	}
	// The other variables still refuse one.
	params["app"] = "{{team.PROD_DB_PASSWORD}}"
	_, err = p.Resolve(orchestrator.Trigger{ImageTag: "v1", Params: params})
	wantProblem(t, mustProblems(t, err), "services[0].env[2].value", "shared")
}

// withParams returns a copy of params with key set to v ("" removes it).
func withParams(params map[string]string, key, v string) map[string]string {
	out := map[string]string{}
	for k, x := range params {
		out[k] = x
	}
	if v == "" {
		delete(out, key)
	} else {
		out[key] = v
	}
	return out
}
