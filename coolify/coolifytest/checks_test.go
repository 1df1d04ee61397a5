package coolifytest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
)

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
			call(1, "PATCH", "PATCH /applications/{uuid}", "r1", "5", 1, "app-a"),
			call(2, "POST", "POST /deploy", "r1", "6", 9, "app-a"),
			call(3, "GET", "GET /deployments/{uuid}", "", "", 20, "app-a"),
			call(4, "PATCH", "PATCH /applications/{uuid}", "r2", "7", 31, "app-a"),
			call(5, "POST", "POST /deploy", "r2", "8", 31, "app-a"),
		},
		Spans: []coolifytest.Span{
			{Deployment: "d1", App: "app-a", Run: "r1", Status: "finished", Queued: at(9), Start: at(10), End: at(30), Config: cfg("v2", "1"), ConfigBy: "r1"},
			{Deployment: "d2", App: "app-a", Run: "r2", Status: "finished", Queued: at(31), Start: at(31), End: at(40), Config: cfg("v3", "2"), ConfigBy: "r2"},
		},
		Apps: map[string]coolifytest.AppState{"app-a": {Current: cfg("v3", "2"), Running: cfg("v3", "2"), LastWriter: "r2"}},
	}
	for _, c := range coolifytest.Checks {
		if v := c.Fn(good); len(v) > 0 {
			t.Errorf("%s: a history that keeps the promise reads as broken:\n%s", c.Name, strings.Join(v, "\n"))
		}
	}

	clone := func() coolifytest.History {
		h := good
		h.Calls = slices.Clone(good.Calls)
		h.Spans = slices.Clone(good.Spans)
		h.Apps = map[string]coolifytest.AppState{"app-a": good.Apps["app-a"]}
		return h
	}
	cases := []struct {
		name   string
		check  func(coolifytest.History) []string
		breaks func(h *coolifytest.History)
	}{
		{"a write without the run header", coolifytest.CheckHeaders, func(h *coolifytest.History) { h.Calls[0].Run = "" }},
		{"a write without a fence", coolifytest.CheckHeaders, func(h *coolifytest.History) { h.Calls[3].Fence = "" }},
		{"a write with a fence that is not a number", coolifytest.CheckHeaders, func(h *coolifytest.History) { h.Calls[4].Fence = "abc" }},
		{"a write over another run's deployment", coolifytest.CheckNoWriteOverDeployment, func(h *coolifytest.History) {
			h.Calls[3].At = at(15) // r2's Phase 1 PATCHes a while d1 runs
		}},
		{"a deploy over another run's deployment", coolifytest.CheckNoWriteOverDeployment, func(h *coolifytest.History) {
			h.Calls[4].At = at(29)
		}},
		{"an unheadered write over a deployment", coolifytest.CheckNoWriteOverDeployment, func(h *coolifytest.History) {
			h.Calls = append(h.Calls, call(6, "DELETE", "DELETE /applications/{uuid}/envs/{env_uuid}", "", "", 12, "app-a"))
		}},
		{"a write over a deployment that never ends", coolifytest.CheckNoWriteOverDeployment, func(h *coolifytest.History) {
			h.Spans[0].End = time.Time{}
		}},
		{"two leases interleaving", coolifytest.CheckLeasesDoNotInterleave, func(h *coolifytest.History) {
			h.Calls = append(h.Calls, call(6, "PATCH", "PATCH /applications/{uuid}/envs", "r1", "5", 32, "app-a"))
		}},
		{"a deployment running another run's config", coolifytest.CheckDeploymentsRunTheirOwnConfig, func(h *coolifytest.History) {
			h.Spans[1].ConfigBy = "r3"
		}},
		{"an application left running an older config", coolifytest.CheckNewestConfigWins, func(h *coolifytest.History) {
			st := h.Apps["app-a"]
			st.Running = cfg("v2", "1")
			h.Apps["app-a"] = st
		}},
		{"an application running a mix", coolifytest.CheckNewestConfigWins, func(h *coolifytest.History) {
			st := h.Apps["app-a"]
			st.Running = cfg("v3", "1")
			h.Apps["app-a"] = st
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
		Status: 200, Handled: 200, At: at(20), Apps: []string{"app-a"}, Deployment: "d1"})
	if v := coolifytest.CheckNoWriteOverDeployment(h); len(v) > 0 {
		t.Errorf("a cancel of the deployment in progress reads as a write over it: %v", v)
	}
	// A refused probe without headers is not counted.
	h = clone()
	h.Calls = append(h.Calls, coolifytest.Call{Seq: 6, Method: "POST", Route: "POST /deploy", Status: 400, Handled: 400, At: at(50)})
	if v := coolifytest.CheckHeaders(h); len(v) > 0 {
		t.Errorf("a refused probe counts: %v", v)
	}
}
