package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"

	"github.com/go-chi/chi/v5"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// CI webhooks. Each provider's delivery is verified first (GitLab's shared token before the
// body is read; an HMAC-SHA256 of the raw body, read up to the route's limit, for the
// others; both compared in constant time), then parsed into a ciEvent, matched against the
// provider's rules from the daemon config, de-duplicated, and submitted as a run.
//
// The steps but the first and the last are pure functions, by file: webhooks_verify.go
// (signatures, token, Content-Type), webhooks_github.go, webhooks_gitlab.go and
// webhooks_generic.go (each provider's parse step), webhooks_rules.go (the match step and
// the rule's trigger). This file holds the route, the order of the steps (webhook) and the
// one submit path every provider shares (submitDelivery).
//
// What deploys: a GitHub workflow_run completed with success, whose head_repository is the
// repository (never a fork's pull request) and whose event a rule accepts (its sources,
// default push), or a push; a GitLab Pipeline Hook with status success from a source a rule
// accepts (config.DefaultSources; merge-request pipelines never), or a Push Hook through a
// rule saying event: push. Any other event is answered 202 ignored with the reason, and a
// GitLab event is, whatever its shape: GitLab disables a hook that keeps failing, so only a
// bad token, a Content-Type other than JSON, or a body that is not a JSON object is a 4xx.
//
// Headers read:
//
//	github   X-Hub-Signature-256: sha256=<hex> (of the body as sent, a form's too),
//	         X-GitHub-Event, X-GitHub-Delivery
//	gitlab   X-Gitlab-Token, X-Gitlab-Event, Idempotency-Key (or, from a GitLab before 17.4,
//	         X-Gitlab-Event-UUID)
//	generic  X-Signature-256: sha256=<hex of HMAC-SHA256(secret, body)>, X-Delivery-ID
//
// A delivery is a duplicate when its body is byte for byte one that already started a run (a
// GitHub delivery: when its event is, its JSON but for installation, githubEventSum): the
// run's idempotency key is that SHA-256, recorded atomically with the run, so neither a
// redelivery (same delivery ID), nor GitHub's delivery of one event to another hook (a
// GitHub App's, under the same X-GitHub-Delivery), nor a captured request re-sent under a
// fresh delivery ID starts a second run, while a delivery whose first attempt failed before
// any run was created (say, the daemon was restarting) does run when it is sent again.
// Delivery IDs, which no signature covers, are recorded for Deps.DeliveryTTL only to say
// which kind of duplicate it was.

// Webhook headers.
const (
	headerGitHubSignature = "X-Hub-Signature-256"
	headerGitHubEvent     = "X-GitHub-Event"
	headerGitHubDelivery  = "X-GitHub-Delivery"
	headerGitLabToken     = "X-Gitlab-Token"
	headerGitLabEvent     = "X-Gitlab-Event"
	// headerGitLabDelivery is the ID of one GitLab hook's delivery of one event: it stays the
	// same across GitLab's retries and the hook page's Resend (GitLab MR 160952,
	// web_hook_service.rb).
	headerGitLabDelivery = "Idempotency-Key"
	// headerGitLabEventUUID is GitLab's recursion-detection UUID: shared by every hook fired
	// in one request or job, and copied from an incoming request when another webhook
	// triggered it. It names a delivery only for a GitLab too old to send Idempotency-Key.
	headerGitLabEventUUID = "X-Gitlab-Event-UUID"
	headerGenericSig      = "X-Signature-256"
	// HeaderGenericDelivery is the delivery ID header of the generic webhook.
	HeaderGenericDelivery = "X-Delivery-ID"
)

var deliveryIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// webhookResponse is the answer to a delivery.
type webhookResponse struct {
	// Status is "triggered", "duplicate", "ignored" or "unmapped".
	Status string `json:"status"`
	// Reason says why nothing started (ignored, unmapped, duplicate).
	Reason   string    `json:"reason,omitempty"`
	Pipeline string    `json:"pipeline,omitempty"`
	Run      *runs.Run `json:"run,omitempty"`
}

// ciEvent is a delivery reduced to what rules match on and what a run needs.
type ciEvent struct {
	Event      string // workflow_run, push, pipeline, or the generic body's event
	Repository string
	Branch     string // without refs/heads/; empty for tags
	Tag        string // the tag's name, for a delivery about a tag (GitLab's tag pipelines)
	Workflow   string
	// Source is what started the CI run (a workflow_run's event, a GitLab pipeline's source,
	// "push" for a push); rules accept config.DefaultSources unless they list theirs.
	Source string
	// Defaults of the run's trigger, overridden by the rule's trigger template.
	Trigger orchestrator.Trigger
	// Ignore, when set, says why this delivery is not a deploy signal (a failed workflow, a
	// deleted branch, a ping) and nothing is matched.
	Ignore string
}

// handleWebhook serves POST /v1/webhooks/{provider}.
func (s *server) handleWebhook() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		provider := config.Provider(chi.URLParam(r, "provider"))
		switch provider {
		case config.ProviderGitHub, config.ProviderGitLab, config.ProviderGeneric:
		default:
			s.writeError(w, r, newHTTPError(http.StatusNotFound, "not_found", "no webhook provider of that name; use github, gitlab or generic"))
			return
		}
		resp, status, err := s.webhook(r, provider)
		outcome := resp.Status
		if err != nil {
			outcome = "rejected"
		}
		s.metrics.Webhook(string(provider), outcome)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if resp.Run != nil {
			w.Header().Set("Location", "/v1/runs/"+resp.Run.ID)
		}
		encode(w, status, resp)
	}
}

// webhook does the work of handleWebhook and returns the answer, in four steps: receive (the
// delivery verified and read), parse (parseDelivery: the provider's JSON reduced to a
// ciEvent), match (matchDelivery: the rule that deploys it, or why none does) and submit
// (submitDelivery: the one path by which every provider's delivery starts a run).
func (s *server) webhook(r *http.Request, provider config.Provider) (webhookResponse, int, error) {
	hook := s.cfg.Webhooks.For(provider)
	if hook == nil || !hook.Secret.IsSet() {
		return webhookResponse{}, 0, newHTTPError(http.StatusForbidden, "webhook_disabled",
			"the %s webhook has no secret configured, so every delivery is refused: set webhooks.%s.secret in the daemon config, or %s, and a rule that maps its events to a pipeline",
			provider, provider, config.WebhookSecretEnv(provider))
	}
	secret := []byte(hook.Secret.Reveal())
	form, err := s.admitDelivery(r, provider, secret)
	if err != nil {
		return webhookResponse{}, 0, err
	}
	// The body is read to the route's limit (webhookBody), its bytes counted against the
	// body budget as they arrive: a GitLab body's as its client's verified bytes, the signed
	// providers' as bytes not verified yet (their signature covers the body), which each
	// client may hold less of.
	budget := s.budgeted(r, provider == config.ProviderGitLab)
	defer budget.release()
	d, err := s.readDelivery(r, provider, secret, form)
	if err != nil {
		return webhookResponse{}, 0, err
	}
	ev, err := parseDelivery(provider, r.Header, d.body, d.obj)
	if err != nil {
		return webhookResponse{}, 0, err
	}
	// What the delivery says asked for the run is kept as far as it is sound: an odd job URL
	// from a CI host does not stop a deploy.
	o := &ev.Trigger.Origin
	o.Provider, o.Delivery = string(provider), d.id
	o.Traceparent = cmp.Or(o.Traceparent, traceparent(r))
	*o = o.Cleaned()
	log := s.log.With(slog.String(logkey.RequestID, requestID(r.Context())),
		slog.String(logkey.Provider, string(provider)), slog.String(logkey.Delivery, d.id))
	i, rule, skip := matchDelivery(hook, provider, ev)
	if rule == nil {
		log.InfoContext(r.Context(), "webhook "+skip.Status, slog.String(logkey.Reason, skip.Reason))
		return skip, http.StatusAccepted, nil
	}
	t, err := ruleTrigger(i, rule, ev, d.obj)
	if err != nil {
		return webhookResponse{}, 0, err
	}
	if err := s.knownPipeline(rule.Pipeline); err != nil {
		return webhookResponse{}, 0, &httpError{status: http.StatusUnprocessableEntity, code: "unknown_pipeline",
			field:   fmt.Sprintf("webhooks rules[%d].pipeline", i),
			message: fmt.Sprintf("the matching rule names pipeline %q, which is not loaded", rule.Pipeline)}
	}
	return s.submitDelivery(r.Context(), log, provider, d, i, rule.Pipeline, t)
}

// delivery is a verified delivery, read whole.
type delivery struct {
	// body is the delivery's JSON: the body as sent, or a form's payload field (the signature
	// covered the form as sent; from here on the body is its payload's JSON).
	body []byte
	// obj is body's JSON object, decoded once (decodeObject).
	obj map[string]json.RawMessage
	// id is the provider's delivery ID ("" when it sent none), read from the header idHeader.
	id, idHeader string
}

// admitDelivery is what is checked before a byte of the body is read: GitLab's token whole,
// the signed providers' signature header present and well-formed, the Content-Type (form
// reports a GitHub form body), and, for a signed provider, the client's bucket of failed
// deliveries: its delivery can only be verified once its body is read, so an address that
// used up that bucket is refused before, and its failures cost no body read. (GitLab's
// token checked out here: it is genuine.)
func (s *server) admitDelivery(r *http.Request, provider config.Provider, secret []byte) (form bool, err error) {
	if err := verifyShape(provider, secret, r.Header); err != nil {
		return false, authFailed(r, s.webhookFail, err)
	}
	if form, err = bodyType(provider, r.Header); err != nil {
		return false, err
	}
	if provider != config.ProviderGitLab {
		if ok, wait := s.webhookFail.ready(clientKey(r)); !ok {
			return false, tooMany(wait, "too many failed attempts from this address")
		}
	}
	return form, nil
}

// readDelivery reads the body, verifies a signed provider's signature over it, and decodes
// its JSON object (a form's payload's) and the delivery ID.
func (s *server) readDelivery(r *http.Request, provider config.Provider, secret []byte, form bool) (delivery, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return delivery{}, bodyError(err)
	}
	if provider != config.ProviderGitLab {
		if err := verifyDelivery(provider, secret, r.Header, body); err != nil {
			return delivery{}, authFailed(r, s.webhookFail, err)
		}
	}
	d := delivery{body: body}
	if form {
		d.body, d.obj, err = formPayload(body)
	} else {
		d.obj, err = decodeObject(body, nameRequestBody)
	}
	if err != nil {
		return delivery{}, err
	}
	if d.id, d.idHeader, err = deliveryID(provider, r.Header); err != nil {
		return delivery{}, err
	}
	return d, nil
}

// submitDelivery starts the run of pipeline with t for a delivery that matched rules[i], or
// answers the run it already started.
//
// The run's idempotency key is the body's digest (GitHub's: the event's, githubEventSum):
// the store creates the run and records the key in one atomic step, so a delivery whose
// body already started a run (GitHub's redeliver or the same event through another hook, a
// GitLab resend, a captured request replayed under another delivery ID) starts nothing,
// and a delivery whose first attempt failed before a run was created still runs when it
// is sent again. The delivery ID is not signed, so it never decides whether a run starts;
// it is recorded to tell the kinds of duplicate apart in the answer and the log.
func (s *server) submitDelivery(ctx context.Context, log *slog.Logger, provider config.Provider, d delivery,
	i int, pipeline string, t orchestrator.Trigger) (webhookResponse, int, error) {
	bodySum := sha256.Sum256(d.body)
	if provider == config.ProviderGitHub {
		bodySum = githubEventSum(d.body, d.obj)
	}
	seenID, id := false, d.id
	if id != "" {
		var err error
		seenID, err = s.deliveries.SeenDelivery(ctx, string(provider)+":"+id, s.deliveryTTL)
		if err != nil {
			return webhookResponse{}, 0, fmt.Errorf("record delivery: %w", err)
		}
	} else {
		id = "sha256:" + hex.EncodeToString(bodySum[:8])
	}
	t.By = "webhook:" + string(provider) + ":" + id
	t.IdempotencyKey = "webhook:" + string(provider) + ":" + hex.EncodeToString(bodySum[:])
	// The provider's bucket (rate_limits.webhook) is charged only for a delivery that starts
	// a run: one that verified but is ignored, unmapped or a duplicate (a captured delivery
	// replayed, GitHub's redeliver) takes nothing from what genuine deliveries need. It must
	// hold a token for the delivery to go ahead; the token is taken once the run exists (so
	// deliveries arriving together may leave it in debt, which the next ones pay).
	bucket := "webhook:" + string(provider)
	if ok, wait := s.webhookRate.ready(bucket); !ok {
		return webhookResponse{}, 0, tooMany(wait, "too many deliveries started runs")
	}
	run, existing, err := s.engine.Submit(ctx, pipeline, t)
	s.audited(ctx, runs.AuditRecord{Subject: t.By, Action: triggerAction(t), Target: pipeline, Reason: t.Reason,
		Detail: triggerDetail(t, run, existing)}, err)
	if err != nil {
		return webhookResponse{}, 0, err
	}
	if existing {
		reason := "this payload already started a run under another delivery ID"
		if seenID {
			reason = alreadyReceived(provider, d.idHeader)
		}
		log.InfoContext(ctx, "webhook duplicate", slog.String(logkey.RunID, run.ID), slog.String(logkey.Reason, reason))
		return webhookResponse{Status: "duplicate", Reason: reason, Pipeline: pipeline, Run: run}, http.StatusOK, nil
	}
	s.webhookRate.charge(bucket)
	log.InfoContext(ctx, "webhook triggered a run",
		slog.String(logkey.RunID, run.ID), slog.String(logkey.Pipeline, pipeline), slog.Int(logkey.Rule, i),
		slog.Bool(logkey.Redelivery, seenID))
	return webhookResponse{Status: "triggered", Pipeline: pipeline, Run: run}, http.StatusAccepted, nil
}

// deliveryID returns the delivery's ID ("" when the provider sent none) and the header it
// came from.
func deliveryID(provider config.Provider, h http.Header) (id, header string, err error) {
	var name string
	switch provider {
	case config.ProviderGitHub:
		name = headerGitHubDelivery
	case config.ProviderGitLab:
		name = headerGitLabDelivery
		if h.Get(name) == "" {
			name = headerGitLabEventUUID
		}
	default:
		name = HeaderGenericDelivery
	}
	id = h.Get(name)
	if id != "" && !deliveryIDPattern.MatchString(id) {
		return "", name, &httpError{status: http.StatusBadRequest, code: "invalid", field: name,
			message: "invalid " + name + ": 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'"}
	}
	return id, name, nil
}

// alreadyReceived is the reason answered with a duplicate whose delivery ID, read from
// header, was seen before.
func alreadyReceived(provider config.Provider, header string) string {
	switch {
	case provider == config.ProviderGitHub:
		return "this event was already received (the same " + header + ": a redelivery, or the same event through another webhook)"
	case provider == config.ProviderGitLab && header == headerGitLabDelivery:
		return "this delivery was already received (the same " + header + ": GitLab's retry, or a Resend from the hook's page)"
	}
	return "this delivery was already received"
}

// parseDelivery turns a verified delivery, body and its JSON object's members (obj, from
// decodeObject), into a ciEvent. A body that is not the JSON the provider documents is a 400
// naming the field.
func parseDelivery(provider config.Provider, h http.Header, body []byte, obj map[string]json.RawMessage) (ciEvent, error) {
	switch provider {
	case config.ProviderGitHub:
		return parseGitHub(h.Get(headerGitHubEvent), body)
	case config.ProviderGitLab:
		return parseGitLab(h.Get(headerGitLabEvent), body, obj)
	default:
		return parseGeneric(obj)
	}
}

// decodeLenient decodes body into v, ignoring fields v does not name; a known field of the
// wrong type is a 400 naming it.
func decodeLenient(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return jsonError(err)
	}
	return nil
}
