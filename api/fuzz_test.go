package api

import (
	"bytes"
	"errors"
	"net/http"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
)

// fuzzRules exercise matching and ${payload.…} expansion on whatever the fuzzer parses.
var fuzzHook = &config.Webhook{Secret: "unused-here", Rules: []config.WebhookRule{
	{Event: "workflow_run", Repository: "acme/*", Branch: "main", Pipeline: "prod",
		Trigger: config.TriggerTemplate{ImageTag: "${payload.workflow_run.head_sha}", Build: "${payload.workflow_run.run_number}"}},
	{Event: "pipeline", Pipeline: "web", Trigger: config.TriggerTemplate{
		ImageTag: "${payload.object_attributes.sha}", Params: map[string]string{"stage": "${payload.builds.0.stage}"}}},
	{Event: "push", Branch: "release/*", Pipeline: "demo", Trigger: config.TriggerTemplate{Commit: "$${literal}${payload.after}"}},
	{Pipeline: "catch-all"},
}}

// is4xx reports whether err answers with a client error.
func is4xx(err error) bool {
	status, _, _ := toHTTP(err)
	return status >= 400 && status < 500
}

// FuzzWebhookDelivery feeds webhook bodies and signatures through verification, parsing,
// rule matching and trigger building. Properties: nothing panics; a body signed with the
// secret verifies and the same body with one byte changed does not; any other signature is
// refused; every rejection is a 4xx with a message; a trigger built from a rule passes the
// API's own validation.
func FuzzWebhookDelivery(f *testing.F) {
	f.Add(uint8(0), "workflow_run", []byte(`{"action":"completed","workflow_run":{"name":"release","head_branch":"main","head_sha":"abc","run_number":7,"conclusion":"success"},"repository":{"full_name":"acme/api"}}`), "")
	f.Add(uint8(0), "push", []byte(`{"ref":"refs/heads/release/1.2","after":"abc","repository":{"full_name":"acme/api"}}`), "sha256=00")
	f.Add(uint8(1), "Pipeline Hook", []byte(`{"object_kind":"pipeline","object_attributes":{"id":1,"ref":"main","sha":"abc","status":"success"},"builds":[{"stage":"publish"}]}`), "")
	f.Add(uint8(2), "", []byte(`{"event":"build.succeeded","build":"12","params":{"a":"b"}}`), "sha256=zz")
	f.Add(uint8(0), "push", []byte("payload=%7B%22ref%22%3A%22refs%2Fheads%2Fmain%22%7D"), "")
	f.Add(uint8(0), "push", []byte("payload=%5B%5D&x=1"), "") // a form whose payload is an array
	secret := []byte("fuzz-secret-0123456789")
	f.Fuzz(func(t *testing.T, which uint8, event string, body []byte, sig string) {
		provider := []config.Provider{config.ProviderGitHub, config.ProviderGitLab, config.ProviderGeneric}[int(which)%3]
		signed := http.Header{}
		signed.Set(headerGitHubEvent, event)
		signed.Set(headerGitLabEvent, event)
		signed.Set(headerGitHubSignature, Sign(secret, body))
		signed.Set(headerGenericSig, Sign(secret, body))
		signed.Set(headerGitLabToken, string(secret))
		if err := verifyDelivery(provider, secret, signed, body); err != nil {
			t.Fatalf("%s: a correctly signed body was refused: %v", provider, err)
		}
		if provider != config.ProviderGitLab && len(body) > 0 {
			changed := bytes.Clone(body)
			changed[len(changed)/2] ^= 0x01
			if err := verifyDelivery(provider, secret, signed, changed); err == nil {
				t.Fatalf("%s: a body changed after signing verified", provider)
			}
		}
		forged := signed.Clone()
		forged.Set(headerGitHubSignature, sig)
		forged.Set(headerGenericSig, sig)
		forged.Set(headerGitLabToken, sig)
		if err := verifyDelivery(provider, secret, forged, body); err == nil {
			if sig != Sign(secret, body) && sig != string(secret) {
				t.Fatalf("%s: signature %q verified", provider, sig)
			}
		} else if !is4xx(err) {
			t.Fatalf("%s: signature refusal is not a 4xx: %v", provider, err)
		}

		// A GitHub delivery set to form: its payload field, when it holds one, is a JSON
		// object; any other form is a clear 4xx.
		if payload, obj, err := formPayload(body); err != nil {
			if !is4xx(err) || err.Error() == "" {
				t.Fatalf("form body refused without a clear 4xx: %v", err)
			}
		} else if _, err := decodeObject(payload, nameFormPayload); err != nil || obj == nil {
			t.Fatalf("form payload %q taken, but it is not a JSON object: %v", payload, err)
		}

		obj, err := decodeObject(body, nameRequestBody)
		if err != nil {
			if !is4xx(err) || err.Error() == "" {
				t.Fatalf("%s: a body refused without a clear 4xx: %v", provider, err)
			}
			return
		}
		ev, err := parseDelivery(provider, signed, body, obj)
		if err != nil {
			if !is4xx(err) || err.Error() == "" {
				t.Fatalf("%s: parse error is not a clear 4xx: %v", provider, err)
			}
			return
		}
		if ev.Ignore != "" {
			return
		}
		i, rule := matchRule(fuzzHook, provider, ev)
		if rule == nil {
			// Only a source the rules do not accept, or a GitLab push, escapes the catch-all.
			_, refused := fuzzHook.SourceRefused(matchEvent(provider, ev))
			gitlabPush := provider == config.ProviderGitLab && ev.Event == "push"
			if !refused && !gitlabPush {
				t.Fatalf("the catch-all rule did not match %+v", ev)
			}
			return
		}
		tr, err := ruleTrigger(i, rule, ev, obj)
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status != http.StatusUnprocessableEntity {
				t.Fatalf("rule trigger error is not a 422: %v", err)
			}
			return
		}
		if err := tr.Validate(); err != nil {
			t.Fatalf("a built trigger fails validation: %v", err)
		}
	})
}

// FuzzTriggerBody feeds bodies of POST /v1/pipelines/{name}/runs through decoding and
// validation: nothing panics, every rejection is a 4xx naming what is wrong.
func FuzzTriggerBody(f *testing.F) {
	f.Add([]byte(`{"build":"1","image_tag":"v1","commit":"abc","app_version":"1.0","params":{"a":"b"}}`))
	f.Add([]byte(`{"build":12}`))
	f.Add([]byte(`{"params":{"a":1}}`))
	f.Add([]byte(`{} {}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var b triggerBody
		err := decodeBytes(body, &b, false)
		if err == nil {
			err = b.trigger().Validate()
		}
		if err != nil && (!is4xx(err) || err.Error() == "") {
			t.Fatalf("rejection is not a clear 4xx: %v", err)
		}
	})
}
