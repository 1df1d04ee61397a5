package config

import (
	"strings"
	"testing"
	"time"
)

func TestLoadPipelineMinimalDefaults(t *testing.T) {
	p, err := LoadPipelineBytes("pipes/prod.yaml", []byte(minimal), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if p.Name != "prod" {
		t.Errorf("name = %q, want prod (from the file name)", p.Name)
	}
	if got := p.Coolify.Token.Reveal(); got != sentinel+"-COOLIFY_TOKEN" {
		t.Errorf("token = %q, want the environment's value", got)
	}
	s := p.Services[0]
	if s.Kind != KindApplication || s.DeployTimeout != DefaultDeployTimeout {
		t.Errorf("service defaults: kind %q timeout %s", s.Kind, s.DeployTimeout)
	}
	e := s.Env[0]
	if e.IsBuildtime != nil || e.IsRuntime != nil || e.IsLiteral != nil || e.IsMultiline != nil || e.IsShownOnce != nil || e.Comment != nil {
		t.Errorf("env flags = %+v, want none set (an entry that does not mention a flag keeps Coolify's)", e)
	}
	if p.Locks.TTL != 10*time.Minute || p.Locks.Phase.Timeout != time.Minute || p.Locks.Phase.MaxRetries != 3 ||
		p.Locks.Service.Timeout != 30*time.Second || p.Locks.Service.MaxRetries != 2 || len(p.Locks.Service.Backoff) != 3 {
		t.Errorf("lock defaults = %+v", p.Locks)
	}
	if p.Locks.OnFrozen != OnFrozenWait || p.OnFailure != OnFailureRollback || p.Concurrency != ConcurrencyQueue {
		t.Errorf("policy defaults: %q %q %q", p.Locks.OnFrozen, p.OnFailure, p.Concurrency)
	}
	if got, want := strings.Join(p.LockKeys(), " "), "coolify:phase1 coolify:phase2 coolify:abc123"; got != want {
		t.Errorf("lock keys = %q, want %q", got, want)
	}
}

func TestLoadPipelineEnvFlagsAsWritten(t *testing.T) {
	yaml := strings.Replace(minimal, "value: info }", "value: info, is_buildtime: false, is_literal: \"true\", comment: \"\" }", 1)
	p, err := LoadPipelineBytes("p.yaml", []byte(yaml), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	e := p.Services[0].Env[0]
	if e.IsBuildtime == nil || *e.IsBuildtime || e.IsLiteral == nil || !*e.IsLiteral {
		t.Errorf("is_buildtime %v is_literal %v, want false and true", e.IsBuildtime, e.IsLiteral)
	}
	if e.IsRuntime != nil || e.IsMultiline != nil || e.IsShownOnce != nil {
		t.Errorf("flags the entry leaves out: runtime %v multiline %v shown_once %v, want nil", e.IsRuntime, e.IsMultiline, e.IsShownOnce)
	}
	if e.Comment == nil || *e.Comment != "" {
		t.Errorf("comment %v, want an explicit empty comment", e.Comment)
	}
	long := strings.Replace(minimal, "value: info }", "value: info, comment: "+strings.Repeat("x", 257)+" }", 1)
	if _, err := LoadPipelineBytes("p.yaml", []byte(long), testEnv()); err == nil || !strings.Contains(err.Error(), "services[0].env[0].comment") {
		t.Errorf("comment of 257 characters: got %v, want an error naming the field", err)
	}
}

func TestLoadPipelineExplicitZeroRetries(t *testing.T) {
	p, err := LoadPipelineBytes("p.yaml", []byte(minimal+"locks: { service: { max_retries: 0 } }\n"), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if p.Locks.Service.MaxRetries != 0 || p.Locks.Phase.MaxRetries != 3 {
		t.Errorf("max_retries service %d phase %d, want 0 and 3", p.Locks.Service.MaxRetries, p.Locks.Phase.MaxRetries)
	}
}

func TestLoadPipelineProblems(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		env   func(string) string
		field string
		want  string
	}{
		{"unknown top-level field", minimal + "colify: {}\n", nil, "colify", "unknown field"},
		{"unknown nested field", strings.Replace(minimal, "uuid: abc123", "uuid: abc123\n    uid: x", 1), nil, "services[0].uid", "unknown field"},
		{"unknown env field", strings.Replace(minimal, "value: info", "value: info, is_build_time: true", 1), nil, "services[0].env[0].is_build_time", "known here:"},
		{"duplicate uuid", minimal + "  - { name: api2, uuid: abc123 }\n", nil, "services[1].uuid", "duplicate service UUID"},
		{"duplicate name", minimal + "  - { name: api, uuid: def456 }\n", nil, "services[1].name", "duplicate service name"},
		{"bad duration", minimal + "locks: { ttl: 10 minutes }\n", nil, "locks.ttl", "invalid duration"},
		{"duration without unit", minimal + "locks: { phase: { timeout: 30 } }\n", nil, "locks.phase.timeout", "needs a unit"},
		{"negative duration", strings.Replace(minimal, "uuid: abc123", "uuid: abc123\n    deploy_timeout: -1m", 1), nil, "services[0].deploy_timeout", "positive"},
		{"bad on_failure", minimal + "on_failure: retry\n", nil, "on_failure", `"retry" is not one of: rollback, rollback-failed, halt`},
		{"bad concurrency", minimal + "concurrency: parallel\n", nil, "concurrency", "not one of"},
		{"bad order", minimal + "order: newest\n", nil, "order", `"newest" is not one of: build, created, none`},
		{"bad kind", strings.Replace(minimal, "uuid: abc123", "uuid: abc123\n    kind: database", 1), nil, "services[0].kind", "not one of"},
		{"bad on_frozen", minimal + "locks: { on_frozen: ignore }\n", nil, "locks.on_frozen", "not one of"},
		{"bad image tag", strings.Replace(minimal, `"${trigger.image_tag}"`, `"v1 beta"`, 1), nil, "services[0].image_tag", "not a valid image tag"},
		{"bad image tag template", strings.Replace(minimal, `"${trigger.image_tag}"`, `"-${trigger.build}"`, 1), nil, "services[0].image_tag", "not a valid image tag"},
		{"image tag on a compose service", strings.Replace(minimal, "uuid: abc123", "uuid: abc123\n    kind: service", 1), nil, "services[0].image_tag", "has no image tag"},
		{"bad env key", strings.Replace(minimal, "key: LOG_LEVEL", "key: LOG-LEVEL", 1), nil, "services[0].env[0].key", "not a valid env key"},
		{"env key starting with digit", strings.Replace(minimal, "key: LOG_LEVEL", "key: 1LOG", 1), nil, "services[0].env[0].key", "not a valid env key"},
		{"duplicate env key", strings.Replace(minimal, "value: info }", "value: info }\n      - { key: LOG_LEVEL, value: debug }", 1), nil, "services[0].env[1].key", "duplicate env key"},
		{"env without value or secret", strings.Replace(minimal, "key: LOG_LEVEL, value: info", "key: LOG_LEVEL", 1), nil, "services[0].env[0]", "set value"},
		{"env with value and secret", strings.Replace(minimal, "value: info", "value: info, secret: { source: env, key: X }", 1), nil, "services[0].env[0]", "not both"},
		{"unknown secret source", strings.Replace(minimal, "value: info", "secret: { source: vault, key: X }", 1), nil, "services[0].env[0].secret.source", `unknown secret source "vault"`},
		{"env source with bad name", strings.Replace(minimal, "value: info", "secret: { source: env, key: 'A-B' }", 1), nil, "services[0].env[0].secret.key", "not an environment variable name"},
		{"redefined env source", minimal + "secrets: { env: { infisical: { url: https://x.example } } }\n", nil, "secrets.env", "built-in"},
		{"infisical incomplete", minimal + "secrets: { vault: { infisical: { url: https://x.example } } }\n", nil, "secrets.vault.infisical.client_secret", "is required"},
		{"unset variable", minimal, testEnv("COOLIFY_TOKEN"), "coolify.token", "environment variable COOLIFY_TOKEN is not set"},
		{"trigger ref outside its fields", strings.Replace(minimal, "https://coolify.example.com", "https://${trigger.params.host}", 1), nil, "coolify.url", "not allowed here"},
		{"unknown trigger ref", strings.Replace(minimal, "${trigger.image_tag}", "${trigger.tag}", 1), nil, "services[0].image_tag", "unknown trigger reference"},
		{"malformed ref", strings.Replace(minimal, "value: info", `value: "${1abc}"`, 1), nil, "services[0].env[0].value", "malformed reference"},
		{"unterminated ref", strings.Replace(minimal, "value: info", `value: "${HOME"`, 1), nil, "services[0].env[0].value", "unterminated"},
		{"missing uuid", strings.Replace(minimal, "uuid: abc123", "uuid: ''", 1), nil, "services[0].uuid", "is required"},
		{"reserved uuid", strings.Replace(minimal, "uuid: abc123", "uuid: phase1", 1), nil, "services[0].uuid", "reserved"},
		{"uuid with colon", strings.Replace(minimal, "uuid: abc123", "uuid: 'mobile:x'", 1), nil, "services[0].uuid", "does not match"},
		{"coolify url with api suffix", strings.Replace(minimal, "https://coolify.example.com", "https://coolify.example.com/api/v1", 1), nil, "coolify.url", "drop the /api/v1"},
		{"coolify url not http", strings.Replace(minimal, "https://coolify.example.com", "ftp://coolify", 1), nil, "coolify.url", "http"},
		{"bad coolify status", strings.Replace(minimal, "uuid: abc123", "uuid: abc123\n    health: { coolify_status: 'running:great' }", 1), nil, "services[0].health.coolify_status", "not a Coolify status"},
		{"bad http expect", strings.Replace(minimal, "uuid: abc123", "uuid: abc123\n    health: { http: { url: https://x.example, expect_status: 42 } }", 1), nil, "services[0].health.http.expect_status", "between 100 and 599"},
		{"wrong type", strings.Replace(minimal, "uuid: abc123", "uuid: [a, b]", 1), nil, "services[0].uuid", "want a string, got a list"},
		{"float where string", strings.Replace(minimal, `"${trigger.image_tag}"`, "1.10", 1), nil, "services[0].image_tag", "quote it"},
		{"services not a list", strings.Replace(minimal, "services:", "services: 3\nx_services:", 1), nil, "services", "want a list"},
		{"nothing to do", "coolify: { url: https://c.example, token: t }\n", nil, "services", "at least one service"},
		{"bad name", "name: Prod!\n" + minimal, nil, "name", "does not match"},
		{"bad mobile", minimal + "mobile:\n  - { feature: 'version state', when: later, flagsmith: { url: https://f.example } }\n", nil, "mobile[0].feature", "does not match"},
		{"mobile when", minimal + "mobile:\n  - { feature: vs, when: later, set: { a: b }, flagsmith: { url: https://f.example, api_key: k, environment: e } }\n", nil, "mobile[0].when", "not one of"},
		{"mobile set path", minimal + "mobile:\n  - { feature: vs, set: { 'a..b': c }, flagsmith: { url: https://f.example, api_key: k, environment: e } }\n", nil, "mobile[0].set", "dot-separated"},
		{"negative retries", minimal + "locks: { phase: { max_retries: -1 } }\n", nil, "locks.phase.max_retries", "between 0 and"},
		{"short ttl", minimal + "locks: { ttl: 10ms }\n", nil, "locks.ttl", "at least 1s"},
		{"invalid yaml", "services: [\n", nil, "", "invalid YAML"},
		{"duplicate yaml key", minimal + "name: a\nname: b\n", nil, "", "invalid YAML"},
		{"top level list", "- a\n- b\n", nil, "", "invalid YAML"},
		{"absurd nesting", "services: " + strings.Repeat("[", 100) + strings.Repeat("]", 100), nil, "", "nested deeper than"},
		{"comment too long", strings.Replace(minimal, "value: info", "value: info, comment: "+strings.Repeat("x", 300), 1), nil, "services[0].env[0].comment", "longer than 256"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env
			if env == nil {
				env = testEnv()
			}
			_, err := LoadPipelineBytes("p.yaml", []byte(tc.yaml), env)
			ps := mustProblems(t, err)
			wantProblem(t, ps, tc.field, tc.want)
			for _, p := range ps {
				if p.File != "p.yaml" {
					t.Errorf("problem %q names file %q, want p.yaml", p, p.File)
				}
			}
		})
	}
}

func TestLoadPipelineReportsAllProblemsTogether(t *testing.T) {
	yaml := `
name: BAD NAME
coolify: { url: "not a url", token: "${UNSET_TOKEN}" }
services:
  - { uuid: abc, image_tag: "bad tag", env: [ { key: "1X", value: a } ] }
  - { uuid: abc, deploy_timeout: forever }
on_failure: explode
surprise: true
`
	_, err := LoadPipelineBytes("all.yaml", []byte(yaml), testEnv("UNSET_TOKEN"))
	ps := mustProblems(t, err)
	for _, w := range []struct{ field, msg string }{
		{"name", "does not match"},
		{"coolify.url", "absolute"},
		{"coolify.token", "UNSET_TOKEN is not set"},
		{"services[0].image_tag", "not a valid image tag"},
		{"services[0].env[0].key", "not a valid env key"},
		{"services[1].uuid", "duplicate"},
		{"services[1].deploy_timeout", "invalid duration"},
		{"on_failure", "not one of"},
		{"surprise", "unknown field"},
	} {
		wantProblem(t, ps, w.field, w.msg)
	}
	for _, line := range ps.Lines() {
		if !strings.HasPrefix(line, "all.yaml: ") {
			t.Errorf("line %q does not start with the file name", line)
		}
	}
}

func TestLoadPipelineProblemsHideEnvironmentValues(t *testing.T) {
	// Every field below gets an invalid value from the environment; the problems must say
	// what is wrong without showing it.
	yaml := `
coolify: { url: "${BAD_URL}", token: t }
services:
  - uuid: "${BAD_UUID}"
    image_tag: "${BAD_TAG}"
    deploy_timeout: "${BAD_DURATION}"
    health: { coolify_status: "${BAD_STATUS}" }
on_failure: "${BAD_POLICY}"
`
	env := func(string) string { return sentinel + " not valid anywhere" }
	_, err := LoadPipelineBytes("p.yaml", []byte(yaml), env)
	ps := mustProblems(t, err) // fails on a leak
	if len(ps) < 6 {
		t.Errorf("got %d problems, want one per bad field:\n%v", len(ps), ps)
	}
	wantProblem(t, ps, "on_failure", "value from the environment")
}

func TestLoadPipelineEscapesAndPassThrough(t *testing.T) {
	yaml := strings.Replace(minimal, "value: info", `value: "$${HOME}/{{project.DB}}/${trigger.commit}"`, 1) +
		"description: \"costs $${price} at ${REGION}\"\n"
	p, err := LoadPipelineBytes("p.yaml", []byte(yaml), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if got, want := p.Description, "costs ${price} at "+sentinel+"-REGION"; got != want {
		t.Errorf("description = %q, want %q", got, want)
	}
	// A trigger field keeps its escape until Resolve.
	if got, want := p.Services[0].Env[0].Value.Reveal(), "$${HOME}/{{project.DB}}/${trigger.commit}"; got != want {
		t.Errorf("unresolved env value = %q, want %q", got, want)
	}
}

func TestLoadPipelineNumbersAndBoolsAsStrings(t *testing.T) {
	yaml := strings.Replace(minimal, "value: info", "value: 8080", 1) + "  - { uuid: 12345, env: [ { key: FLAG, value: true } ] }\n"
	p, err := LoadPipelineBytes("p.yaml", []byte(yaml), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if got := p.Services[0].Env[0].Value.Reveal(); got != "8080" {
		t.Errorf("value = %q, want 8080", got)
	}
	if s := p.Services[1]; s.UUID != "12345" || s.Name != "12345" || s.Env[0].Value.Reveal() != "true" {
		t.Errorf("service = %+v", s)
	}
}

func TestLoadPipelinesDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", minimal)
	write(t, dir, "b.yml", "name: a\n"+minimal) // same name as a.yaml
	write(t, dir, "c.yaml", minimal+"bogus: 1\n")
	write(t, dir, ".hidden.yaml", "not: [valid")
	write(t, dir, "README.md", "not yaml")
	got, err := LoadPipelines(dir, testEnv())
	ps := mustProblems(t, err)
	if len(got) != 1 || got["a"] == nil {
		t.Errorf("loaded %v, want only a", keys(got))
	}
	wantProblem(t, ps, "name", "already defined")
	wantProblem(t, ps, "bogus", "unknown field")
	if len(ps) != 2 {
		t.Errorf("got %d problems, want 2:\n%v", len(ps), ps)
	}
}

func TestLoadPipelinesMissingDirectory(t *testing.T) {
	_, err := LoadPipelines(t.TempDir()+"/nope", testEnv())
	ps := mustProblems(t, err)
	if len(ps) != 1 || !strings.Contains(ps[0].Message, "no such file") {
		t.Errorf("got %v", ps)
	}
}

func TestHealthStatusOK(t *testing.T) {
	tests := []struct {
		want, status string
		ok           bool
	}{
		{"", "exited", true},
		{"running", "running:unknown", true},
		{"running", "running", true},
		{"running", "runningx", false},
		{"running", "restarting:unknown", false},
		{"running:healthy", "running:healthy", true},
		{"running:healthy", "running:unhealthy", false},
	}
	for _, tc := range tests {
		if got := (Health{CoolifyStatus: tc.want}).StatusOK(tc.status); got != tc.ok {
			t.Errorf("StatusOK(%q) with %q = %v, want %v", tc.status, tc.want, got, tc.ok)
		}
	}
}
