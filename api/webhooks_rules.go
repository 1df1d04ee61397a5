package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
)

// The match step (matchDelivery) and the trigger a matching rule builds (ruleTrigger).

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

// matchDelivery is the match step: the rule that deploys ev and its index, or, when none
// does, the answer saying why (rule nil): "ignored" for an event that is not a deploy
// signal (ev.Ignore), a GitLab push while no rule accepts pushes, or a source no matching
// rule accepts; "unmapped" when no rule matches at all.
func matchDelivery(hook *config.Webhook, provider config.Provider, ev ciEvent) (int, *config.WebhookRule, webhookResponse) {
	ignored := func(reason string) (int, *config.WebhookRule, webhookResponse) {
		return -1, nil, webhookResponse{Status: "ignored", Reason: reason}
	}
	if ev.Ignore != "" {
		return ignored(ev.Ignore)
	}
	if provider == config.ProviderGitLab && ev.Event == "push" && !hasPushRule(hook) {
		return ignored("GitLab push events are not a deploy signal (pipeline events are; a rule with event: push accepts pushes)")
	}
	if i, rule := matchRule(hook, provider, ev); rule != nil {
		return i, rule, webhookResponse{}
	}
	if j, ok := hook.SourceRefused(matchEvent(provider, ev)); ok {
		return ignored(fmt.Sprintf("%s %q is not one rules[%d] accepts (%s)", sourceWord(provider), truncate(ev.Source, 64), j,
			strings.Join(hook.Rules[j].AcceptedSources(provider), ", ")))
	}
	return -1, nil, webhookResponse{Status: "unmapped", Reason: fmt.Sprintf("no rule matches event=%q repository=%q branch=%q workflow=%q",
		ev.Event, ev.Repository, ev.Branch, ev.Workflow)}
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
	return config.Event{Provider: provider, Repository: ev.Repository, Branch: ev.Branch, Tag: ev.Tag,
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
