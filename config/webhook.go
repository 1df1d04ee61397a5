package config

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
)

// Event is what a webhook delivery is about, as the API extracts it from the provider's
// payload.
type Event struct {
	// Provider is the webhook the delivery came to; it decides the default Sources.
	Provider Provider
	// Repository is "owner/name" (GitHub) or the project's path with its namespace (GitLab).
	Repository string
	// Branch is the branch name as the provider names it: the API strips "refs/heads/" from
	// a push's ref once, and nothing here strips it again (a branch may be named
	// "refs/heads/x"). Empty for tags.
	Branch string
	// Tag is the tag's name for a delivery about a tag (a GitLab tag pipeline); empty otherwise.
	Tag      string
	Workflow string
	Event    string
	// Source is what started the CI run: a workflow_run's event (GitHub), a pipeline's source
	// (GitLab), "push" for a push delivery; empty for the generic webhook.
	Source string
}

// Sources a rule accepts when it lists none, per provider, and the ones no rule may accept.
var (
	defaultSources = map[Provider][]string{
		ProviderGitHub: {"push"},
		// Not parent_pipeline: a child pipeline's success comes while its parent may still run
		// later stages that fail, and the parent's own hook follows with the same sha.
		ProviderGitLab: {"push", "web", "schedule", "api", "trigger", "pipeline"},
	}
	// neverSources never deploy: a merge-request pipeline runs a feature branch's code, maybe
	// a fork's, under the target project's name.
	neverSources = map[Provider][]string{
		ProviderGitLab: {"merge_request_event"},
	}
)

// DefaultSources returns the sources a rule of provider p accepts when its Sources is empty
// (nil for the generic webhook, whose events have no source).
func DefaultSources(p Provider) []string { return slices.Clone(defaultSources[p]) }

// NeverDeploys reports whether events from source never deploy on provider p, whatever the
// rules say (GitLab's merge-request pipelines).
func NeverDeploys(p Provider, source string) bool { return slices.Contains(neverSources[p], source) }

// AcceptedSources returns the sources r accepts for provider p: r.Sources, or
// DefaultSources(p) when it lists none.
func (r *WebhookRule) AcceptedSources(p Provider) []string {
	if len(r.Sources) > 0 {
		return r.Sources
	}
	return DefaultSources(p)
}

// Match returns the first rule that matches e, or false when none does (the delivery then
// starts nothing).
func (w *Webhook) Match(e Event) (*WebhookRule, bool) {
	if w == nil {
		return nil, false
	}
	for i := range w.Rules {
		if w.Rules[i].Matches(e) {
			return &w.Rules[i], true
		}
	}
	return nil, false
}

// SourceRefused returns the index of the first rule that would match e but for its source,
// or false when there is none: the delivery is then refused for its source rather than
// unmapped.
func (w *Webhook) SourceRefused(e Event) (int, bool) {
	if w == nil {
		return -1, false
	}
	for i := range w.Rules {
		if w.Rules[i].matchesExceptSource(e) {
			return i, true
		}
	}
	return -1, false
}

// Matches reports whether every non-empty match field of r matches e and r accepts e's
// source. Patterns use path.Match syntax ('*' does not cross '/'); repositories compare
// case-insensitively, as GitHub and GitLab treat them. A GitLab push is matched only by a
// rule whose event is exactly "push" (pipeline events are GitLab's deploy signal).
func (r *WebhookRule) Matches(e Event) bool {
	return r.matchesExceptSource(e) && r.acceptsSource(e)
}

func (r *WebhookRule) matchesExceptSource(e Event) bool {
	if e.Provider == ProviderGitLab && e.Event == "push" && r.Event != "push" {
		return false
	}
	return globMatch(strings.ToLower(r.Repository), strings.ToLower(e.Repository)) &&
		globMatch(r.Branch, e.Branch) &&
		(r.Tag == "" || e.Tag != "" && globMatch(r.Tag, e.Tag)) &&
		globMatch(r.Workflow, e.Workflow) &&
		globMatch(r.Event, e.Event)
}

func (r *WebhookRule) acceptsSource(e Event) bool {
	if e.Provider != ProviderGitHub && e.Provider != ProviderGitLab {
		return true
	}
	if NeverDeploys(e.Provider, e.Source) {
		return false
	}
	return slices.Contains(r.AcceptedSources(e.Provider), e.Source)
}

func globMatch(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}

// TriggerFor builds the run's parameters from the rule's template and a delivery's JSON
// object (its members undecoded, as the API split the body), filling each ${payload.a.b}
// reference with the scalar at that path (a numeric segment indexes a list) and turning $${
// into ${. Only the members on a reference's path are decoded. The result has passed
// orchestrator.Trigger.Validate.
//
// Errors: Problems with Field "trigger.<field>" for a reference the payload can't fill (a
// missing path, an object or list where a scalar is wanted) or an invalid result. Payload
// values are not shown.
func (r *WebhookRule) TriggerFor(payload map[string]json.RawMessage) (orchestrator.Trigger, error) {
	c, doc := &problems{}, &payloadDoc{root: payload}
	fill := func(field, s string) string {
		out, err := expandRefs(s, false, doc.value)
		if err != nil {
			c.add(field, "%v", err)
		}
		return out
	}
	t := orchestrator.Trigger{
		Build:      fill("trigger.build", r.Trigger.Build),
		ImageTag:   fill("trigger.image_tag", r.Trigger.ImageTag),
		Commit:     fill("trigger.commit", r.Trigger.Commit),
		AppVersion: fill("trigger.app_version", r.Trigger.AppVersion),
	}
	if len(r.Trigger.Params) > 0 {
		t.Params = make(map[string]string, len(r.Trigger.Params))
		for _, k := range sortedKeys(r.Trigger.Params) {
			t.Params[k] = fill("trigger.params."+k, r.Trigger.Params[k])
		}
	}
	if len(c.list) > 0 {
		return orchestrator.Trigger{}, c.list
	}
	if err := t.Validate(); err != nil {
		for _, fe := range orchestrator.AsFieldErrors(err) {
			c.add("trigger."+fe.Field, "%s", fe.Reason)
		}
		return orchestrator.Trigger{}, c.list
	}
	return t, nil
}

// payloadDoc reads the values of ${payload.…} references out of a delivery's object,
// splitting each object or list on their paths once (references often share a prefix, as
// workflow_run in ${payload.workflow_run.head_sha} and ${payload.workflow_run.run_number}).
type payloadDoc struct {
	root  map[string]json.RawMessage
	split map[string]any // by path: map[string]json.RawMessage, []json.RawMessage, or nil for neither
}

// value returns the scalar at a ${payload.a.b} reference.
func (d *payloadDoc) value(ref string) (string, error) {
	rest, ok := strings.CutPrefix(ref, payloadRef)
	if !ok {
		return "", fmt.Errorf("unknown reference %s", showRef(ref))
	}
	seg, tail, more := strings.Cut(rest, ".")
	cur, ok := d.root[seg]
	for ok && more {
		path := rest[:len(rest)-len(tail)-1] // the segments that led to cur
		seg, tail, more = strings.Cut(tail, ".")
		cur, ok = d.member(path, cur, seg)
	}
	if !ok || len(cur) == 0 {
		return "", fmt.Errorf("the payload has no %s", showRef(ref))
	}
	switch {
	case cur[0] == '"':
		var s string
		if err := json.Unmarshal(cur, &s); err != nil {
			return "", fmt.Errorf("%s in the payload is not a readable string", showRef(ref))
		}
		return s, nil
	case cur[0] == '{' || cur[0] == '[':
		return "", fmt.Errorf("%s is an object or list in the payload, not a value", showRef(ref))
	case string(cur) == "null":
		return "", fmt.Errorf("%s is null in the payload", showRef(ref))
	default:
		return string(cur), nil // a number or a boolean, as the payload spells it
	}
}

// member returns the member seg of the JSON object at path (raw), or the element at index
// seg of the JSON list there; ok is false when raw is neither or has no such member.
func (d *payloadDoc) member(path string, raw json.RawMessage, seg string) (json.RawMessage, bool) {
	split, done := d.split[path]
	if !done {
		switch {
		case len(raw) > 0 && raw[0] == '{':
			var m map[string]json.RawMessage
			if json.Unmarshal(raw, &m) == nil {
				split = m
			}
		case len(raw) > 0 && raw[0] == '[':
			var l []json.RawMessage
			if json.Unmarshal(raw, &l) == nil {
				split = l
			}
		}
		if d.split == nil {
			d.split = make(map[string]any)
		}
		d.split[path] = split
	}
	switch node := split.(type) {
	case map[string]json.RawMessage:
		v, ok := node[seg]
		return v, ok
	case []json.RawMessage:
		i, err := strconv.Atoi(seg)
		if err != nil || i < 0 || i >= len(node) {
			return nil, false
		}
		return node[i], true
	}
	return nil, false
}
