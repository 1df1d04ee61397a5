package config

import (
	"fmt"
	"slices"
	"time"
)

// Notify says where notifications go: a pipeline's `notify:`, or the daemon's default for
// pipelines that have none (and for freezes, which belong to no pipeline).
//
// Target URLs are secrets: Slack and Discord webhook URLs embed their token. Write them as
// "${VAR}" so they come from the daemon's environment; they are never shown.
type Notify struct {
	Targets []NotifyTarget `koanf:"targets"`
	// LockWait: a run that has waited this long for one lock is announced (once per wait),
	// with the holder and its message. Default DefaultNotifyLockWait.
	LockWait time.Duration `koanf:"lock_wait"`
}

// DefaultNotifyLockWait is Notify.LockWait when the file names none.
const DefaultNotifyLockWait = 2 * time.Minute

// NotifyKind is the receiver's format.
type NotifyKind string

// Notification receivers.
const (
	// NotifySlack posts {"text": …} to a Slack incoming webhook.
	NotifySlack NotifyKind = "slack"
	// NotifyDiscord posts {"content": …} to a Discord webhook.
	NotifyDiscord NotifyKind = "discord"
	// NotifyWebhook posts the event as JSON, signed with X-Signature-256: sha256=<hex of
	// HMAC-SHA256(secret, body)>, the scheme the daemon's own generic webhook accepts.
	NotifyWebhook NotifyKind = "webhook"
)

// NotifyEvent names what a notification is about.
type NotifyEvent string

// Notification events.
const (
	NotifySucceeded   NotifyEvent = "succeeded"
	NotifyFailed      NotifyEvent = "failed"
	NotifyCanceled    NotifyEvent = "canceled"
	NotifyInterrupted NotifyEvent = "interrupted"
	NotifyLockWait    NotifyEvent = "lock_wait"
	NotifyFreeze      NotifyEvent = "freeze"
	NotifyUnfreeze    NotifyEvent = "unfreeze"
	// NotifyAwaiting: a run waits for people's decision (an approval of its plan).
	NotifyAwaiting NotifyEvent = "awaiting"
)

// NotifyEvents lists every notification event, in the order the docs give them.
func NotifyEvents() []NotifyEvent {
	return []NotifyEvent{NotifySucceeded, NotifyFailed, NotifyCanceled, NotifyInterrupted, NotifyLockWait, NotifyFreeze, NotifyUnfreeze, NotifyAwaiting}
}

// NotifyTarget is one receiver.
type NotifyTarget struct {
	// Name identifies the target in run events, logs and metrics (default: the kind). Unique
	// within one notify block.
	Name string     `koanf:"name"`
	Kind NotifyKind `koanf:"kind"`
	// URL is where messages are posted: an absolute http(s) URL.
	URL Secret `koanf:"url"`
	// Secret is the HMAC key of a "webhook" target (required there, refused elsewhere).
	Secret Secret `koanf:"secret"`
	// Events the target receives; empty means all of them.
	Events []NotifyEvent `koanf:"events"`
}

// Wants reports whether the target receives ev.
func (t NotifyTarget) Wants(ev NotifyEvent) bool {
	return len(t.Events) == 0 || slices.Contains(t.Events, ev)
}

// applyNotifyDefaults fills a notify block's defaults (n may be nil).
func applyNotifyDefaults(n *Notify) {
	if n == nil {
		return
	}
	if n.LockWait == 0 {
		n.LockWait = DefaultNotifyLockWait
	}
	for i := range n.Targets {
		if n.Targets[i].Name == "" {
			n.Targets[i].Name = string(n.Targets[i].Kind)
		}
	}
}

// notify checks a notify block (n may be nil). URLs and secrets are never shown.
func (v *validator) notify(field string, n *Notify) {
	if n == nil {
		return
	}
	if n.LockWait < 0 {
		v.add(field+".lock_wait", "must not be negative")
	}
	names := map[string]int{}
	for i := range n.Targets {
		t := &n.Targets[i]
		tf := fmt.Sprintf("%s.targets[%d]", field, i)
		oneOf(v, tf+".kind", t.Kind, NotifySlack, NotifyDiscord, NotifyWebhook)
		if !t.URL.IsSet() {
			v.add(tf+".url", "is required (write it as \"${VAR}\": webhook URLs hold tokens)")
		} else {
			v.httpURL(tf+".url", t.URL.Reveal())
		}
		switch {
		case t.Kind == NotifyWebhook && !t.Secret.IsSet():
			v.add(tf+".secret", "is required for a webhook target: its messages are signed with it")
		case t.Kind == NotifyWebhook:
			v.secretStrength(tf+".secret", t.Secret)
		case t.Secret.IsSet():
			v.add(tf+".secret", "only a webhook target takes a secret (%s URLs carry their own token)", t.Kind)
		}
		for j, ev := range t.Events {
			oneOf(v, fmt.Sprintf("%s.events[%d]", tf, j), ev, NotifyEvents()...)
		}
		if t.Name != "" {
			v.pattern(tf+".name", t.Name, stepNamePattern)
			if j, dup := names[t.Name]; dup {
				v.add(tf+".name", "duplicate target name %s (also %s.targets[%d]); give each target a name", v.show(tf+".name", t.Name), field, j)
			} else {
				names[t.Name] = i
			}
		}
	}
}
