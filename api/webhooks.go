package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/hmacsig"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// CI webhooks. Each provider's delivery is verified first (GitLab's shared token before the
// body is read; an HMAC-SHA256 of the raw body, read up to the route's limit, for the
// others; both compared in constant time), then parsed into a ciEvent, matched against the
// provider's rules from the daemon config, de-duplicated, and submitted as a run.
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

// webhook does the work of handleWebhook and returns the answer.
func (s *server) webhook(r *http.Request, provider config.Provider) (webhookResponse, int, error) {
	hook := s.cfg.Webhooks.For(provider)
	if hook == nil || !hook.Secret.IsSet() {
		return webhookResponse{}, 0, newHTTPError(http.StatusForbidden, "webhook_disabled",
			"the %s webhook has no secret configured, so every delivery is refused", provider)
	}
	secret := []byte(hook.Secret.Reveal())
	// GitLab's token is a header: check it before reading a byte of the body. A delivery
	// whose signature header is missing or malformed is refused before its body is read
	// too. Then the body is read to the route's limit (webhookBody), its bytes counted
	// against the body budget as they arrive: a GitLab body's as its client's verified
	// bytes, the signed providers' as bytes not verified yet (their signature covers the
	// body), which each client may hold less of.
	if err := verifyShape(provider, secret, r.Header); err != nil {
		return webhookResponse{}, 0, authFailed(r, s.webhookFail, err)
	}
	form, err := bodyType(provider, r.Header)
	if err != nil {
		return webhookResponse{}, 0, err
	}
	// A signed provider's delivery can only be verified once its body is read: an address
	// that used up its bucket of failed deliveries is refused before that, so that its
	// failures cost no body read. (GitLab's token checked out above: it is genuine.)
	if provider != config.ProviderGitLab {
		if ok, wait := s.webhookFail.ready(clientKey(r)); !ok {
			return webhookResponse{}, 0, tooMany(wait, "too many failed attempts from this address")
		}
	}
	budget := s.budgeted(r, provider == config.ProviderGitLab)
	defer budget.release()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return webhookResponse{}, 0, bodyError(err)
	}
	if provider != config.ProviderGitLab {
		if err := verifyDelivery(provider, secret, r.Header, body); err != nil {
			return webhookResponse{}, 0, authFailed(r, s.webhookFail, err)
		}
	}
	// The delivery's JSON object, decoded once here: the body, or a form's payload field (the
	// signature covered the form as sent; from here on the body is its payload's JSON).
	var obj map[string]json.RawMessage
	if form {
		body, obj, err = formPayload(body)
	} else {
		obj, err = decodeObject(body, nameRequestBody)
	}
	if err != nil {
		return webhookResponse{}, 0, err
	}
	delivery, deliveryHeader, err := deliveryID(provider, r.Header)
	if err != nil {
		return webhookResponse{}, 0, err
	}
	ev, err := parseDelivery(provider, r.Header, body, obj)
	if err != nil {
		return webhookResponse{}, 0, err
	}
	log := s.log.With(slog.String(logkey.RequestID, requestID(r.Context())),
		slog.String(logkey.Provider, string(provider)), slog.String(logkey.Delivery, delivery))
	if ev.Ignore != "" {
		log.InfoContext(r.Context(), "webhook ignored", slog.String(logkey.Reason, ev.Ignore))
		return webhookResponse{Status: "ignored", Reason: ev.Ignore}, http.StatusAccepted, nil
	}
	if provider == config.ProviderGitLab && ev.Event == "push" && !hasPushRule(hook) {
		reason := "GitLab push events are not a deploy signal (pipeline events are; a rule with event: push accepts pushes)"
		log.InfoContext(r.Context(), "webhook ignored", slog.String(logkey.Reason, reason))
		return webhookResponse{Status: "ignored", Reason: reason}, http.StatusAccepted, nil
	}
	i, rule := matchRule(hook, provider, ev)
	if rule == nil {
		if j, ok := hook.SourceRefused(matchEvent(provider, ev)); ok {
			reason := fmt.Sprintf("%s %q is not one rules[%d] accepts (%s)", sourceWord(provider), truncate(ev.Source, 64), j,
				strings.Join(hook.Rules[j].AcceptedSources(provider), ", "))
			log.InfoContext(r.Context(), "webhook ignored", slog.String(logkey.Reason, reason))
			return webhookResponse{Status: "ignored", Reason: reason}, http.StatusAccepted, nil
		}
		reason := fmt.Sprintf("no rule matches event=%q repository=%q branch=%q workflow=%q",
			ev.Event, ev.Repository, ev.Branch, ev.Workflow)
		log.InfoContext(r.Context(), "webhook unmapped", slog.String(logkey.Reason, reason))
		return webhookResponse{Status: "unmapped", Reason: reason}, http.StatusAccepted, nil
	}
	t, err := ruleTrigger(i, rule, ev, obj)
	if err != nil {
		return webhookResponse{}, 0, err
	}
	if err := s.knownPipeline(rule.Pipeline); err != nil {
		return webhookResponse{}, 0, &httpError{status: http.StatusUnprocessableEntity, code: "unknown_pipeline",
			field:   fmt.Sprintf("webhooks rules[%d].pipeline", i),
			message: fmt.Sprintf("the matching rule names pipeline %q, which is not loaded", rule.Pipeline)}
	}

	// The run's idempotency key is the body's digest (GitHub's: the event's, githubEventSum):
	// the store creates the run and records the key in one atomic step, so a delivery whose
	// body already started a run (GitHub's redeliver or the same event through another hook, a
	// GitLab resend, a captured request replayed under another delivery ID) starts nothing,
	// and a delivery whose first attempt failed before a run was created still runs when it
	// is sent again. The delivery ID is not signed, so it never decides whether a run starts;
	// it is recorded to tell the kinds of duplicate apart in the answer and the log.
	bodySum := sha256.Sum256(body)
	if provider == config.ProviderGitHub {
		bodySum = githubEventSum(body, obj)
	}
	seenID := false
	if delivery != "" {
		seenID, err = s.deliveries.SeenDelivery(r.Context(), string(provider)+":"+delivery, s.deliveryTTL)
		if err != nil {
			return webhookResponse{}, 0, fmt.Errorf("record delivery: %w", err)
		}
	} else {
		delivery = "sha256:" + hex.EncodeToString(bodySum[:8])
	}
	t.By = "webhook:" + string(provider) + ":" + delivery
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
	run, existing, err := s.engine.Submit(r.Context(), rule.Pipeline, t)
	if err != nil {
		return webhookResponse{}, 0, err
	}
	if !existing {
		s.webhookRate.charge(bucket)
	}
	if existing {
		reason := "this payload already started a run under another delivery ID"
		if seenID {
			reason = alreadyReceived(provider, deliveryHeader)
		}
		log.InfoContext(r.Context(), "webhook duplicate", slog.String(logkey.RunID, run.ID), slog.String(logkey.Reason, reason))
		return webhookResponse{Status: "duplicate", Reason: reason, Pipeline: rule.Pipeline, Run: run}, http.StatusOK, nil
	}
	log.InfoContext(r.Context(), "webhook triggered a run",
		slog.String(logkey.RunID, run.ID), slog.String(logkey.Pipeline, rule.Pipeline), slog.Int(logkey.Rule, i),
		slog.Bool(logkey.Redelivery, seenID))
	return webhookResponse{Status: "triggered", Pipeline: rule.Pipeline, Run: run}, http.StatusAccepted, nil
}

// githubEventSum is the digest a GitHub delivery's run is keyed on: the SHA-256 of its JSON
// without the top-level installation member, in a canonical form (members sorted, values
// compacted). GitHub sends one event to every hook subscribed to it (a repository's, an
// organization's, a GitHub App's) under one X-GitHub-Delivery, with the same payload but for
// installation, which only an App's delivery carries: so the event starts one run whichever
// hooks deliver it, even at once. The signature still covers each body whole, so a replayed
// body, under whatever delivery ID, is the same event too. obj is body's JSON object
// (decodeObject); body's own digest is the fallback should it not marshal again.
func githubEventSum(body []byte, obj map[string]json.RawMessage) [sha256.Size]byte {
	if _, ok := obj["installation"]; ok {
		obj = maps.Clone(obj)
		delete(obj, "installation")
	}
	canon, err := json.Marshal(obj)
	if err != nil {
		return sha256.Sum256(body)
	}
	return sha256.Sum256(canon)
}

// hasPushRule reports whether one of the hook's rules accepts pushes (event: push).
func hasPushRule(hook *config.Webhook) bool {
	for _, r := range hook.Rules {
		if r.Event == "push" {
			return true
		}
	}
	return false
}

// sourceWord names what a provider's event source is.
func sourceWord(p config.Provider) string {
	if p == config.ProviderGitHub {
		return "workflow_run event"
	}
	return "pipeline source"
}

// bodyType checks the delivery's Content-Type and reports whether its body is a form
// (application/x-www-form-urlencoded) instead of JSON. A GitHub webhook may be set to either
// (its content type "form", the default when a hook is created, puts the JSON in the form's
// one field, payload); GitLab and the generic webhook send JSON only. Anything else is a 415.
// No Content-Type is allowed: the body must then be JSON.
func bodyType(provider config.Provider, h http.Header) (form bool, err error) {
	ct := h.Get("Content-Type")
	if ct == "" {
		return false, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return false, nil
	case mt == "application/x-www-form-urlencoded" && provider == config.ProviderGitHub:
		return true, nil
	}
	msg := "the delivery's Content-Type must be application/json; set the webhook's content type to JSON"
	if provider == config.ProviderGitHub {
		msg = "the delivery's Content-Type must be application/json or application/x-www-form-urlencoded (the webhook's content type json or form)"
	}
	return false, &httpError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type", field: "Content-Type", message: msg}
}

// formPayload returns the JSON a form-encoded GitHub delivery carries in its one payload
// field, and that JSON's object (decodeObject). A body that is not a form, holds no payload
// field or more than one, or whose payload is not one JSON object, is a 400 naming the field.
func formPayload(body []byte) ([]byte, map[string]json.RawMessage, error) {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, nil, &httpError{status: http.StatusBadRequest, code: "invalid_form",
			message: "the form-encoded body is malformed: " + err.Error()}
	}
	if n := len(vals["payload"]); n != 1 {
		return nil, nil, &httpError{status: http.StatusBadRequest, code: "invalid_form", field: "payload",
			message: fmt.Sprintf("a form-encoded GitHub delivery must hold exactly one payload field, holding the JSON; it holds %d", n)}
	}
	payload := []byte(vals["payload"][0])
	obj, err := decodeObject(payload, nameFormPayload)
	if err != nil {
		var he *httpError
		if errors.As(err, &he) && he.field == "" {
			he.field = "payload"
		}
		return nil, nil, err
	}
	return payload, obj, nil
}

// errBadSignature is the answer to a delivery whose signature or token does not verify.
func errBadSignature(msg string) error {
	return &httpError{status: http.StatusUnauthorized, code: "bad_signature", message: msg}
}

// verifyDelivery checks a delivery's signature (github, generic) or token (gitlab) in
// constant time. It returns a 401 *httpError when it does not verify.
func verifyDelivery(provider config.Provider, secret []byte, h http.Header, body []byte) error {
	if len(secret) == 0 {
		return errBadSignature("no secret configured")
	}
	switch provider {
	case config.ProviderGitLab:
		tok := h.Get(headerGitLabToken)
		if tok == "" {
			return errBadSignature("missing " + headerGitLabToken)
		}
		a, b := sha256.Sum256([]byte(tok)), sha256.Sum256(secret)
		if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			return errBadSignature(headerGitLabToken + " does not match")
		}
		return nil
	case config.ProviderGitHub, config.ProviderGeneric:
		name := headerGitHubSignature
		if provider == config.ProviderGeneric {
			name = headerGenericSig
		}
		return verifyHMAC(name, h.Get(name), secret, body)
	}
	return errBadSignature("unknown provider")
}

// verifyShape checks what can be checked before the body is read: GitLab's token whole,
// the others' signature header present and well-formed.
func verifyShape(provider config.Provider, secret []byte, h http.Header) error {
	switch provider {
	case config.ProviderGitHub:
		_, err := parseSignature(headerGitHubSignature, h.Get(headerGitHubSignature))
		return err
	case config.ProviderGeneric:
		_, err := parseSignature(headerGenericSig, h.Get(headerGenericSig))
		return err
	}
	return verifyDelivery(provider, secret, h, nil)
}

// parseSignature checks the shape of a "sha256=<hex>" header value.
func parseSignature(header, value string) ([]byte, error) {
	got, err := hmacsig.Parse(value)
	return got, signatureError(header, err)
}

// verifyHMAC checks "sha256=<hex>" against HMAC-SHA256(secret, body).
func verifyHMAC(header, value string, secret, body []byte) error {
	return signatureError(header, hmacsig.Verify(value, secret, body))
}

// signatureError turns an hmacsig error on header into the 401 answer (nil stays nil).
func signatureError(header string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, hmacsig.ErrMissing):
		return errBadSignature("missing " + header)
	}
	return errBadSignature(header + " " + err.Error())
}

// Sign returns the value of X-Signature-256 (and GitHub's X-Hub-Signature-256) for body:
// "sha256=" and the hex HMAC-SHA256 of body under secret. CI scripts calling the generic
// webhook and tests use it.
func Sign(secret, body []byte) string { return hmacsig.Sign(secret, body) }

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

// githubWorkflowRun is the part of a GitHub workflow_run delivery the daemon reads.
type githubWorkflowRun struct {
	Action      string `json:"action"`
	WorkflowRun *struct {
		Name       string `json:"name"`
		HeadBranch string `json:"head_branch"`
		HeadSHA    string `json:"head_sha"`
		RunNumber  int64  `json:"run_number"`
		Event      string `json:"event"`
		Status     string `json:"status"`
		Conclusion string `json:"conclusion"`
		Path       string `json:"path"`
		// HeadRepository is where the run's code came from: another repository's (a fork's
		// pull request) never deploys.
		HeadRepository *githubRepo `json:"head_repository"`
	} `json:"workflow_run"`
	Repository githubRepo `json:"repository"`
}

// githubPush is the part of a GitHub push delivery the daemon reads.
type githubPush struct {
	Ref        string     `json:"ref"`
	After      string     `json:"after"`
	Deleted    bool       `json:"deleted"`
	Repository githubRepo `json:"repository"`
}

type githubRepo struct {
	FullName string `json:"full_name"`
}

func parseGitHub(event string, body []byte) (ciEvent, error) {
	switch event {
	case "ping":
		return ciEvent{Event: event, Ignore: "ping: the webhook is set up"}, nil
	case "workflow_run":
		var p githubWorkflowRun
		if err := decodeLenient(body, &p); err != nil {
			return ciEvent{}, err
		}
		if p.WorkflowRun == nil {
			return ciEvent{}, fieldErr("workflow_run", "missing from a workflow_run delivery")
		}
		wr := p.WorkflowRun
		// head_branch is a branch name, taken as it is (never stripped of refs/heads/).
		ev := ciEvent{
			Event: event, Repository: p.Repository.FullName, Branch: wr.HeadBranch, Workflow: wr.Name, Source: wr.Event,
			Trigger: orchestrator.Trigger{Build: strconv.FormatInt(wr.RunNumber, 10), Commit: wr.HeadSHA},
		}
		switch {
		case p.Action != "completed":
			ev.Ignore = fmt.Sprintf("workflow_run action %q: only completed runs deploy", truncate(p.Action, 32))
		case wr.Conclusion != "success":
			ev.Ignore = fmt.Sprintf("workflow_run concluded %q: only successful runs deploy", truncate(wr.Conclusion, 32))
		case wr.HeadRepository == nil || !strings.EqualFold(wr.HeadRepository.FullName, p.Repository.FullName):
			head := "none"
			if wr.HeadRepository != nil {
				head = fmt.Sprintf("%q", truncate(wr.HeadRepository.FullName, 128))
			}
			ev.Ignore = fmt.Sprintf("workflow_run head_repository %s is not the repository %q: runs of another repository's code (a fork's pull request) never deploy",
				head, truncate(p.Repository.FullName, 128))
		}
		return ev, nil
	case "push":
		var p githubPush
		if err := decodeLenient(body, &p); err != nil {
			return ciEvent{}, err
		}
		if p.Ref == "" {
			return ciEvent{}, fieldErr("ref", "missing from a push delivery")
		}
		ev := ciEvent{Event: event, Repository: p.Repository.FullName, Source: "push",
			Branch: branchOfRef(p.Ref), Trigger: orchestrator.Trigger{Commit: p.After}}
		if p.Deleted {
			ev.Ignore = "push deleted the ref: nothing to deploy"
		}
		return ev, nil
	case "":
		return ciEvent{}, &httpError{status: http.StatusBadRequest, code: "invalid", field: headerGitHubEvent, message: "missing " + headerGitHubEvent}
	}
	return ciEvent{Event: event, Ignore: fmt.Sprintf("GitHub event %q is not a deploy signal (workflow_run and push are)", truncate(event, 64))}, nil
}

// branchOfRef returns the branch a push's ref names: the ref without its one "refs/heads/"
// prefix ("refs/heads/refs/heads/main" is the branch "refs/heads/main"), or "" for a tag or
// any other ref.
func branchOfRef(ref string) string {
	b, ok := strings.CutPrefix(ref, "refs/heads/")
	if !ok {
		return ""
	}
	return b
}

// GitLab event kinds, by X-Gitlab-Event, and the object_kind each carries (read when the
// header is missing).
var gitlabKinds = map[string]string{
	"pipeline": "Pipeline Hook", "push": "Push Hook", "tag_push": "Tag Push Hook",
	"merge_request": "Merge Request Hook", "build": "Job Hook", "deployment": "Deployment Hook",
	"release": "Release Hook", "note": "Note Hook", "issue": "Issue Hook",
}

// gitlabPipeline is the part of a GitLab pipeline event the daemon reads.
type gitlabPipeline struct {
	ObjectAttributes *struct {
		ID     int64   `json:"id"`
		Name   *string `json:"name"`
		Ref    string  `json:"ref"`
		Tag    bool    `json:"tag"`
		SHA    string  `json:"sha"`
		Source string  `json:"source"`
		Status string  `json:"status"`
	} `json:"object_attributes"`
	// MergeRequest is set on a merge-request pipeline.
	MergeRequest json.RawMessage `json:"merge_request"`
	Project      gitlabProject   `json:"project"`
}

// gitlabPush is the part of a GitLab push or tag push event the daemon reads.
type gitlabPush struct {
	Ref     string        `json:"ref"`
	After   string        `json:"after"`
	Project gitlabProject `json:"project"`
}

type gitlabProject struct {
	PathWithNamespace string `json:"path_with_namespace"`
}

// zeroSHA is the "after" of a push that deleted its ref.
const zeroSHA = "0000000000000000000000000000000000000000"

// parseGitLab reduces a GitLab event to a ciEvent. GitLab disables a hook whose deliveries
// keep failing, so nothing here is an error: an event of a kind that is not a deploy signal,
// or of an unexpected shape, is ignored with the reason, whatever else the body holds.
// obj is body's JSON object (decodeObject), where the kind is read when the header is missing.
func parseGitLab(event string, body []byte, obj map[string]json.RawMessage) (ciEvent, error) {
	kind := event
	if kind == "" {
		var k string
		_ = json.Unmarshal(obj["object_kind"], &k) // a kind missing or of the wrong type stays unknown
		kind = gitlabKinds[k]
	}
	notUnderstood := func(err error) (ciEvent, error) {
		return ciEvent{Event: kind, Ignore: fmt.Sprintf("GitLab %s not understood, so not a deploy signal: %v", truncate(kind, 64), err)}, nil
	}
	switch kind {
	case "Pipeline Hook":
		var p gitlabPipeline
		if err := decodeLenient(body, &p); err != nil {
			return notUnderstood(err)
		}
		oa := p.ObjectAttributes
		if oa == nil {
			return notUnderstood(errors.New("no object_attributes"))
		}
		ev := ciEvent{Event: "pipeline", Repository: p.Project.PathWithNamespace, Workflow: oa.Source, Source: oa.Source,
			Trigger: orchestrator.Trigger{Build: strconv.FormatInt(oa.ID, 10), Commit: oa.SHA}}
		if oa.Name != nil && *oa.Name != "" {
			ev.Workflow = *oa.Name
		}
		if !oa.Tag {
			ev.Branch = oa.Ref // a branch name as GitLab gives it, never stripped of refs/heads/
		}
		switch {
		case config.NeverDeploys(config.ProviderGitLab, oa.Source) || (len(p.MergeRequest) > 0 && string(p.MergeRequest) != "null"):
			ev.Ignore = "merge-request pipelines never deploy (they run a merge request's code, maybe a fork's)"
		case oa.Status != "success":
			ev.Ignore = fmt.Sprintf("pipeline status %q: only successful pipelines deploy", truncate(oa.Status, 32))
		}
		return ev, nil
	case "Push Hook", "Tag Push Hook":
		var p gitlabPush
		if err := decodeLenient(body, &p); err != nil {
			return notUnderstood(err)
		}
		ev := ciEvent{Event: "push", Repository: p.Project.PathWithNamespace, Source: "push",
			Branch: branchOfRef(p.Ref), Trigger: orchestrator.Trigger{Commit: p.After}}
		if p.After == zeroSHA || p.After == "" {
			ev.Ignore = "push deleted the ref: nothing to deploy"
		}
		return ev, nil
	}
	if kind == "" {
		kind = "without X-Gitlab-Event or object_kind"
	}
	return ciEvent{Event: kind,
		Ignore: fmt.Sprintf("GitLab event %q is not a deploy signal (pipeline events are)", truncate(kind, 64))}, nil
}

// genericDelivery is the body of the generic webhook. Every field is optional; rules match on
// event, repository, branch and workflow, and the trigger fields become the run's defaults
// (build a string or a whole number, as for the API). Other fields are allowed and can be read
// by rules with ${payload.…}.
type genericDelivery struct {
	Event      string            `json:"event"`
	Repository string            `json:"repository"`
	Branch     string            `json:"branch"`
	Workflow   string            `json:"workflow"`
	Build      buildText         `json:"build"`
	ImageTag   string            `json:"image_tag"`
	Commit     string            `json:"commit"`
	AppVersion string            `json:"app_version"`
	Params     map[string]string `json:"params"`
}

// parseGeneric reads a generic delivery, its JSON object's members (obj, from decodeObject). A
// field it reads that holds a value of the wrong type is a 400 naming it, every such field at
// once.
func parseGeneric(obj map[string]json.RawMessage) (ciEvent, error) {
	var p genericDelivery
	if es := decodeFields(obj, false, stringField("event", &p.Event), stringField("repository", &p.Repository),
		stringField("branch", &p.Branch), stringField("workflow", &p.Workflow), buildField(&p.Build),
		stringField("image_tag", &p.ImageTag), stringField("commit", &p.Commit), stringField("app_version", &p.AppVersion),
		paramsField(&p.Params)); len(es) > 0 {
		return ciEvent{}, es
	}
	return ciEvent{Event: p.Event, Repository: p.Repository, Branch: p.Branch, Workflow: p.Workflow,
		Trigger: orchestrator.Trigger{Build: string(p.Build), ImageTag: p.ImageTag, Commit: p.Commit, AppVersion: p.AppVersion, Params: p.Params}}, nil
}

// matchRule returns the first of the hook's rules that matches ev (config.Webhook.Match) and
// its index; nil when none does.
func matchRule(hook *config.Webhook, provider config.Provider, ev ciEvent) (int, *config.WebhookRule) {
	rule, ok := hook.Match(matchEvent(provider, ev))
	if !ok {
		return -1, nil
	}
	for i := range hook.Rules {
		if &hook.Rules[i] == rule {
			return i, rule
		}
	}
	return -1, rule
}

// matchEvent is what rules match ev on.
func matchEvent(provider config.Provider, ev ciEvent) config.Event {
	return config.Event{Provider: provider, Repository: ev.Repository, Branch: ev.Branch,
		Workflow: ev.Workflow, Event: ev.Event, Source: ev.Source}
}

// ruleTrigger builds the run's trigger: the event's defaults, overridden by the values of the
// rule's template (config.WebhookRule.TriggerFor fills its ${payload.…} references from the
// delivery's object, obj). The result passes the same validation as a trigger sent to the
// API; a rule that yields an invalid trigger answers 422 naming the rule's field.
func ruleTrigger(i int, rule *config.WebhookRule, ev ciEvent, obj map[string]json.RawMessage) (orchestrator.Trigger, error) {
	field := func(name string) string { return fmt.Sprintf("webhooks rules[%d].%s", i, name) }
	tt, err := rule.TriggerFor(obj)
	if err != nil {
		if es := orchestrator.AsFieldErrors(err); len(es) > 0 {
			return orchestrator.Trigger{}, unprocessable(field(es[0].Field), ruleProblems(field, es))
		}
		return orchestrator.Trigger{}, unprocessable(field("trigger"), err)
	}
	t := ev.Trigger
	for _, f := range []struct{ v, dst *string }{
		{&tt.Build, &t.Build}, {&tt.ImageTag, &t.ImageTag}, {&tt.Commit, &t.Commit}, {&tt.AppVersion, &t.AppVersion},
	} {
		if *f.v != "" {
			*f.dst = *f.v
		}
	}
	if len(tt.Params) > 0 {
		params := make(map[string]string, len(t.Params)+len(tt.Params))
		for k, v := range t.Params {
			params[k] = v
		}
		for k, v := range tt.Params {
			params[k] = v
		}
		t.Params = params
	}
	if err := t.Validate(); err != nil {
		if es := orchestrator.AsFieldErrors(err); len(es) > 0 {
			tf := func(name string) string { return field("trigger." + name) }
			return orchestrator.Trigger{}, unprocessable(tf(es[0].Field), ruleProblems(tf, es))
		}
		return orchestrator.Trigger{}, err
	}
	if rule.Rollback {
		t.Rollback, t.Reason = true, fmt.Sprintf("webhook rule rules[%d] deploys rollbacks", i)
	}
	return t, nil
}

// ruleProblems is every problem of a rule's trigger, each naming the rule's field.
func ruleProblems(field func(string) string, es orchestrator.FieldErrors) error {
	if len(es) == 1 {
		return errors.New(es[0].Reason)
	}
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = field(e.Field) + ": " + e.Reason
	}
	return errors.New(strings.Join(msgs, "; "))
}

func unprocessable(field string, err error) error {
	return &httpError{status: http.StatusUnprocessableEntity, code: "invalid_trigger", field: field,
		message: fmt.Sprintf("the matching rule yields an invalid %s: %v", field, err)}
}
