package config

import (
	"fmt"
	"time"

	"github.com/deploy-orchestrator/orchestrator/gates"
)

// Windows are a pipeline's deploy windows: when a run may start Phase 1 and Phase 2.
// Checked before each; a run outside them waits or fails (Outside).
//
//	windows:
//	  time_zone: Europe/Berlin
//	  allow:   [{ cron: "0 8 * * 1-5", duration: 9h }]
//	  deny:    [{ cron: "0 15 * * 5", duration: 66h, reason: no Friday afternoon deploys }]
//	  freezes: [{ from: 2026-12-21T00:00:00+01:00, to: 2027-01-04T10:00:00+01:00, reason: holidays }]
//	  outside: wait
type Windows struct {
	// TimeZone is the IANA zone the cron schedules are read in (default UTC).
	TimeZone string `koanf:"time_zone"`
	// Allow: when set, a run goes ahead only inside one of these.
	Allow []Window `koanf:"allow"`
	// Deny: a run never goes ahead inside one of these.
	Deny []Window `koanf:"deny"`
	// Freezes are one-off closed periods.
	Freezes []DatedFreeze `koanf:"freezes"`
	// Outside says what a run outside the windows does (default OutsideWait).
	Outside Outside `koanf:"outside"`
	// OverrideSecondPerson: an override of the windows for a run takes effect only once a
	// second subject, not the one who asked first, overrides too.
	OverrideSecondPerson bool `koanf:"override_second_person"`
}

// Window is a recurring window: it opens at each time Cron names and lasts Duration.
type Window struct {
	// Cron is a five-field schedule (minute hour day-of-month month day-of-week) or a
	// descriptor (@daily, @weekly).
	Cron     string        `koanf:"cron"`
	Duration time.Duration `koanf:"duration"`
	Reason   string        `koanf:"reason"`
}

// DatedFreeze is a one-off closed period: From (inclusive) to To (exclusive), RFC 3339.
type DatedFreeze struct {
	From   string `koanf:"from"`
	To     string `koanf:"to"`
	Reason string `koanf:"reason"`
}

// Outside says what a run does outside its pipeline's deploy windows.
type Outside string

// Outside values.
const (
	// OutsideWait: the run waits, holding no lock, until the windows open (saying until when).
	OutsideWait Outside = "wait"
	// OutsideFail: the run fails, saying when the windows open next.
	OutsideFail Outside = "fail"
)

// Gates returns the windows as gates evaluates them. Call it on a validated pipeline's
// windows (nil: no windows, always open).
func (w *Windows) Gates() *gates.Windows {
	if w == nil {
		return nil
	}
	g := &gates.Windows{Location: time.UTC}
	if loc, err := time.LoadLocation(w.TimeZone); err == nil && w.TimeZone != "" {
		g.Location = loc
	}
	for _, set := range []struct {
		in  []Window
		out *[]gates.Window
	}{{w.Allow, &g.Allow}, {w.Deny, &g.Deny}} {
		for _, c := range set.in {
			s, err := gates.ParseSchedule(c.Cron)
			if err != nil {
				continue // validation refused it
			}
			*set.out = append(*set.out, gates.Window{Schedule: s, Spec: c.Cron, Duration: c.Duration, Reason: c.Reason})
		}
	}
	for _, f := range w.Freezes {
		from, err1 := time.Parse(time.RFC3339, f.From)
		to, err2 := time.Parse(time.RFC3339, f.To)
		if err1 == nil && err2 == nil {
			g.Freezes = append(g.Freezes, gates.Freeze{From: from, To: to, Reason: f.Reason})
		}
	}
	return g
}

// windows checks a pipeline's windows block and fills its defaults.
func (v *validator) windows(field string, w *Windows) {
	if w == nil {
		return
	}
	if w.Outside == "" {
		w.Outside = OutsideWait
	}
	oneOf(v, field+".outside", w.Outside, OutsideWait, OutsideFail)
	if w.TimeZone != "" {
		if _, err := time.LoadLocation(w.TimeZone); err != nil {
			v.add(field+".time_zone", "%s is not an IANA time zone (such as Europe/Berlin or UTC)", v.show(field+".time_zone", w.TimeZone))
		}
	}
	for kind, list := range map[string][]Window{"allow": w.Allow, "deny": w.Deny} {
		for i, c := range list {
			f := fmt.Sprintf("%s.%s[%d]", field, kind, i)
			if _, err := gates.ParseSchedule(c.Cron); err != nil {
				v.add(f+".cron", "%s is not a cron schedule of five fields (minute hour day-of-month month day-of-week) or a descriptor such as @daily: %v",
					v.show(f+".cron", c.Cron), unwrapCron(err))
			}
			if c.Duration <= 0 {
				v.add(f+".duration", "must be positive (e.g. 9h)")
			}
		}
	}
	for i, fr := range w.Freezes {
		f := fmt.Sprintf("%s.freezes[%d]", field, i)
		from, err1 := time.Parse(time.RFC3339, fr.From)
		if err1 != nil {
			v.add(f+".from", "%s is not an RFC 3339 time (2026-12-21T00:00:00+01:00)", v.show(f+".from", fr.From))
		}
		to, err2 := time.Parse(time.RFC3339, fr.To)
		if err2 != nil {
			v.add(f+".to", "%s is not an RFC 3339 time (2027-01-04T10:00:00+01:00)", v.show(f+".to", fr.To))
		}
		if err1 == nil && err2 == nil && !to.After(from) {
			v.add(f+".to", "must be after from")
		}
	}
}

// unwrapCron is the cron parser's own message, without the schedule ParseSchedule put
// before it.
func unwrapCron(err error) error {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && u.Unwrap() != nil {
		return u.Unwrap()
	}
	return err
}
