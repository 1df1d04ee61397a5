package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
)

// The webhook's steps, each a pure function, tested on the payloads of testdata/webhooks
// (the shapes GitHub and GitLab document); webhooks_test.go drives the same payloads through
// the route, where they are also submitted.

// readPayload reads one of testdata/webhooks.
func readPayload(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "webhooks", name))
	if err != nil {
		t.Fatalf("read payload: %v", err)
	}
	return b
}

// eventHeader is the header a provider names its event in, set to event.
func eventHeader(provider config.Provider, event string) http.Header {
	h := http.Header{}
	switch provider {
	case config.ProviderGitHub:
		h.Set(headerGitHubEvent, event)
	case config.ProviderGitLab:
		h.Set(headerGitLabEvent, event)
	}
	return h
}

// eventFields are the fields of a ciEvent that rules match on.
type eventFields struct{ Event, Repository, Branch, Workflow, Source string }

func fieldsOf(ev ciEvent) eventFields {
	return eventFields{ev.Event, ev.Repository, ev.Branch, ev.Workflow, ev.Source}
}

// parsePayload runs the parse step on payload file as provider sends it with event, and
// returns the event and the body's JSON object.
func parsePayload(t *testing.T, provider config.Provider, file, event string) (ciEvent, map[string]json.RawMessage) {
	t.Helper()
	body := readPayload(t, file)
	obj, err := decodeObject(body, nameRequestBody)
	if err != nil {
		t.Fatalf("%s: decode: %v", file, err)
	}
	ev, err := parseDelivery(provider, eventHeader(provider, event), body, obj)
	if err != nil {
		t.Fatalf("%s: parse: %v", file, err)
	}
	return ev, obj
}

// parseRow is a payload and the ciEvent its provider's parse step makes of it.
type parseRow struct {
	provider config.Provider
	file     string
	event    string // the provider's event header ("" sends none)
	want     eventFields
	// ignore is a part of want.Ignore; "" when the delivery is a deploy signal.
	ignore string
}

var parseRows = []parseRow{
	{config.ProviderGitHub, "github-workflow-run.json", "workflow_run", eventFields{Event: "workflow_run", Repository: "acme/api",
		Branch: "main", Workflow: "release", Source: "push"}, ""},
	{config.ProviderGitHub, "github-workflow-run-fork-pr.json", "workflow_run", eventFields{Event: "workflow_run", Repository: "acme/api",
		Branch: "main", Workflow: "release", Source: "pull_request"}, `head_repository "mallory/api" is not the repository "acme/api"`},
	{config.ProviderGitHub, "github-push.json", "push", eventFields{Event: "push", Repository: "acme/api", Branch: "main", Source: "push"}, ""},
	{config.ProviderGitHub, "github-push.json", "ping", eventFields{Event: "ping"}, "ping: the webhook is set up"},
	{config.ProviderGitHub, "github-push.json", "release", eventFields{Event: "release"}, `GitHub event "release" is not a deploy signal`},
	{config.ProviderGitLab, "gitlab-pipeline.json", "Pipeline Hook", eventFields{Event: "pipeline", Repository: "acme/web",
		Branch: "main", Workflow: "push", Source: "push"}, ""},
	// Without X-Gitlab-Event the kind is read from object_kind.
	{config.ProviderGitLab, "gitlab-pipeline.json", "", eventFields{Event: "pipeline", Repository: "acme/web",
		Branch: "main", Workflow: "push", Source: "push"}, ""},
	{config.ProviderGitLab, "gitlab-pipeline-merge-request.json", "Pipeline Hook", eventFields{Event: "pipeline", Repository: "acme/web",
		Branch: "main", Workflow: "merge_request_event", Source: "merge_request_event"}, "merge-request pipelines never deploy"},
	{config.ProviderGitLab, "gitlab-push.json", "Push Hook", eventFields{Event: "push", Repository: "acme/web", Branch: "main", Source: "push"}, ""},
	// A tag is no branch: the event names none.
	{config.ProviderGitLab, "gitlab-tag-push.json", "Tag Push Hook", eventFields{Event: "push", Repository: "acme/web", Source: "push"}, ""},
	{config.ProviderGitLab, "gitlab-merge-request.json", "Merge Request Hook", eventFields{Event: "Merge Request Hook"}, "is not a deploy signal"},
	{config.ProviderGitLab, "gitlab-job.json", "Job Hook", eventFields{Event: "Job Hook"}, "is not a deploy signal"},
	{config.ProviderGitLab, "gitlab-deployment.json", "Deployment Hook", eventFields{Event: "Deployment Hook"}, "is not a deploy signal"},
	{config.ProviderGitLab, "gitlab-release.json", "Release Hook", eventFields{Event: "Release Hook"}, "is not a deploy signal"},
	{config.ProviderGitLab, "gitlab-note.json", "Note Hook", eventFields{Event: "Note Hook"}, "is not a deploy signal"},
	{config.ProviderGitLab, "gitlab-issue.json", "Issue Hook", eventFields{Event: "Issue Hook"}, "is not a deploy signal"},
	// A GitLab event of a shape the daemon cannot read is ignored, never refused: GitLab
	// disables a hook that keeps failing.
	{config.ProviderGitLab, "github-workflow-run.json", "Pipeline Hook", eventFields{Event: "Pipeline Hook"}, "GitLab Pipeline Hook not understood"},
	{config.ProviderGeneric, "generic.json", "", eventFields{Event: "build.succeeded", Repository: "acme/api", Branch: "main", Workflow: "release"}, ""},
}

func TestParseDeliveryPayloads(t *testing.T) {
	for _, c := range parseRows {
		t.Run(string(c.provider)+"/"+c.file+"/"+c.event, func(t *testing.T) {
			ev, _ := parsePayload(t, c.provider, c.file, c.event)
			if c.ignore == "" && ev.Ignore != "" || !strings.Contains(ev.Ignore, c.ignore) {
				t.Errorf("ignore: got %q, want %q", ev.Ignore, c.ignore)
			}
			if got := fieldsOf(ev); got != c.want {
				t.Errorf("event:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// The trigger defaults a deploy signal carries: the CI run's number as the build and its
// commit, and, from the generic webhook, every trigger field it names.
func TestParseDeliveryTriggerDefaults(t *testing.T) {
	for _, c := range []struct {
		provider                                    config.Provider
		file, event                                 string
		build, commit, imageTag, appVersion, region string
	}{
		{config.ProviderGitHub, "github-workflow-run.json", "workflow_run", "1234", "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e", "", "", ""},
		{config.ProviderGitHub, "github-push.json", "push", "", "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e", "", "", ""},
		{config.ProviderGitLab, "gitlab-pipeline.json", "Pipeline Hook", "31337", "bcbb5ec396a2c0f828686f14fac9b80b780504f2", "", "", ""},
		{config.ProviderGitLab, "gitlab-push.json", "Push Hook", "", "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", "", "", ""},
		{config.ProviderGeneric, "generic.json", "", "1234", "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e", "v2.4.0", "2.4.0", "eu-west-1"},
	} {
		t.Run(c.file, func(t *testing.T) {
			ev, _ := parsePayload(t, c.provider, c.file, c.event)
			tr := ev.Trigger
			if tr.Build != c.build || tr.Commit != c.commit || tr.ImageTag != c.imageTag || tr.AppVersion != c.appVersion ||
				tr.Params["region"] != c.region {
				t.Errorf("trigger: got %+v", tr)
			}
		})
	}
}

// A delivery that is not what the provider documents is a 400 naming what is wrong: only
// GitHub's and the generic webhook's (a GitLab delivery is ignored instead).
func TestParseDeliveryRefusals(t *testing.T) {
	for _, c := range []struct {
		provider    config.Provider
		event, body string
		field       string
	}{
		{config.ProviderGitHub, "", `{}`, headerGitHubEvent},
		{config.ProviderGitHub, "workflow_run", `{"action":"completed"}`, "workflow_run"},
		{config.ProviderGitHub, "push", `{"after":"abc"}`, "ref"},
		{config.ProviderGitHub, "push", `{"ref":7}`, "ref"},
		{config.ProviderGeneric, "", `{"build":true,"params":{"a":1}}`, "build"},
	} {
		t.Run(string(c.provider)+"/"+c.body, func(t *testing.T) {
			obj, err := decodeObject([]byte(c.body), nameRequestBody)
			if err != nil {
				t.Fatal(err)
			}
			_, err = parseDelivery(c.provider, eventHeader(c.provider, c.event), []byte(c.body), obj)
			if status, _, _ := toHTTP(err); err == nil || status != http.StatusBadRequest || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("got %v, want a 400 naming %s", err, c.field)
			}
		})
	}
}

// A GitHub delivery set to "form" carries the same JSON in its payload field: it parses to
// the same event as the JSON delivery.
func TestParseGitHubFormPayload(t *testing.T) {
	payload, obj, err := formPayload(readPayload(t, "github-push.form"))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := parseDelivery(config.ProviderGitHub, eventHeader(config.ProviderGitHub, "push"), payload, obj)
	if err != nil {
		t.Fatal(err)
	}
	want := eventFields{Event: "push", Repository: "acme/api", Branch: "main", Source: "push"}
	if got := fieldsOf(ev); got != want || ev.Ignore != "" {
		t.Errorf("got %+v, want %+v", ev, want)
	}
}

func TestVerifyDeliverySteps(t *testing.T) {
	secret := []byte("step-secret-0123456789")
	body := readPayload(t, "github-workflow-run.json")
	changed := append([]byte(nil), body...)
	changed[10] ^= 1
	type headers map[string]string
	for _, c := range []struct {
		name     string
		provider config.Provider
		h        headers
		body     []byte
		// shape and full are the refusals (a part of the 401's message) of verifyShape, before
		// the body is read, and of verifyDelivery; "" where it passes.
		shape, full string
	}{
		{"github signed", config.ProviderGitHub, headers{headerGitHubSignature: Sign(secret, body)}, body, "", ""},
		{"github body changed", config.ProviderGitHub, headers{headerGitHubSignature: Sign(secret, body)}, changed, "", "does not match"},
		{"github other secret", config.ProviderGitHub, headers{headerGitHubSignature: Sign([]byte("another-secret-0123"), body)}, body, "", "does not match"},
		{"github no signature", config.ProviderGitHub, headers{}, body, "missing " + headerGitHubSignature, "missing " + headerGitHubSignature},
		{"github not hex", config.ProviderGitHub, headers{headerGitHubSignature: "sha256=zz"}, body, headerGitHubSignature, headerGitHubSignature},
		{"github the generic header", config.ProviderGitHub, headers{headerGenericSig: Sign(secret, body)}, body, "missing", "missing"},
		{"generic signed", config.ProviderGeneric, headers{headerGenericSig: Sign(secret, body)}, body, "", ""},
		{"generic body changed", config.ProviderGeneric, headers{headerGenericSig: Sign(secret, body)}, changed, "", "does not match"},
		{"generic GitHub's header", config.ProviderGeneric, headers{headerGitHubSignature: Sign(secret, body)}, body, "missing " + headerGenericSig, "missing"},
		{"gitlab token", config.ProviderGitLab, headers{headerGitLabToken: string(secret)}, body, "", ""},
		{"gitlab wrong token", config.ProviderGitLab, headers{headerGitLabToken: "not-the-token-0123"}, body, "does not match", "does not match"},
		{"gitlab no token", config.ProviderGitLab, headers{}, body, "missing " + headerGitLabToken, "missing " + headerGitLabToken},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range c.h {
				h.Set(k, v)
			}
			check := func(step string, err error, want string) {
				t.Helper()
				if want == "" {
					if err != nil {
						t.Errorf("%s: %v, want it to verify", step, err)
					}
					return
				}
				var he *httpError
				if !errors.As(err, &he) || he.status != http.StatusUnauthorized || !strings.Contains(he.message, want) {
					t.Errorf("%s: got %v, want a 401 saying %q", step, err, want)
				}
			}
			check("verifyShape", verifyShape(c.provider, secret, h), c.shape)
			check("verifyDelivery", verifyDelivery(c.provider, secret, h, c.body), c.full)
		})
	}
}

// stepHook is the rules the match step is tested against.
var stepHook = &config.Webhook{Secret: "unused-here", Rules: []config.WebhookRule{
	{Event: "workflow_run", Repository: "acme/api", Branch: "main", Workflow: "release", Pipeline: "prod"},
	{Event: "push", Repository: "acme/api", Branch: "main", Pipeline: "api-push"},
	{Event: "pipeline", Repository: "acme/web", Branch: "main", Pipeline: "web"},
	{Event: "pipeline", Repository: "acme/web", Branch: "nightly", Sources: []string{"schedule"}, Pipeline: "nightly"},
	{Event: "build.succeeded", Repository: "acme/api", Pipeline: "generic"},
}}

func TestMatchDeliverySteps(t *testing.T) {
	for _, c := range []struct {
		name     string
		provider config.Provider
		ev       ciEvent
		hook     *config.Webhook
		rule     int    // the index of the rule that matches; -1 for none
		status   string // the answer when none does
		reason   string // a part of its reason
	}{
		{"github workflow_run", config.ProviderGitHub, ciEvent{Event: "workflow_run", Repository: "acme/api", Branch: "main",
			Workflow: "release", Source: "push"}, stepHook, 0, "", ""},
		{"github push", config.ProviderGitHub, ciEvent{Event: "push", Repository: "acme/api", Branch: "main", Source: "push"}, stepHook, 1, "", ""},
		{"gitlab pipeline", config.ProviderGitLab, ciEvent{Event: "pipeline", Repository: "acme/web", Branch: "main", Source: "push"}, stepHook, 2, "", ""},
		{"generic", config.ProviderGeneric, ciEvent{Event: "build.succeeded", Repository: "acme/api"}, stepHook, 4, "", ""},
		{"not a deploy signal", config.ProviderGitHub, ciEvent{Event: "ping", Ignore: "ping: the webhook is set up"}, stepHook,
			-1, "ignored", "ping"},
		{"gitlab push without a push rule", config.ProviderGitLab, ciEvent{Event: "push", Repository: "acme/web", Branch: "main",
			Source: "push"}, &config.Webhook{Rules: []config.WebhookRule{{Pipeline: "any"}}}, -1, "ignored", "GitLab push events are not a deploy signal"},
		{"github source no rule accepts", config.ProviderGitHub, ciEvent{Event: "workflow_run", Repository: "acme/api", Branch: "main",
			Workflow: "release", Source: "pull_request"}, stepHook, -1, "ignored", `workflow_run event "pull_request" is not one rules[0] accepts (push)`},
		{"gitlab source no rule accepts", config.ProviderGitLab, ciEvent{Event: "pipeline", Repository: "acme/web", Branch: "nightly",
			Source: "push"}, stepHook, -1, "ignored", `pipeline source "push" is not one rules[3] accepts (schedule)`},
		{"no rule", config.ProviderGitHub, ciEvent{Event: "push", Repository: "acme/other", Branch: "main", Source: "push"}, stepHook,
			-1, "unmapped", `no rule matches event="push" repository="acme/other" branch="main"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			i, rule, skip := matchDelivery(c.hook, c.provider, c.ev)
			if c.rule >= 0 {
				if rule != &c.hook.Rules[c.rule] || i != c.rule {
					t.Fatalf("got rules[%d] (%+v), want rules[%d]; answer %+v", i, rule, c.rule, skip)
				}
				return
			}
			if rule != nil || skip.Status != c.status || !strings.Contains(skip.Reason, c.reason) {
				t.Fatalf("got rules[%d] %+v, want %s saying %q", i, skip, c.status, c.reason)
			}
		})
	}
}

// The steps in a row, on every payload: whatever parses as a deploy signal matches its rule
// (or is answered why not), and the trigger the rule builds is a valid one.
func TestWebhookStepsOnPayloads(t *testing.T) {
	for _, c := range parseRows {
		ev, obj := parsePayload(t, c.provider, c.file, c.event)
		i, rule, skip := matchDelivery(stepHook, c.provider, ev)
		if rule == nil {
			if skip.Status != "ignored" && skip.Status != "unmapped" || skip.Reason == "" {
				t.Errorf("%s %s: no rule, and the answer %+v says nothing", c.file, c.event, skip)
			}
			continue
		}
		if c.ignore != "" {
			t.Errorf("%s %s: matched rules[%d] though it is not a deploy signal (%s)", c.file, c.event, i, c.ignore)
		}
		tr, err := ruleTrigger(i, rule, ev, obj)
		if err != nil {
			t.Errorf("%s %s: rules[%d]: %v", c.file, c.event, i, err)
			continue
		}
		if err := tr.Validate(); err != nil {
			t.Errorf("%s %s: trigger %+v: %v", c.file, c.event, tr, err)
		}
	}
}
