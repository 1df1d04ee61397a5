package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Event is what a webhook delivery is about, as the API extracts it from the provider's
// payload. Branch may be given as a full ref ("refs/heads/main").
type Event struct {
	Repository string
	Branch     string
	Workflow   string
	Event      string
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

// Matches reports whether every non-empty match field of r matches e. Patterns use
// path.Match syntax ('*' does not cross '/'); repositories compare case-insensitively, as
// GitHub and GitLab treat them.
func (r *WebhookRule) Matches(e Event) bool {
	branch := strings.TrimPrefix(e.Branch, "refs/heads/")
	return globMatch(strings.ToLower(r.Repository), strings.ToLower(e.Repository)) &&
		globMatch(r.Branch, branch) &&
		globMatch(r.Workflow, e.Workflow) &&
		globMatch(r.Event, e.Event)
}

func globMatch(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}

// TriggerFor builds the run's parameters from the rule's template and a delivery's JSON body,
// filling each ${payload.a.b} reference with the scalar at that path (a numeric segment
// indexes a list) and turning $${ into ${. The result has passed Trigger.Validate.
//
// Errors: Problems with Field "trigger.<field>" for a reference the payload can't fill (a
// missing path, an object or list where a scalar is wanted) or an invalid result; a payload
// that is not JSON is a single problem on "payload". Payload values are not shown.
func (r *WebhookRule) TriggerFor(payload []byte) (Trigger, error) {
	c := &problems{}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		c.add("payload", "not a JSON document")
		return Trigger{}, c.list
	}
	fill := func(field, s string) string {
		out, err := expandRefs(s, false, func(ref string) (string, error) {
			return payloadValue(doc, ref)
		})
		if err != nil {
			c.add(field, "%v", err)
		}
		return out
	}
	t := Trigger{
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
		return Trigger{}, c.list
	}
	if err := t.Validate(); err != nil {
		for _, p := range AsProblems(err) {
			c.add("trigger."+p.Field, "%s", p.Message)
		}
		return Trigger{}, c.list
	}
	return t, nil
}

// payloadValue returns the scalar at a ${payload.a.b} reference in doc.
func payloadValue(doc any, ref string) (string, error) {
	rest, ok := strings.CutPrefix(ref, payloadRef)
	if !ok {
		return "", fmt.Errorf("unknown reference %s", showRef(ref))
	}
	cur := doc
	for seg := range strings.SplitSeq(rest, ".") {
		switch node := cur.(type) {
		case map[string]any:
			next, ok := node[seg]
			if !ok {
				return "", fmt.Errorf("the payload has no %s", showRef(ref))
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(node) {
				return "", fmt.Errorf("the payload has no %s", showRef(ref))
			}
			cur = node[i]
		default:
			return "", fmt.Errorf("the payload has no %s", showRef(ref))
		}
	}
	switch v := cur.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	case nil:
		return "", fmt.Errorf("%s is null in the payload", showRef(ref))
	default:
		return "", fmt.Errorf("%s is an object or list in the payload, not a value", showRef(ref))
	}
}
