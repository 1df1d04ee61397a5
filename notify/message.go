package notify

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Event is what a notification is about. Run events (succeeded, failed, canceled,
// interrupted, lock_wait) carry Run; a freeze or unfreeze carries Lock.
//
// Nothing here is a secret: runs and lock infos hold names, tags, commits and messages only.
type Event struct {
	Kind config.NotifyEvent
	// Run is the run as stored: for a run's end, its final state.
	Run *runs.Run
	// Service is the service a failed run failed on ("" when none, or not a service).
	Service string
	// Lock describes the lock a run waits on (lock_wait) or the frozen key (freeze,
	// unfreeze).
	Lock *Lock
	// At is when it happened (default: when Notify was called).
	At time.Time
}

// Lock is the lock part of an event.
type Lock struct {
	Key string `json:"key"`
	// Holder and Message are the current holder's (lock_wait), or the operator and the
	// freeze's message (freeze), or who lifted it and why (unfreeze).
	Holder  string `json:"holder,omitempty"`
	Message string `json:"message,omitempty"`
	// Waited is how long the run has waited (lock_wait).
	Waited time.Duration `json:"-"`
	// Until is when a freeze expires (freeze).
	Until time.Time `json:"until,omitzero"`
}

// Payload is the JSON body a "webhook" target receives (and the data the Slack and Discord
// texts are written from). Fields that do not apply are left out.
type Payload struct {
	Event       config.NotifyEvent `json:"event"`
	At          time.Time          `json:"at"`
	Text        string             `json:"text"`
	Link        string             `json:"link,omitempty"`
	Pipeline    string             `json:"pipeline,omitempty"`
	RunID       string             `json:"run_id,omitempty"`
	Status      runs.Status        `json:"status,omitempty"`
	Build       string             `json:"build,omitempty"`
	ImageTag    string             `json:"image_tag,omitempty"`
	Commit      string             `json:"commit,omitempty"`
	TriggeredBy string             `json:"triggered_by,omitempty"`
	// Origin is what asked for the run: the CI job, person, repository and delivery.
	Origin *orchestrator.Origin `json:"origin,omitempty"`
	// DurationSeconds is how long the run took (run ends) or has waited (lock_wait).
	DurationSeconds float64 `json:"duration_seconds,omitempty"`
	Service         string  `json:"service,omitempty"`
	Reason          string  `json:"reason,omitempty"`
	Lock            *Lock   `json:"lock,omitempty"`
}

// payload builds the event's payload; base is the dashboard's address ("" for no link).
func payload(ev Event, base string) Payload {
	p := Payload{Event: ev.Kind, At: ev.At.UTC(), Service: ev.Service, Lock: ev.Lock}
	base = strings.TrimSuffix(base, "/")
	if r := ev.Run; r != nil {
		p.Pipeline, p.RunID, p.Status = r.Pipeline, r.ID, r.Status
		p.Build, p.ImageTag, p.Commit, p.TriggeredBy = r.Trigger.Build, r.Trigger.ImageTag, r.Trigger.Commit, r.Trigger.By
		if o := r.Trigger.Origin; !o.IsZero() {
			o.Traceparent = "" // for traces, not people
			p.Origin = &o
		}
		if base != "" {
			p.Link = base + "/runs/" + r.ID
		}
		if ev.Kind != config.NotifyLockWait {
			p.Reason = r.Reason
			p.DurationSeconds = runDuration(*r).Seconds()
		}
	} else if base != "" {
		p.Link = base + "/"
	}
	if ev.Kind == config.NotifyLockWait && ev.Lock != nil {
		p.DurationSeconds = ev.Lock.Waited.Seconds()
	}
	p.Text = text(p)
	return p
}

// runDuration is how long a run took: from its start (or creation) to its end.
func runDuration(r runs.Run) time.Duration {
	from := r.StartedAt
	if from.IsZero() {
		from = r.CreatedAt
	}
	if r.EndedAt.IsZero() || from.IsZero() {
		return 0
	}
	return r.EndedAt.Sub(from)
}

// maxText bounds a message's text (Discord takes at most 2000 characters).
const maxText = 1900

// text is the one-paragraph message Slack and Discord show.
func text(p Payload) string {
	var b strings.Builder
	dur := round(time.Duration(p.DurationSeconds * float64(time.Second)))
	switch p.Event {
	case config.NotifySucceeded, config.NotifyFailed, config.NotifyCanceled, config.NotifyInterrupted:
		fmt.Fprintf(&b, "%s %s: build %s %s", icon(p.Event), p.Pipeline, cmp.Or(p.Build, "(none)"), p.Event)
		if p.Service != "" {
			fmt.Fprintf(&b, " on %s", p.Service)
		}
		fmt.Fprintf(&b, " after %s", dur)
		if p.Reason != "" {
			fmt.Fprintf(&b, ": %s", p.Reason)
		}
		b.WriteString(".")
	case config.NotifyLockWait:
		fmt.Fprintf(&b, "%s %s: build %s has waited %s for %s", icon(p.Event), p.Pipeline, cmp.Or(p.Build, "(none)"), dur, p.Lock.Key)
		if p.Lock.Holder != "" {
			fmt.Fprintf(&b, ", held by %s", p.Lock.Holder)
		}
		if p.Lock.Message != "" {
			fmt.Fprintf(&b, " (%s)", p.Lock.Message)
		}
		b.WriteString(".")
	case config.NotifyAwaiting:
		fmt.Fprintf(&b, "%s %s: build %s waits for approval", icon(p.Event), p.Pipeline, cmp.Or(p.Build, "(none)"))
		if p.Reason != "" {
			fmt.Fprintf(&b, ": %s", p.Reason)
		}
		b.WriteString(".")
	case config.NotifyFreeze:
		fmt.Fprintf(&b, "%s %s frozen by %s until %s: %s", icon(p.Event), p.Lock.Key, cmp.Or(p.Lock.Holder, "(none)"),
			p.Lock.Until.UTC().Format(time.RFC3339), p.Lock.Message)
	case config.NotifyUnfreeze:
		fmt.Fprintf(&b, "%s freeze on %s lifted by %s", icon(p.Event), p.Lock.Key, cmp.Or(p.Lock.Holder, "(none)"))
		if p.Lock.Message != "" {
			fmt.Fprintf(&b, ": %s", p.Lock.Message)
		}
	}
	if p.RunID != "" {
		fmt.Fprintf(&b, " Image %s, commit %s, triggered by %s", cmp.Or(p.ImageTag, "(none)"), cmp.Or(shortCommit(p.Commit), "(none)"), cmp.Or(p.TriggeredBy, "(none)"))
		if p.Origin != nil {
			fmt.Fprintf(&b, " (%s)", p.Origin)
		}
		b.WriteString(".")
	}
	if p.Link != "" {
		fmt.Fprintf(&b, " %s", p.Link)
	}
	s := b.String()
	if len(s) > maxText {
		cut := maxText
		for cut > 0 && !utf8.RuneStart(s[cut]) { // not inside a character
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// slackEscaper escapes what Slack reads as markup in a message's text: <!channel>, <@user>
// and <url|label> are control sequences, so a freeze message or a reason that holds them
// would ping a channel or show a disguised link (Slack's formatting guide: escape &, <, >).
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// round shows a duration to the second, or to the millisecond under one second.
func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

func icon(ev config.NotifyEvent) string {
	switch ev {
	case config.NotifySucceeded:
		return "✅"
	case config.NotifyFailed:
		return "❌"
	case config.NotifyLockWait:
		return "⏳"
	case config.NotifyAwaiting:
		return "🙋"
	case config.NotifyFreeze:
		return "🧊"
	case config.NotifyUnfreeze:
		return "🔓"
	}
	return "⚠️"
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// body is what a target of this kind receives for p.
func body(kind config.NotifyKind, p Payload) ([]byte, error) {
	switch kind {
	case config.NotifySlack:
		return json.Marshal(map[string]string{"text": slackEscaper.Replace(p.Text)})
	case config.NotifyDiscord:
		return json.Marshal(map[string]any{"content": p.Text, "allowed_mentions": map[string]any{"parse": []string{}}})
	}
	return json.Marshal(p)
}
