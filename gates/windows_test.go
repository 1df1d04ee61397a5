package gates_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/gates"
)

func window(t *testing.T, spec string, d time.Duration, reason string) gates.Window {
	t.Helper()
	s, err := gates.ParseSchedule(spec)
	if err != nil {
		t.Fatal(err)
	}
	return gates.Window{Schedule: s, Spec: spec, Duration: d, Reason: reason}
}

// Issue 36, item 3: allow windows, deny windows and freezes in a time zone give the verdict
// and the time it opens next.
func TestVerdict(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	w := &gates.Windows{
		Location: berlin,
		Allow:    []gates.Window{window(t, "0 8 * * 1-5", 9*time.Hour, "office hours")},
		Deny:     []gates.Window{window(t, "0 15 * * 5", 66*time.Hour, "no Friday afternoon deploys")},
		Freezes: []gates.Freeze{{From: time.Date(2026, 12, 21, 0, 0, 0, 0, berlin), To: time.Date(2027, 1, 4, 10, 0, 0, 0, berlin),
			Reason: "holidays"}},
	}
	at := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, berlin) }
	for _, c := range []struct {
		what   string
		now    time.Time
		open   bool
		until  time.Time
		reason string
	}{
		{"Wednesday 10:00", at(2026, 12, 2, 10, 0), true, time.Time{}, ""},
		{"Wednesday 08:00, as it opens", at(2026, 12, 2, 8, 0), true, time.Time{}, ""},
		{"Wednesday 17:00, as it closes", at(2026, 12, 2, 17, 0), false, at(2026, 12, 3, 8, 0), "no allow window"},
		{"Wednesday 23:00 in UTC terms", at(2026, 12, 2, 23, 0).UTC(), false, at(2026, 12, 3, 8, 0), "no allow window"},
		{"Friday 14:59", at(2026, 12, 4, 14, 59), true, time.Time{}, ""},
		{"Friday 15:00, the deny window", at(2026, 12, 4, 15, 0), false, at(2026, 12, 7, 9, 0), "no Friday afternoon deploys"},
		{"Monday 08:30, deny still open", at(2026, 12, 7, 8, 30), false, at(2026, 12, 7, 9, 0), "deny window"},
		{"in the freeze", at(2026, 12, 22, 10, 0), false, at(2027, 1, 4, 10, 0), "holidays"},
		{"Saturday before the freeze", at(2026, 12, 19, 10, 0), false, at(2027, 1, 4, 10, 0), "deny window"},
	} {
		v := w.Verdict(c.now)
		if v.Open != c.open || !v.Until.Equal(c.until) || !strings.Contains(v.Reason, c.reason) {
			t.Errorf("%s: got %+v (%s), want open=%v until %s, reason with %q", c.what, v, v, c.open, c.until, c.reason)
		}
	}
	if v := (&gates.Windows{}).Verdict(time.Now()); !v.Open {
		t.Errorf("no windows: %+v, want open", v)
	}
	// Across the switch to summer time the window opens at 08:00 local time (06:00 UTC, no
	// longer 07:00), and a duration is real time (the 66 h deny window ends at 10:00 CEST).
	if v := w.Verdict(at(2027, 3, 31, 7, 0)); !v.Until.Equal(at(2027, 3, 31, 8, 0)) || v.Until.UTC().Hour() != 6 {
		t.Errorf("after DST: until %s, want 08:00 CEST", v.Until)
	}
	if v := w.Verdict(at(2027, 3, 29, 8, 30)); !v.Until.Equal(at(2027, 3, 29, 10, 0)) {
		t.Errorf("deny window across DST: until %s, want 10:00 CEST", v.Until)
	}
	// Only a deny window: closed inside it, until it ends.
	only := &gates.Windows{Deny: []gates.Window{window(t, "@daily", time.Hour, "")}}
	if v := only.Verdict(time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC)); v.Open || !v.Until.Equal(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)) {
		t.Errorf("daily deny hour: %+v", v)
	}
	if _, err := gates.ParseSchedule("0 8 * *"); err == nil {
		t.Error("a schedule of four fields was accepted")
	}
}
