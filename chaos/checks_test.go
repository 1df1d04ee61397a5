package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
)

// The checks below read the fake Coolify's own history (coolifytest.History) and say what
// broke a promise, one line per violation. newWorld runs them all after every scenario, once
// its daemons are gone; TestCheckersSeeViolations shows each one fails on a history that
// breaks its promise.

// check is one promise checked against a history; it returns one line per violation.
type check struct {
	name string
	fn   func(coolifytest.History) []string
}

// checks are run after every scenario.
var checks = []check{
	{"every mutating request carries X-Orchestrator-Run and a numeric X-Orchestrator-Fence", checkHeaders},
	{"no mutating request hits an application while another run's deployment of it is in progress", checkNoWriteOverDeployment},
	{"the mutating requests of one lease never interleave with another lease's on the same application", checkLeasesDoNotInterleave},
	{"no deployment runs another run's config", checkDeploymentsRunTheirOwnConfig},
	{"each application ends running the config last synced to it", checkNewestConfigWins},
}

// runChecks reports every violation of every check as a test error.
func runChecks(t *testing.T, h coolifytest.History) {
	t.Helper()
	for _, c := range checks {
		if v := c.fn(h); len(v) > 0 {
			t.Errorf("promise broken: %s:\n  %s", c.name, strings.Join(v, "\n  "))
		}
	}
}

// applied reports whether the call reached its handler and succeeded there (it changed
// something, even when an injected fault hid the answer).
func applied(c coolifytest.Call) bool { return c.Handled >= 200 && c.Handled < 300 }

func describe(c coolifytest.Call) string {
	return fmt.Sprintf("#%d %s %s (run %q fence %q, %s, answered %d)", c.Seq, c.Method, c.Path, c.Run, c.Fence,
		c.At.Format("15:04:05.000"), c.Status)
}

func describeSpan(s coolifytest.Span) string {
	end := "still in progress"
	if !s.End.IsZero() {
		end = s.End.Format("15:04:05.000")
	}
	return fmt.Sprintf("deployment %s of run %q [%s, %s]", s.Deployment, s.Run, s.Start.Format("15:04:05.000"), end)
}

// checkHeaders: every mutating request Coolify accepted (answered 2xx) carries the run and its
// lease's fence. Refused requests are left out, so a probe that is meant to be refused (an
// ability check) does not count.
func checkHeaders(h coolifytest.History) []string {
	var out []string
	for _, c := range h.Calls {
		if !c.Mutating() || c.Status < 200 || c.Status >= 300 {
			continue
		}
		if f, err := strconv.ParseInt(c.Fence, 10, 64); c.Run == "" || err != nil || f <= 0 {
			out = append(out, describe(c)+": missing or malformed X-Orchestrator-Run / X-Orchestrator-Fence")
		}
	}
	return out
}

// checkNoWriteOverDeployment: while a deployment of an application is in progress, no mutating
// request about that application comes from any run but the one that started it. Canceling
// that very deployment is allowed (it is how a deployment nobody guards is stopped).
func checkNoWriteOverDeployment(h coolifytest.History) []string {
	byApp := map[string][]coolifytest.Span{}
	for _, s := range h.Spans {
		byApp[s.App] = append(byApp[s.App], s)
	}
	var out []string
	for _, c := range h.Calls {
		if !c.Mutating() || c.Handled == 0 {
			continue
		}
		for _, app := range c.Apps {
			for _, s := range byApp[app] {
				if s.Run != c.Run && s.InProgressAt(c.At) && c.Deployment != s.Deployment {
					out = append(out, fmt.Sprintf("%s hit %s during %s", describe(c), app, describeSpan(s)))
				}
			}
		}
	}
	return out
}

// checkLeasesDoNotInterleave: per application, the mutating requests made under one lease
// (one run and fence) span a time no other lease's mutating requests fall into.
func checkLeasesDoNotInterleave(h coolifytest.History) []string {
	type lease struct{ app, run, fence string }
	type span struct {
		lease      lease
		start, end time.Time
	}
	spans := map[lease]*span{}
	for _, c := range h.Calls {
		if !c.Mutating() || c.Handled == 0 {
			continue
		}
		for _, app := range c.Apps {
			k := lease{app, c.Run, c.Fence}
			s := spans[k]
			if s == nil {
				s = &span{lease: k, start: c.At, end: c.At}
				spans[k] = s
			}
			if c.At.Before(s.start) {
				s.start = c.At
			}
			if c.At.After(s.end) {
				s.end = c.At
			}
		}
	}
	var all []*span
	for _, s := range spans {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].start.Before(all[j].start) })
	var out []string
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.lease.app == b.lease.app && b.start.Before(a.end) {
				out = append(out, fmt.Sprintf("%s: run %q fence %q [%s, %s] interleaves with run %q fence %q [%s, %s]",
					a.lease.app, a.lease.run, a.lease.fence, a.start.Format("15:04:05.000"), a.end.Format("15:04:05.000"),
					b.lease.run, b.lease.fence, b.start.Format("15:04:05.000"), b.end.Format("15:04:05.000")))
			}
		}
	}
	return out
}

// checkDeploymentsRunTheirOwnConfig: a deployment a run started read a config that run wrote
// last (or one no run had written), never one another run wrote after it.
func checkDeploymentsRunTheirOwnConfig(h coolifytest.History) []string {
	var out []string
	for _, s := range h.Spans {
		if s.Start.IsZero() || s.Run == "" || s.ConfigBy == "" || s.ConfigBy == s.Run {
			continue
		}
		out = append(out, fmt.Sprintf("%s of %s ran the config run %q wrote (tag %q, env %v)",
			describeSpan(s), s.App, s.ConfigBy, s.Config.ImageTag, s.Config.Env))
	}
	return out
}

// checkNewestConfigWins: each application some run changed ends running what it carries, the
// config the last run that synced it wrote (or restored).
func checkNewestConfigWins(h coolifytest.History) []string {
	var out []string
	apps := make([]string, 0, len(h.Apps))
	for app := range h.Apps {
		apps = append(apps, app)
	}
	slices.Sort(apps)
	for _, app := range apps {
		st := h.Apps[app]
		if st.LastWriter == "" || st.Running.Equal(st.Current) {
			continue
		}
		out = append(out, fmt.Sprintf("%s carries tag %q env %v, last synced by run %q, but runs tag %q env %v",
			app, st.Current.ImageTag, st.Current.Env, st.LastWriter, st.Running.ImageTag, st.Running.Env))
	}
	return out
}

// TestCheckersSeeViolations feeds each check a history that breaks its promise (and one that
// keeps it), so a check that cannot fail is caught here rather than trusted.
func TestCheckersSeeViolations(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cfg := func(tag, build string) coolifytest.Config {
		return coolifytest.Config{ImageTag: tag, Env: map[string]string{"BUILD": build}}
	}
	call := func(seq uint64, method, route, run, fence string, s int, apps ...string) coolifytest.Call {
		return coolifytest.Call{Seq: seq, Method: method, Route: route, Path: route, Run: run, Fence: fence,
			Status: 200, Handled: 200, At: at(s), Start: at(s), End: at(s), Apps: apps}
	}
	// Run r1 syncs and deploys a (deployment d1, in progress from 10 s to 30 s); run r2 syncs a
	// after it and deploys it (d2, 31 s to 40 s).
	good := coolifytest.History{
		Calls: []coolifytest.Call{
			call(1, "PATCH", "PATCH /applications/{uuid}", "r1", "5", 1, appA),
			call(2, "POST", "POST /deploy", "r1", "6", 9, appA),
			call(3, "GET", "GET /deployments/{uuid}", "", "", 20, appA),
			call(4, "PATCH", "PATCH /applications/{uuid}", "r2", "7", 31, appA),
			call(5, "POST", "POST /deploy", "r2", "8", 31, appA),
		},
		Spans: []coolifytest.Span{
			{Deployment: "d1", App: appA, Run: "r1", Status: "finished", Queued: at(9), Start: at(10), End: at(30), Config: cfg("v2", "1"), ConfigBy: "r1"},
			{Deployment: "d2", App: appA, Run: "r2", Status: "finished", Queued: at(31), Start: at(31), End: at(40), Config: cfg("v3", "2"), ConfigBy: "r2"},
		},
		Apps: map[string]coolifytest.AppState{appA: {Current: cfg("v3", "2"), Running: cfg("v3", "2"), LastWriter: "r2"}},
	}
	for _, c := range checks {
		if v := c.fn(good); len(v) > 0 {
			t.Errorf("%s: a history that keeps the promise reads as broken:\n%s", c.name, strings.Join(v, "\n"))
		}
	}

	clone := func() coolifytest.History {
		h := good
		h.Calls = slices.Clone(good.Calls)
		h.Spans = slices.Clone(good.Spans)
		h.Apps = map[string]coolifytest.AppState{appA: good.Apps[appA]}
		return h
	}
	cases := []struct {
		name   string
		check  func(coolifytest.History) []string
		breaks func(h *coolifytest.History)
	}{
		{"a write without the run header", checkHeaders, func(h *coolifytest.History) { h.Calls[0].Run = "" }},
		{"a write without a fence", checkHeaders, func(h *coolifytest.History) { h.Calls[3].Fence = "" }},
		{"a write with a fence that is not a number", checkHeaders, func(h *coolifytest.History) { h.Calls[4].Fence = "abc" }},
		{"a write over another run's deployment", checkNoWriteOverDeployment, func(h *coolifytest.History) {
			h.Calls[3].At = at(15) // r2's Phase 1 PATCHes a while d1 runs
		}},
		{"a deploy over another run's deployment", checkNoWriteOverDeployment, func(h *coolifytest.History) {
			h.Calls[4].At = at(29)
		}},
		{"an unheadered write over a deployment", checkNoWriteOverDeployment, func(h *coolifytest.History) {
			h.Calls = append(h.Calls, call(6, "DELETE", "DELETE /applications/{uuid}/envs/{env_uuid}", "", "", 12, appA))
		}},
		{"a write over a deployment that never ends", checkNoWriteOverDeployment, func(h *coolifytest.History) {
			h.Spans[0].End = time.Time{}
		}},
		{"two leases interleaving", checkLeasesDoNotInterleave, func(h *coolifytest.History) {
			h.Calls = append(h.Calls, call(6, "PATCH", "PATCH /applications/{uuid}/envs", "r1", "5", 32, appA))
		}},
		{"a deployment running another run's config", checkDeploymentsRunTheirOwnConfig, func(h *coolifytest.History) {
			h.Spans[1].ConfigBy = "r3"
		}},
		{"an application left running an older config", checkNewestConfigWins, func(h *coolifytest.History) {
			st := h.Apps[appA]
			st.Running = cfg("v2", "1")
			h.Apps[appA] = st
		}},
		{"an application running a mix", checkNewestConfigWins, func(h *coolifytest.History) {
			st := h.Apps[appA]
			st.Running = cfg("v3", "1")
			h.Apps[appA] = st
		}},
	}
	for _, tc := range cases {
		h := clone()
		tc.breaks(&h)
		if v := tc.check(h); len(v) == 0 {
			t.Errorf("%s: the check saw nothing", tc.name)
		} else {
			t.Logf("%s: %s", tc.name, v[0])
		}
	}
	// Canceling the very deployment in progress is not a write over it.
	h := clone()
	h.Calls = append(h.Calls, coolifytest.Call{Seq: 6, Method: "POST", Route: "POST /deployments/{uuid}/cancel", Run: "r9", Fence: "9",
		Status: 200, Handled: 200, At: at(20), Apps: []string{appA}, Deployment: "d1"})
	if v := checkNoWriteOverDeployment(h); len(v) > 0 {
		t.Errorf("a cancel of the deployment in progress reads as a write over it: %v", v)
	}
	// A refused probe without headers is not counted.
	h = clone()
	h.Calls = append(h.Calls, coolifytest.Call{Seq: 6, Method: "POST", Route: "POST /deploy", Status: 400, Handled: 400, At: at(50)})
	if v := checkHeaders(h); len(v) > 0 {
		t.Errorf("a refused probe counts: %v", v)
	}
}
