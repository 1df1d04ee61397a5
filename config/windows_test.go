package config

import (
	"strings"
	"testing"
	"time"
)

const windowsPipeline = `
name: prod
coolify: { url: https://coolify.example.com, token: t }
services: [{ uuid: u1, image_tag: v1 }]
`

// Issue 36, item 3: a pipeline's windows block loads into the verdict gates gives; a bad
// schedule, duration, time zone, freeze or outside value is a problem naming its field.
func TestPipelineWindows(t *testing.T) {
	p, err := LoadPipelineBytes("prod.yaml", []byte(windowsPipeline+`
windows:
  time_zone: Europe/Berlin
  allow: [{ cron: "0 8 * * 1-5", duration: 9h }]
  deny: [{ cron: "0 15 * * 5", duration: 66h, reason: no Friday afternoon deploys }]
  freezes: [{ from: "2026-12-21T00:00:00+01:00", to: "2027-01-04T10:00:00+01:00", reason: holidays }]
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if p.Windows.Outside != OutsideWait {
		t.Errorf("outside: got %q, want the default wait", p.Windows.Outside)
	}
	g := p.Windows.Gates()
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if v := g.Verdict(time.Date(2026, 12, 4, 16, 0, 0, 0, berlin)); v.Open || !strings.Contains(v.Reason, "Friday") {
		t.Errorf("Friday 16:00: %+v", v)
	}
	if v := g.Verdict(time.Date(2026, 12, 22, 10, 0, 0, 0, berlin)); v.Open || !strings.Contains(v.Reason, "holidays") {
		t.Errorf("in the freeze: %+v", v)
	}
	if v := g.Verdict(time.Date(2026, 12, 2, 10, 0, 0, 0, berlin)); !v.Open {
		t.Errorf("Wednesday 10:00: %+v", v)
	}

	_, err = LoadPipelineBytes("prod.yaml", []byte(windowsPipeline+`
windows:
  time_zone: Mars/Olympus
  allow: [{ cron: "0 8 * *", duration: 9h }]
  deny: [{ cron: "@weekly", duration: 0s }]
  freezes: [{ from: "tomorrow", to: "2027-01-04T10:00:00Z" }, { from: "2027-01-04T10:00:00Z", to: "2027-01-01T00:00:00Z" }]
  outside: shrug
`), func(string) string { return "" })
	ps := AsProblems(err)
	for _, w := range []struct{ field, substr string }{
		{"windows.time_zone", "not an IANA time zone"},
		{"windows.allow[0].cron", "not a cron schedule of five fields"},
		{"windows.deny[0].duration", "must be positive"},
		{"windows.freezes[0].from", "not an RFC 3339 time"},
		{"windows.freezes[1].to", "must be after from"},
		{"windows.outside", ""},
	} {
		if _, ok := findProblem(ps, w.field, w.substr); !ok {
			t.Errorf("no problem %s: %s; got:\n%s", w.field, w.substr, strings.Join(ps.Lines(), "\n"))
		}
	}
}
