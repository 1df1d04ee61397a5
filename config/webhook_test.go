package config

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestWebhookMatch(t *testing.T) {
	w := &Webhook{Rules: []WebhookRule{
		{Repository: "acme/api", Branch: "main", Event: "workflow_run", Workflow: "build", Pipeline: "prod"},
		{Repository: "acme/*", Branch: "release/*", Pipeline: "release"},
		{Event: "push", Pipeline: "any-push"},
	}}
	tests := []struct {
		e    Event
		want string // "" for no match
	}{
		{Event{Repository: "acme/api", Branch: "main", Event: "workflow_run", Workflow: "build"}, "prod"},
		{Event{Repository: "ACME/Api", Branch: "main", Event: "workflow_run", Workflow: "build"}, "prod"},
		// The branch is taken as the provider names it: a branch named "refs/heads/main" is
		// not main (issue 11: refs/heads/ was stripped twice).
		{Event{Repository: "acme/api", Branch: "refs/heads/main", Event: "workflow_run", Workflow: "build"}, ""},
		{Event{Repository: "acme/web", Branch: "refs/heads/release/evil", Event: "pipeline"}, ""},
		{Event{Repository: "acme/api", Branch: "main", Event: "workflow_run", Workflow: "lint"}, ""},
		{Event{Repository: "acme/web", Branch: "release/1.2", Event: "workflow_run"}, "release"},
		{Event{Repository: "acme/web", Branch: "release/1.2/hotfix", Event: "workflow_run"}, ""},
		{Event{Repository: "other/x", Branch: "dev", Event: "push"}, "any-push"},
		{Event{Repository: "other/x", Branch: "dev", Event: "pipeline"}, ""},
	}
	for _, tc := range tests {
		r, ok := w.Match(tc.e)
		got := ""
		if ok {
			got = r.Pipeline
		}
		if got != tc.want {
			t.Errorf("Match(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
	var none *Webhook
	if _, ok := none.Match(Event{}); ok {
		t.Error("a nil webhook matched")
	}
}

func TestWebhookSources(t *testing.T) {
	w := &Webhook{Rules: []WebhookRule{
		{Repository: "acme/web", Branch: "main", Pipeline: "prod"},
		{Repository: "acme/nightly", Sources: []string{"schedule"}, Pipeline: "nightly"},
		{Repository: "acme/pushed", Event: "push", Pipeline: "pushed"},
	}}
	tests := []struct {
		e       Event
		want    string // "" for no match
		refused int    // rule refused for the source only, -1 for none
	}{
		{Event{Provider: ProviderGitLab, Repository: "acme/web", Branch: "main", Event: "pipeline", Source: "push"}, "prod", -1},
		{Event{Provider: ProviderGitLab, Repository: "acme/web", Branch: "main", Event: "pipeline", Source: "parent_pipeline"}, "", 0}, // its parent's hook deploys
		{Event{Provider: ProviderGitLab, Repository: "acme/web", Branch: "main", Event: "pipeline", Source: "merge_request_event"}, "", 0},
		{Event{Provider: ProviderGitLab, Repository: "acme/web", Branch: "main", Event: "pipeline", Source: "external"}, "", 0},
		{Event{Provider: ProviderGitLab, Repository: "acme/nightly", Event: "pipeline", Source: "schedule"}, "nightly", -1},
		{Event{Provider: ProviderGitLab, Repository: "acme/nightly", Event: "pipeline", Source: "push"}, "", 1},
		// A GitLab push matches only a rule that says event: push.
		{Event{Provider: ProviderGitLab, Repository: "acme/web", Branch: "main", Event: "push", Source: "push"}, "", -1},
		{Event{Provider: ProviderGitLab, Repository: "acme/pushed", Branch: "main", Event: "push", Source: "push"}, "pushed", -1},
		{Event{Provider: ProviderGitHub, Repository: "acme/web", Branch: "main", Event: "workflow_run", Source: "push"}, "prod", -1},
		{Event{Provider: ProviderGitHub, Repository: "acme/web", Branch: "main", Event: "workflow_run", Source: "pull_request"}, "", 0},
		{Event{Provider: ProviderGitHub, Repository: "acme/web", Branch: "main", Event: "push", Source: "push"}, "prod", -1},
		{Event{Provider: ProviderGeneric, Repository: "acme/web", Branch: "main", Event: "build"}, "prod", -1},
	}
	for _, tc := range tests {
		r, ok := w.Match(tc.e)
		got := ""
		if ok {
			got = r.Pipeline
		}
		if got != tc.want {
			t.Errorf("Match(%+v) = %q, want %q", tc.e, got, tc.want)
		}
		i, ok := w.SourceRefused(tc.e)
		if got == "" && (i != tc.refused || ok != (tc.refused >= 0)) {
			t.Errorf("SourceRefused(%+v) = %d, %v, want %d", tc.e, i, ok, tc.refused)
		}
	}
	// A rule can't accept merge-request pipelines.
	mr := &WebhookRule{Sources: []string{"merge_request_event", "push"}, Pipeline: "p"}
	if mr.Matches(Event{Provider: ProviderGitLab, Event: "pipeline", Source: "merge_request_event"}) {
		t.Error("a merge-request pipeline matched a rule listing merge_request_event")
	}
}

func TestWebhookRuleTriggerFor(t *testing.T) {
	r := &WebhookRule{Pipeline: "prod", Trigger: TriggerTemplate{
		Build:    "${payload.workflow_run.run_number}",
		Commit:   "${payload.workflow_run.head_sha}",
		ImageTag: "sha-${payload.workflow_run.head_sha}",
		Params:   map[string]string{"actor": "${payload.sender.login}", "first": "${payload.commits.0.id}", "fixed": "16", "lit": "$${x}", "flag": "${payload.ok}"},
	}}
	payload := `{"workflow_run":{"run_number":12345678901,"head_sha":"0a1b2c3d"},"sender":{"login":"octocat"},"commits":[{"id":"c1"}],"ok":true}`
	tr, err := r.TriggerFor(object(t, payload))
	if err != nil {
		t.Fatalf("TriggerFor: %v", err)
	}
	if tr.Build != "12345678901" || tr.Commit != "0a1b2c3d" || tr.ImageTag != "sha-0a1b2c3d" {
		t.Errorf("trigger = %+v", tr)
	}
	want := map[string]string{"actor": "octocat", "first": "c1", "fixed": "16", "lit": "${x}", "flag": "true"}
	for k, v := range want {
		if tr.Params[k] != v {
			t.Errorf("param %s = %q, want %q", k, tr.Params[k], v)
		}
	}

	bad := &WebhookRule{Trigger: TriggerTemplate{
		Build:  "${payload.missing}",
		Commit: "${payload.workflow_run}",
		Params: map[string]string{"n": "${payload.commits.5.id}", "z": "${payload.nothing}"},
	}}
	_, err = bad.TriggerFor(object(t, `{"workflow_run":{"x":1},"commits":[],"nothing":null}`))
	ps := mustProblems(t, err)
	wantProblem(t, ps, "trigger.build", "has no")
	wantProblem(t, ps, "trigger.commit", "object or list")
	wantProblem(t, ps, "trigger.params.n", "has no")
	wantProblem(t, ps, "trigger.params.z", "null")

	// A path through a scalar, or a list indexed by a name, finds nothing; a string is
	// unescaped, and a number keeps its spelling (encoding/json leaves the white space around
	// a member out of its raw value).
	deep := &WebhookRule{Trigger: TriggerTemplate{Build: "${payload.ok.x}", Commit: "${payload.commits.id}"}}
	_, err = deep.TriggerFor(object(t, `{"ok":true,"commits":[{"id":"c1"}]}`))
	ps = mustProblems(t, err)
	wantProblem(t, ps, "trigger.build", "has no")
	wantProblem(t, ps, "trigger.commit", "has no")
	tr, err = (&WebhookRule{Trigger: TriggerTemplate{Commit: "${payload.w.s}", Params: map[string]string{"n": "${payload.w.n}"}}}).
		TriggerFor(object(t, `{"w": { "s" : "c\u0031d" , "n":  -1.5e3 } }`))
	if err != nil || tr.Commit != "c1d" || tr.Params["n"] != "-1.5e3" {
		t.Errorf("trigger = %+v, %v; want commit c1d, param n -1.5e3", tr, err)
	}

	// A payload value that makes an invalid trigger is refused, without showing it.
	_, err = (&WebhookRule{Trigger: TriggerTemplate{ImageTag: "${payload.tag}"}}).TriggerFor(object(t, `{"tag":"`+sentinel+` bad"}`))
	wantProblem(t, mustProblems(t, err), "trigger.image_tag", "not a valid image tag")
}

// object splits a JSON object into its members, as the API hands a delivery to TriggerFor.
func object(t *testing.T, s string) map[string]json.RawMessage {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err != nil {
		t.Fatalf("test payload %s: %v", s, err)
	}
	return obj
}

// The shipped sample config's GitLab rule fires: a version tag's successful pipeline of
// acme/mobile-app maps to a valid trigger (its tag as app_version), and a branch pipeline of
// the same project matches nothing (its ref is no version: the run would be refused).
func TestSampleConfigGitLabRuleWorks(t *testing.T) {
	getenv := func(k string) string { // the sample's ${VAR}s; no ORCH_* override
		if strings.HasPrefix(k, "ORCH_") {
			return ""
		}
		return "sample-" + strings.ToLower(k) + "-0123456789"
	}
	d, err := LoadDaemon("../testdata/config/orchestrator.yaml", getenv, nil)
	if err != nil {
		t.Fatalf("load the sample config: %v", err)
	}
	gl := d.Webhooks.For(ProviderGitLab)
	tag := Event{Provider: ProviderGitLab, Repository: "acme/mobile-app", Tag: "v2.4.0", Event: "pipeline", Source: "push"}
	r, ok := gl.Match(tag)
	if !ok {
		t.Fatal("a version tag's pipeline matches no rule of the sample config")
	}
	payload := map[string]json.RawMessage{"object_attributes": json.RawMessage(
		`{"iid":57,"sha":"5f2c3e1a9b7d5f2c3e1a9b7d5f2c3e1a9b7d0000","ref":"v2.4.0","tag":true,"status":"success"}`)}
	tr, err := r.TriggerFor(payload)
	if err != nil || tr.AppVersion != "v2.4.0" || tr.Build != "57" {
		t.Errorf("trigger %+v, %v; want build 57, app_version v2.4.0", tr, err)
	}
	branch := tag
	branch.Tag, branch.Branch = "", "release/2.4"
	if r, ok := gl.Match(branch); ok {
		t.Errorf("a branch pipeline matched the rule for %s", r.Pipeline)
	}
}
