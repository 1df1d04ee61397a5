package chaos

import (
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// TestJudgesSeeViolations feeds each campaign judge a record that keeps its promise (no
// violation) and one that breaks it (a violation): a judge that cannot see the bad state
// proves nothing. The fake Coolify's own checks have theirs (coolifytest.TestCheckersSeeViolations).
func TestJudgesSeeViolations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cfg := func(build string) coolifytest.Config {
		return coolifytest.Config{ImageTag: "v" + build, Env: map[string]string{"BUILD": build}}
	}
	deploy := func(seq uint64, run string, ms int) coolifytest.Call {
		return coolifytest.Call{Seq: seq, Method: "POST", Path: "/api/v1/deploy", Route: "POST /deploy", Apps: []string{appA},
			Run: run, Fence: "1", Status: 200, Handled: 200, At: at(ms)}
	}
	patch := func(seq uint64, run string, ms int) coolifytest.Call {
		return coolifytest.Call{Seq: seq, Method: "PATCH", Path: "/api/v1/applications/" + appA, Route: "PATCH /applications/{uuid}",
			Apps: []string{appA}, Run: run, Fence: "1", Status: 200, Handled: 200, ConfigWrite: true, At: at(ms)}
	}
	span := func(dep, run string, queued, start, end int, c coolifytest.Config) coolifytest.Span {
		return coolifytest.Span{Deployment: dep, App: appA, Run: run, Fence: "1", Status: "finished",
			Queued: at(queued), Start: at(start), End: at(end), Config: c, ConfigBy: run}
	}
	canceled := func(s coolifytest.Span) coolifytest.Span { s.Status = "cancelled-by-user"; return s }
	trig := map[string]triggered{
		"r5": {ID: "r5", Pipeline: "api", Build: 5, AppVersion: "2.0.5", At: at(0)},
		"r7": {ID: "r7", Pipeline: "api", Build: 7, AppVersion: "2.0.7", At: at(0)},
		"r4": {ID: "r4", Pipeline: "api", Build: 4, AppVersion: "2.0.4", Rollback: true, At: at(0)},
	}
	succeeded := func(id string) runs.Run {
		return runs.Run{ID: id, Status: runs.StatusSucceeded, EndedAt: at(5000),
			Steps: []runs.Step{{Phase: runs.PhaseMobile, Name: "version_state", Status: runs.StepUpdated}}}
	}
	const doc5 = `{"ios":{"latest_version":"2.0.5"},"android":{"latest_version":"2.0.0"}}`
	const doc7 = `{"ios":{"latest_version":"2.0.7"},"android":{"latest_version":"2.0.0"},"outside":{"m1":"set"}}`

	for _, tc := range []struct {
		name      string
		fn        func(record) []string
		good, bad record
	}{
		{"own deployment", judgeOwnDeployment,
			record{Coolify: coolifytest.History{ // the deploy that queued it, then a write after it ended
				Calls: []coolifytest.Call{deploy(1, "r5", 100), patch(2, "r5", 900)},
				Spans: []coolifytest.Span{span("d1", "r5", 100, 110, 800, cfg("5"))}}},
			record{Coolify: coolifytest.History{ // a write while its own deployment is still queued
				Calls: []coolifytest.Call{deploy(1, "r5", 100), patch(2, "r5", 105)},
				Spans: []coolifytest.Span{span("d1", "r5", 100, 110, 800, cfg("5"))}}}},
		{"one run's config", judgeOneRunConfig,
			record{Coolify: coolifytest.History{Spans: []coolifytest.Span{span("d1", "r5", 0, 10, 100, cfg("5"))}}},
			record{Coolify: coolifytest.History{Spans: []coolifytest.Span{span("d1", "r5", 0, 10, 100,
				coolifytest.Config{ImageTag: "v7", Env: map[string]string{"BUILD": "5"}})}}}},
		{"newest build", judgeNewestBuild,
			record{Runs: trig, Coolify: coolifytest.History{Spans: []coolifytest.Span{ // 5, 7, then the rollback to 4
				span("d1", "r5", 0, 10, 100, cfg("5")), span("d2", "r7", 200, 210, 300, cfg("7")), span("d3", "r4", 400, 410, 500, cfg("4"))}}},
			record{Runs: trig, Coolify: coolifytest.History{Spans: []coolifytest.Span{ // 7 replaced by 5
				span("d2", "r7", 200, 210, 300, cfg("7")), span("d1", "r5", 400, 410, 500, cfg("5"))}}}},
		{"newest build: a rollback's sync comes between", judgeNewestBuild,
			record{Runs: trig, Coolify: coolifytest.History{ // 7, the rollback to 4 syncs (its deployment superseded), then 5
				Calls: []coolifytest.Call{patch(1, "r4", 350)},
				Spans: []coolifytest.Span{span("d2", "r7", 200, 210, 300, cfg("7")), span("d1", "r5", 400, 410, 500, cfg("5"))}}},
			record{Runs: trig, Coolify: coolifytest.History{ // the rollback's sync came before 7's deployment
				Calls: []coolifytest.Call{patch(1, "r4", 150)},
				Spans: []coolifytest.Span{span("d2", "r7", 200, 210, 300, cfg("7")), span("d1", "r5", 400, 410, 500, cfg("5"))}}}},
		{"newest build: the newer run's own restore comes between", judgeNewestBuild,
			record{Runs: trig, Coolify: coolifytest.History{ // 7 deploys, its run puts the config before it back, then 5 (seeds 1149, 1194)
				Calls: []coolifytest.Call{patch(1, "r7", 150), deploy(2, "r7", 200), patch(3, "r7", 350)},
				Spans: []coolifytest.Span{span("d2", "r7", 200, 210, 300, cfg("7")), span("d1", "r5", 400, 410, 500, cfg("5"))}}},
			record{Runs: trig, Coolify: coolifytest.History{ // 7's only config write is its sync, before its deployment
				Calls: []coolifytest.Call{patch(1, "r7", 150), deploy(2, "r7", 200)},
				Spans: []coolifytest.Span{span("d2", "r7", 200, 210, 300, cfg("7")), span("d1", "r5", 400, 410, 500, cfg("5"))}}}},
		{"newest build: a restore takes back only its own run's build", judgeNewestBuild,
			record{Runs: trig, Coolify: coolifytest.History{ // 5, then 7, whose restore puts 5 back; 5 again is no step down
				Calls: []coolifytest.Call{patch(1, "r7", 350)},
				Spans: []coolifytest.Span{span("d1", "r5", 0, 10, 100, cfg("5")), span("d2", "r7", 200, 210, 300, cfg("7")),
					span("d3", "r5", 400, 410, 500, cfg("5"))}}},
			record{Runs: map[string]triggered{"r5": trig["r5"], "r7": trig["r7"], "r9": {ID: "r9", Pipeline: "api", Build: 9, At: at(0)}},
				Coolify: coolifytest.History{ // 7's deployment canceled, 9 deploys; 7's restore does not take 9 off, so 5 steps down
					Calls: []coolifytest.Call{patch(1, "r7", 450)},
					Spans: []coolifytest.Span{canceled(span("d2", "r7", 200, 210, 300, cfg("7"))), span("d4", "r9", 320, 330, 400, cfg("9")),
						span("d1", "r5", 500, 510, 600, cfg("5"))}}}},
		{"flags: outside writer's field dropped", judgeFlags,
			record{Flags: []string{"", doc5, doc7}, Outside: []string{"outside.m1"}},
			record{Flags: []string{"", doc7, `{"ios":{"latest_version":"2.0.8"},"android":{"latest_version":"2.0.0"}}`}, Outside: []string{"outside.m1"}}},
		{"flags: a version field goes down", judgeFlags,
			record{Flags: []string{doc5, doc7}},
			record{Flags: []string{doc7, doc5}}},
		{"flags: a succeeded run's update lost", judgeFlags,
			record{Runs: trig, Ended: map[string]runs.Run{"r7": succeeded("r7")}, Flags: []string{doc5, doc7}},
			record{Runs: trig, Ended: map[string]runs.Run{"r7": succeeded("r7")}, Flags: []string{doc5}}},
		{"runs ended", judgeRunsEnded,
			record{Runs: trig, Ended: map[string]runs.Run{"r5": succeeded("r5")}, Bound: 10 * time.Second, Judged: at(20000)},
			record{Runs: trig, Ended: map[string]runs.Run{"r5": {ID: "r5", Status: runs.StatusPhase2}}, Bound: 10 * time.Second, Judged: at(20000)}},
		{"runs ended within the bound", judgeRunsEnded,
			record{Runs: trig, Ended: map[string]runs.Run{"r5": succeeded("r5")}, Bound: 10 * time.Second},
			record{Runs: trig, Ended: map[string]runs.Run{"r5": succeeded("r5")}, Bound: time.Second}},
		{"no write after a takeover", judgeNoWriteAfterTakeover,
			record{Ended: map[string]runs.Run{"r5": {ID: "r5", Status: runs.StatusInterrupted, EndedAt: at(1000)}},
				Coolify: coolifytest.History{Calls: []coolifytest.Call{patch(1, "r5", 900)}}},
			record{Ended: map[string]runs.Run{"r5": {ID: "r5", Status: runs.StatusInterrupted, EndedAt: at(1000)}},
				Coolify: coolifytest.History{Calls: []coolifytest.Call{patch(1, "r5", 900), deploy(2, "r5", 1200)}}}},
		{"runs kept", judgeRunsKept,
			record{Runs: map[string]triggered{"r5": trig["r5"]}, Ended: map[string]runs.Run{"r5": succeeded("r5")}},
			record{Runs: map[string]triggered{"r5": trig["r5"]}, Ended: map[string]runs.Run{}}},
		{"locks", judgeLocks,
			record{},
			record{Held: []locks.Info{{Key: "coolify:" + appA, Holder: "api#5/a", Fence: 3, ExpiresAt: at(6000)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v := tc.fn(tc.good); len(v) != 0 {
				t.Errorf("a record that keeps the promise: got violations %q, want none", v)
			}
			if v := tc.fn(tc.bad); len(v) == 0 {
				t.Error("a record that breaks the promise: got no violation, want one")
			} else {
				t.Logf("seen: %s", v[0])
			}
		})
	}
}
