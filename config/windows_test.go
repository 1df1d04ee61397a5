package config

import (
	"os"
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

// Issue 36, items 3 and 4: pipelines that name an environment take its windows and
// approvals, unless they have their own; an unknown environment is a problem naming the
// pipeline file's field.
func TestEnvironments(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/orchestrator.yaml"
	if err := writeFile(path, `environments:
  production:
    windows: { deny: [{ cron: "0 15 * * 5", duration: 66h, reason: weekend }] }
    approvals: { required: 2 }
`); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDaemon(path, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	load := func(name, extra string) *Pipeline {
		p, err := LoadPipelineBytes(name+".yaml", []byte(strings.Replace(windowsPipeline, "name: prod", "name: "+name, 1)+extra), func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	shared, own, none := load("api", "environment: production\n"), load("web", "environment: production\napprovals: { required: 1 }\n"), load("docs", "")
	if err := d.ApplyEnvironments(map[string]*Pipeline{"api": shared, "web": own, "docs": none}); err != nil {
		t.Fatal(err)
	}
	if shared.Approvals == nil || shared.Approvals.Required != 2 || shared.Approvals.ExpireAfter != DefaultApprovalExpiry ||
		shared.Windows == nil || shared.Windows.Outside != OutsideWait || shared.Windows.Deny[0].Reason != "weekend" {
		t.Errorf("api from the environment: approvals %+v windows %+v", shared.Approvals, shared.Windows)
	}
	if own.Approvals.Required != 1 || own.Windows == nil {
		t.Errorf("web keeps its own approvals and takes the windows: %+v %+v", own.Approvals, own.Windows)
	}
	if none.Approvals != nil || none.Windows != nil {
		t.Errorf("docs names no environment and got %+v %+v", none.Approvals, none.Windows)
	}
	err = d.ApplyEnvironments(map[string]*Pipeline{"x": load("x", "environment: staging\n")})
	if _, ok := findProblem(AsProblems(err), "environment", "no environment staging"); !ok {
		t.Errorf("unknown environment: %v", err)
	}
}

func writeFile(path, body string) error { return os.WriteFile(path, []byte(body), 0o600) }
