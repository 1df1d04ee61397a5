package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

const resolvable = `
coolify: { url: https://coolify.example.com, token: t }
services:
  - uuid: abc123
    image_tag: "v${trigger.build}-${trigger.commit}"
    env:
      - { key: A, value: "${trigger.app_version}" }
      - { key: B, value: "{{project.DB_URL}} $${NOT_A_REF} ${trigger.params.region}" }
      - { key: C, secret: { source: env, key: C } }
    health: { http: { url: "https://h.example/${trigger.params.region}/healthz" } }
mobile:
  - feature: version_state
    flagsmith: { url: https://f.example, api_key: k, environment: e }
    set: { ios.latest_version: "${trigger.app_version}" }
`

func TestResolveFillsTriggerReferences(t *testing.T) {
	p, err := LoadPipelineBytes("r.yaml", []byte(resolvable), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	tr := orchestrator.Trigger{Build: "42", Commit: "abc", AppVersion: "2.3.0", Params: map[string]string{"region": "eu"}}
	r, err := p.Resolve(tr)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	s := r.Services[0]
	if s.ImageTag != "v42-abc" {
		t.Errorf("image tag = %q, want v42-abc", s.ImageTag)
	}
	if got := s.Env[0].Value.Reveal(); got != "2.3.0" {
		t.Errorf("A = %q", got)
	}
	if got, want := s.Env[1].Value.Reveal(), "{{project.DB_URL}} ${NOT_A_REF} eu"; got != want {
		t.Errorf("B = %q, want %q", got, want)
	}
	if got := s.Health.HTTP.URL; got != "https://h.example/eu/healthz" {
		t.Errorf("health url = %q", got)
	}
	if got := r.Mobile[0].Set["ios.latest_version"]; got != "2.3.0" {
		t.Errorf("mobile set = %q", got)
	}
	// The loaded pipeline is untouched, so it can be resolved again for the next run.
	if p.Services[0].ImageTag != "v${trigger.build}-${trigger.commit}" || p.Mobile[0].Set["ios.latest_version"] != "${trigger.app_version}" ||
		p.Services[0].Health.HTTP.URL != "https://h.example/${trigger.params.region}/healthz" {
		t.Errorf("Resolve changed its receiver: %+v", p.Services[0])
	}
	r2, err := p.Resolve(orchestrator.Trigger{Build: "43", Commit: "def", AppVersion: "2.4.0", Params: map[string]string{"region": "us"}})
	if err != nil || r2.Services[0].ImageTag != "v43-def" || r.Services[0].ImageTag != "v42-abc" {
		t.Errorf("second resolve: %v %+v", err, r2)
	}
}

func TestResolveMissingValues(t *testing.T) {
	p, err := LoadPipelineBytes("r.yaml", []byte(resolvable), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	_, err = p.Resolve(orchestrator.Trigger{Build: "42"})
	ps := mustProblems(t, err)
	// Each trigger field the pipeline needs is one problem, on the first place that needs it,
	// naming the others (a front door lists each field once).
	wantProblem(t, ps, "services[0].image_tag", "no commit")
	wantProblem(t, ps, "services[0].env[0].value", "no app_version (referenced as \"${trigger.app_version}\"); also needed by mobile[0].set.ios.latest_version")
	wantProblem(t, ps, "services[0].env[1].value", `no param "region" (referenced as "${trigger.params.region}"); also needed by services[0].health.http.url`)
	if len(ps) != 3 {
		t.Errorf("got %d problems, want 3, one per missing trigger value:\n%s", len(ps), strings.Join(ps.Lines(), "\n"))
	}
	for _, pr := range ps {
		if pr.File != "r.yaml" {
			t.Errorf("problem %q: file %q, want r.yaml", pr, pr.File)
		}
	}
}

func TestResolveChecksTheResolvedTag(t *testing.T) {
	p, err := LoadPipelineBytes("r.yaml", []byte(strings.Replace(minimal, "${trigger.image_tag}", "${trigger.params.tag}", 1)), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	for _, bad := range []string{"has space", ".dot-first", strings.Repeat("x", 129), "a/b"} {
		_, err := p.Resolve(orchestrator.Trigger{Params: map[string]string{"tag": bad}})
		wantProblem(t, mustProblems(t, err), "services[0].image_tag", "invalid image tag")
	}
	if _, err := p.Resolve(orchestrator.Trigger{Params: map[string]string{"tag": "sha-0123abc_v1.2"}}); err != nil {
		t.Errorf("valid tag refused: %v", err)
	}
}

func TestResolveKeepsEnvironmentValuesLiteral(t *testing.T) {
	yaml := strings.Replace(minimal, "value: info", `value: "${TRICKY}-${trigger.build}"`, 1)
	env := func(k string) string {
		if k == "TRICKY" {
			return "a${trigger.commit}b$${c}"
		}
		return testEnv()(k)
	}
	p, err := LoadPipelineBytes("p.yaml", []byte(yaml), env)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	r, err := p.Resolve(orchestrator.Trigger{Build: "9", ImageTag: "v9"})
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if got, want := r.Services[0].Env[0].Value.Reveal(), "a${trigger.commit}b$${c}-9"; got != want {
		t.Errorf("value = %q, want %q (the environment's text kept as is)", got, want)
	}
}

func TestResolveRefusesForeignReferences(t *testing.T) {
	// A pipeline built in code may hold anything; only trigger references resolve.
	p := &Pipeline{File: "code", Services: []Service{{UUID: "a", ImageTag: "${build}", Env: []EnvVar{{Key: "K", Value: "${HOME}"}}}}}
	_, err := p.Resolve(orchestrator.Trigger{Build: "1"})
	ps := mustProblems(t, err)
	wantProblem(t, ps, "services[0].image_tag", "unknown reference")
	wantProblem(t, ps, "services[0].env[0].value", "unknown reference")
	if len(ps) != 2 {
		t.Errorf("got %d problems, want one per field:\n%v", len(ps), ps)
	}
}

// Issue 10, item 10: everything a run needs from its trigger is checked by Resolve, every
// problem at once; an app_version the mobile step could not compare is refused here, not
// after both phases deployed.
func TestResolveReportsEveryTriggerProblemAtOnce(t *testing.T) {
	yaml := strings.Replace(resolvable, "set: { ios.latest_version:", "never_downgrade: true\n    set: { android.latest_version: \"${trigger.params.android}\", ios.latest_version:", 1)
	p, err := LoadPipelineBytes("r.yaml", []byte(yaml), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	for _, v := range []string{"2.4.0", "v2.10", "2.4.0-beta.1+build.7"} {
		if _, err := p.Resolve(orchestrator.Trigger{Build: "42", Commit: "abc", AppVersion: v, Params: map[string]string{"region": "eu", "android": "2.4.0"}}); err != nil {
			t.Errorf("app_version %q refused: %v", v, err)
		}
	}
	_, err = p.Resolve(orchestrator.Trigger{Build: "4/2", Commit: "abc", AppVersion: "<b>1</b>", Params: map[string]string{"android": "latest"}})
	ps := mustProblems(t, err)
	for _, f := range []string{"build", "app_version", "services[0].env[1].value", "mobile[0].set.android.latest_version"} {
		wantProblem(t, ps, f, "")
	}
	for _, pr := range ps {
		if strings.Contains(pr.Message, "<b>") || strings.Contains(pr.Message, "latest\"") {
			t.Errorf("a problem shows the trigger's value: %v", pr)
		}
	}
	// Without never_downgrade the version rule still holds for app_version itself.
	if err := (orchestrator.Trigger{AppVersion: "1.0-<b>"}).Validate(); err == nil {
		t.Error("app_version 1.0-<b> accepted")
	}
}

// TestResolveNamesEachTriggerFieldOnce: the demo pipeline, asked to run with an empty
// trigger, names each trigger field it needs once (image_tag, build and app_version are each
// referenced twice), as the API's error.problems lists them.
func TestResolveNamesEachTriggerFieldOnce(t *testing.T) {
	p, err := LoadPipelineFile(filepath.Join(samplePipelines, "demo.yaml"), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	_, err = p.Resolve(orchestrator.Trigger{})
	var fes orchestrator.FieldErrors
	if !errors.As(err, &fes) {
		t.Fatalf("resolve: %v, want field errors", err)
	}
	var fields []string
	for _, fe := range fes {
		if slices.Contains(fields, fe.Field) {
			t.Errorf("%s named twice:\n%v", fe.Field, err)
		}
		fields = append(fields, fe.Field)
	}
	slices.Sort(fields)
	if want := []string{"app_version", "build", "commit", "image_tag"}; !slices.Equal(fields, want) {
		t.Errorf("fields %v, want %v", fields, want)
	}
}
