// Package gates decides whether a run may go ahead now: deploy windows (allow and deny
// windows given as a cron schedule, a duration and a time zone, and one-off dated freezes).
// It reads no config file and calls nothing outside: config builds a Windows from a
// pipeline's `windows` block (and checks its cron schedules with ParseSchedule), the engine
// asks Windows.Verdict before Phase 1 and again before Phase 2, and `plan` shows the verdict.
package gates

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// parser reads the five standard fields (minute hour day-of-month month day-of-week) and
// the descriptors (@daily, @weekly, …).
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule checks a cron schedule of a window: five fields or a descriptor; no seconds
// field and no CRON_TZ= (the window's time zone says where it is read).
func ParseSchedule(spec string) (cron.Schedule, error) {
	s, err := parser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("cron schedule %q: %w", spec, err)
	}
	return s, nil
}

// Window is a recurring window: it opens at each time its schedule names (read in the
// Windows' time zone) and stays open for Duration.
type Window struct {
	Schedule cron.Schedule
	Spec     string // the schedule as written, for messages
	Duration time.Duration
	Reason   string
}

// Freeze is a one-off closed period [From, To).
type Freeze struct {
	From, To time.Time
	Reason   string
}

// Windows are a pipeline's deploy windows. With Allow windows a run may start only inside
// one of them; inside a Deny window or a Freeze it may not, whatever Allow says.
type Windows struct {
	Location *time.Location // nil: UTC
	Allow    []Window
	Deny     []Window
	Freezes  []Freeze
}

// Verdict is whether a run may go ahead at a time, and if not, why and until when.
type Verdict struct {
	Open bool `json:"open"`
	// Reason says why it is closed ("deny window \"0 16 * * 5\" for 64h: weekend").
	Reason string `json:"reason,omitempty"`
	// Until is when it opens next (zero: never within the search horizon, Horizon).
	Until time.Time `json:"until,omitzero"`
}

// String is the verdict as a sentence.
func (v Verdict) String() string {
	switch {
	case v.Open:
		return "inside the deploy windows"
	case v.Until.IsZero():
		return "outside the deploy windows (" + v.Reason + "), and they do not open within " + Horizon.String()
	}
	return "outside the deploy windows (" + v.Reason + ") until " + v.Until.UTC().Format(time.RFC3339)
}

// Horizon bounds how far ahead Verdict looks for the next opening.
const Horizon = 366 * 24 * time.Hour

// Empty reports whether w has no window or freeze: every time is open.
func (w *Windows) Empty() bool {
	return w == nil || len(w.Allow) == 0 && len(w.Deny) == 0 && len(w.Freezes) == 0
}

// Verdict says whether now is inside the windows and, if not, until when it stays outside.
func (w *Windows) Verdict(now time.Time) Verdict {
	if w.Empty() {
		return Verdict{Open: true}
	}
	reason, next := w.closedAt(now)
	if reason == "" {
		return Verdict{Open: true}
	}
	v := Verdict{Reason: reason}
	// Walk from one closing to the end of it until a time is open: a deny window may end
	// inside a freeze, an allow window may open inside a deny window.
	for t := next; !t.IsZero() && t.Sub(now) <= Horizon; {
		r, n := w.closedAt(t)
		if r == "" {
			v.Until = t
			return v
		}
		t = n
	}
	return v
}

// closedAt returns why t is closed ("" when open) and the earliest time after t at which
// that reason ends (zero when it never does).
func (w *Windows) closedAt(t time.Time) (string, time.Time) {
	loc := w.Location
	if loc == nil {
		loc = time.UTC
	}
	t = t.In(loc)
	for _, f := range w.Freezes {
		if !t.Before(f.From) && t.Before(f.To) {
			return "freeze " + f.From.UTC().Format(time.RFC3339) + " to " + f.To.UTC().Format(time.RFC3339) + reasonSuffix(f.Reason), f.To
		}
	}
	for _, d := range w.Deny {
		if start, ok := inside(d, t); ok {
			return fmt.Sprintf("deny window %q for %s%s", d.Spec, d.Duration, reasonSuffix(d.Reason)), start.Add(d.Duration)
		}
	}
	if len(w.Allow) == 0 {
		return "", time.Time{}
	}
	var next time.Time
	for _, a := range w.Allow {
		if _, ok := inside(a, t); ok {
			return "", time.Time{}
		}
		if n := a.Schedule.Next(t); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return "no allow window is open", next
}

// inside reports whether t is inside an occurrence of win, and that occurrence's start: the
// first start after t - Duration, when it is not after t.
func inside(win Window, t time.Time) (time.Time, bool) {
	start := win.Schedule.Next(t.Add(-win.Duration))
	return start, !start.IsZero() && !start.After(t)
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}
