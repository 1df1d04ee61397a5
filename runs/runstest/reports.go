package runstest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// reportTests check runs.ReportStore, the outbox of Git host deployment statuses; Run runs
// them with the rest of the suite.
var reportTests = []struct {
	name string
	fn   func(t *testing.T, open Opener)
}{
	{"ReportsAppend", testReportsAppend},
	{"ReportsInvalid", testReportsInvalid},
	{"ReportsClaimConcurrent", testReportsClaimConcurrent},
	{"ReportsLeaseExpiry", testReportsLeaseExpiry},
	{"ReportsAppendWhileClaimed", testReportsAppendWhileClaimed},
	{"ReportsReleaseClaims", testReportsReleaseClaims},
	{"ReportsNotBefore", testReportsNotBefore},
	{"ReportsSentNotDue", testReportsSentNotDue},
	{"ReportsOfRun", testReportsOfRun},
	{"ReportsSwapLatest", testReportsSwapLatest},
	{"ReportsSwapLatestConcurrent", testReportsSwapLatestConcurrent},
	{"ReportsPrune", testReportsPrune},
	{"ReportsSurviveRestart", testReportsSurviveRestart},
}

func reportStore(t *testing.T, s runs.Store) runs.ReportStore {
	t.Helper()
	return implements[runs.ReportStore](t, s)
}

// reportSeed is the seed of run runID's report to host.
func reportSeed(host, runID string) runs.Report {
	return runs.Report{Key: runs.ReportKey(host, runID), Host: host, RunID: runID, Pipeline: "prod",
		Deployment: orchestrator.HostDeployment{Repo: "acme/api", Commit: strings.Repeat("ab", 20), Ref: "main",
			Environment: "production", EnvironmentURL: "https://api.example.com/", LogURL: "https://orch.example.com/runs/" + runID,
			RunID: runID, Production: true, CommitStatus: "orchestrator/deploy"}}
}

// hostState is the i-th state of a report.
func hostState(st orchestrator.HostState, i int) runs.ReportState {
	return runs.ReportState{State: st, Description: fmt.Sprintf("state %d", i), At: t0.Add(time.Duration(i) * time.Second)}
}

func addState(t *testing.T, rs runs.ReportStore, seed runs.Report, st runs.ReportState) {
	t.Helper()
	if err := rs.AddReportState(ctxFor(t), seed, st); err != nil {
		t.Fatalf("AddReportState(%s, %s): %v", seed.Key, st.State, err)
	}
}

// report returns run runID's report key, failing the test when there is none.
func report(t *testing.T, rs runs.ReportStore, runID, key string) runs.Report {
	t.Helper()
	all, err := rs.Reports(ctxFor(t), runID)
	if err != nil {
		t.Fatalf("Reports(%s): %v", runID, err)
	}
	for _, r := range all {
		if r.Key == key {
			return r
		}
	}
	t.Fatalf("Reports(%s): no report %s among %v", runID, key, reportKeys(all))
	return runs.Report{}
}

func reportKeys(rs []runs.Report) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Key)
	}
	return out
}

// claim claims up to 100 reports for owner, failing the test on an error.
func claim(t *testing.T, rs runs.ReportStore, owner string, lease time.Duration) []runs.Report {
	t.Helper()
	got, err := rs.ClaimReports(ctxFor(t), owner, lease, 100)
	if err != nil {
		t.Fatalf("ClaimReports(%s): %v", owner, err)
	}
	return got
}

// wantClaim claims for owner and checks the keys claimed.
func wantClaim(t *testing.T, what string, rs runs.ReportStore, owner string, lease time.Duration, keys ...string) []runs.Report {
	t.Helper()
	got := claim(t, rs, owner, lease)
	if g := reportKeys(got); !slices.Equal(g, append([]string{}, keys...)) {
		t.Fatalf("%s: %s claimed %v, want %v", what, owner, g, keys)
	}
	return got
}

func save(t *testing.T, rs runs.ReportStore, owner string, r runs.Report) {
	t.Helper()
	if err := rs.SaveReport(ctxFor(t), owner, r); err != nil {
		t.Fatalf("SaveReport(%s) by %s: %v", r.Key, owner, err)
	}
}

// wantStates checks r's states, in order, by state name.
func wantStates(t *testing.T, what string, r runs.Report, want ...orchestrator.HostState) {
	t.Helper()
	var got []orchestrator.HostState
	for _, st := range r.States {
		got = append(got, st.State)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: states %v, want %v", what, got, want)
	}
}

// testReportsAppend: states are kept in the order appended; the report is created from the
// first seed only, without the seed's delivery fields, and is due at once.
func testReportsAppend(t *testing.T, open Opener) {
	rs := reportStore(t, open(t))
	ctx := ctxFor(t)
	before := time.Now().Add(-time.Second)
	seed := reportSeed("github", "r1")
	addState(t, rs, seed, hostState(orchestrator.HostQueued, 0))
	other := reportSeed("github", "r1")
	other.Pipeline, other.Deployment.Environment, other.HostID, other.Sent = "other", "staging", "d-99", 5
	other.States, other.Attempts, other.LastError = []runs.ReportState{hostState(orchestrator.HostError, 9)}, 3, "boom"
	other.NotBefore = time.Now().Add(time.Hour)
	addState(t, rs, other, hostState(orchestrator.HostInProgress, 1))
	addState(t, rs, seed, hostState(orchestrator.HostSuccess, 2))

	all, err := rs.Reports(ctx, "r1")
	if err != nil || len(all) != 1 {
		t.Fatalf("Reports(r1) = %v, %v; want one report", reportKeys(all), err)
	}
	got := all[0]
	want := seed
	want.States = []runs.ReportState{hostState(orchestrator.HostQueued, 0), hostState(orchestrator.HostInProgress, 1), hostState(orchestrator.HostSuccess, 2)}
	want.Created, want.Updated = got.Created, got.Updated
	sameJSON(t, "report after three appends", got, want)
	if after := time.Now().Add(time.Second); got.Created.Before(before) || got.Updated.Before(got.Created) || got.Updated.After(after) {
		t.Errorf("created %s, updated %s; want both between %s and %s, in that order", got.Created, got.Updated, before, after)
	}
	if !got.Pending() {
		t.Error("Pending() = false for a report with nothing sent")
	}
	wantClaim(t, "a new report", rs, "node-a", time.Minute, seed.Key)
}

// testReportsInvalid: every method refuses what it cannot store.
func testReportsInvalid(t *testing.T, open Opener) {
	rs := reportStore(t, open(t))
	ctx := ctxFor(t)
	st := hostState(orchestrator.HostQueued, 0)
	long := reportSeed("github", "r1")
	long.Key = strings.Repeat("k", runs.MaxReportKey+1)
	for name, seed := range map[string]runs.Report{
		"no key":      {Host: "github", RunID: "r1"},
		"no host":     {Key: "github/r1", RunID: "r1"},
		"no run ID":   {Key: "github/r1", Host: "github"},
		"a long key":  long,
		"empty seed":  {},
		"only a host": {Host: "github"},
	} {
		wantErr(t, "AddReportState with "+name, rs.AddReportState(ctx, seed, st), runs.ErrInvalid)
	}
	longest := reportSeed("github", "r1")
	longest.Key = strings.Repeat("k", runs.MaxReportKey)
	addState(t, rs, longest, st)
	if got := report(t, rs, "r1", longest.Key); len(got.States) != 1 {
		t.Errorf("report under a key of %d bytes: %d states, want 1", runs.MaxReportKey, len(got.States))
	}
	for _, c := range []struct {
		owner string
		lease time.Duration
		limit int
	}{{"", time.Minute, 1}, {"node-a", 0, 1}, {"node-a", time.Minute, 0}} {
		_, err := rs.ClaimReports(ctx, c.owner, c.lease, c.limit)
		wantErr(t, fmt.Sprintf("ClaimReports(%q, %s, %d)", c.owner, c.lease, c.limit), err, runs.ErrInvalid)
	}
	wantErr(t, "SaveReport without an owner", rs.SaveReport(ctx, "", longest), runs.ErrInvalid)
	wantErr(t, "SaveReport without a key", rs.SaveReport(ctx, "node-a", runs.Report{}), runs.ErrInvalid)
	_, err := rs.Reports(ctx, "")
	wantErr(t, "Reports without a run ID", err, runs.ErrInvalid)
	_, err = rs.SwapLatestReport(ctx, "", "github/r1")
	wantErr(t, "SwapLatestReport without a scope", err, runs.ErrInvalid)
	_, err = rs.SwapLatestReport(ctx, "github:acme/api:production", "")
	wantErr(t, "SwapLatestReport without a key", err, runs.ErrInvalid)
}

// testReportsClaimConcurrent: owners on two stores claim at once until nothing is due;
// every report is claimed, each by one owner once.
func testReportsClaimConcurrent(t *testing.T, open Opener) {
	stores := []runs.ReportStore{reportStore(t, open(t)), reportStore(t, open(t))}
	ctx := ctxFor(t)
	const n, owners = 24, 4
	var all []string
	for i := range n {
		seed := reportSeed("github", fmt.Sprintf("r%02d", i))
		addState(t, stores[0], seed, hostState(orchestrator.HostQueued, 0))
		all = append(all, seed.Key)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		claimed = map[string][]string{} // report key → owners that claimed it
	)
	for o := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("node-%d", o)
			for range n { // more rounds than a correct store needs: claims that never end stop here
				got, err := stores[o%2].ClaimReports(ctx, owner, time.Minute, 3)
				if err != nil {
					t.Errorf("ClaimReports(%s): %v", owner, err)
					return
				}
				if len(got) == 0 {
					return
				}
				if len(got) > 3 {
					t.Errorf("ClaimReports(limit 3) by %s: %d reports", owner, len(got))
				}
				mu.Lock()
				for _, r := range got {
					claimed[r.Key] = append(claimed[r.Key], owner)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, key := range all {
		if by := claimed[key]; len(by) != 1 {
			t.Errorf("report %s claimed %d times (by %v), want once", key, len(by), by[:min(len(by), 4)])
		}
	}
	if len(claimed) != n {
		t.Errorf("%d reports claimed, want %d", len(claimed), n)
	}
	wantClaim(t, "after every report was claimed", stores[1], "node-late", time.Minute)
}

// testReportsLeaseExpiry: a claim holds until its lease ends, then another owner takes the
// report, and the first owner's save is refused without writing anything.
func testReportsLeaseExpiry(t *testing.T, open Opener) {
	rs := reportStore(t, open(t))
	ctx := ctxFor(t)
	seed := reportSeed("github", "r1")
	addState(t, rs, seed, hostState(orchestrator.HostQueued, 0))
	const lease = 200 * time.Millisecond
	start := time.Now()
	a := wantClaim(t, "first claim", rs, "node-a", lease, seed.Key)[0]
	// Expiry is the behaviour under test, so time has to pass: node-b polls until it gets the
	// report, which must not be before the lease ended.
	var b runs.Report
	for {
		got := claim(t, rs, "node-b", time.Minute)
		if len(got) > 0 {
			b = got[0]
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if waited := time.Since(start); waited < lease-2*time.Millisecond {
		t.Fatalf("node-b claimed the report %s after node-a's claim of %s", waited, lease)
	}
	if b.Key != seed.Key {
		t.Fatalf("node-b claimed %s, want %s", b.Key, seed.Key)
	}

	a.HostID, a.Sent, a.LastError = "d-a", 1, "from a"
	err := rs.SaveReport(ctx, "node-a", a)
	wantErr(t, "SaveReport by the owner whose claim was taken", err, runs.ErrNotClaimed)
	if got := report(t, rs, "r1", seed.Key); got.HostID != "" || got.Sent != 0 || got.LastError != "" {
		t.Errorf("after a refused save: host ID %q, sent %d, last error %q; want nothing written", got.HostID, got.Sent, got.LastError)
	}
	b.HostID, b.Sent = "d-b", 1
	save(t, rs, "node-b", b)
	if got := report(t, rs, "r1", seed.Key); got.HostID != "d-b" || got.Sent != 1 || got.Pending() {
		t.Errorf("after node-b's save: host ID %q, sent %d, pending %v; want d-b, 1, false", got.HostID, got.Sent, got.Pending())
	}
	wantErr(t, "SaveReport by node-b again (its claim ended)", rs.SaveReport(ctx, "node-b", b), runs.ErrNotClaimed)
	wantErr(t, "SaveReport of an unknown report", rs.SaveReport(ctx, "node-b", reportSeed("github", "nope")), runs.ErrNotFound)

	// A claim that expired without another owner taking it is still its owner's to save.
	late := reportSeed("gitlab", "r1")
	addState(t, rs, late, hostState(orchestrator.HostQueued, 0))
	c := wantClaim(t, "a short claim", rs, "node-c", 20*time.Millisecond, late.Key)[0]
	time.Sleep(60 * time.Millisecond)
	c.Sent = 1
	save(t, rs, "node-c", c)
	wantErr(t, "SaveReport by an owner that never claimed", rs.SaveReport(ctx, "node-d", c), runs.ErrNotClaimed)
}

// testReportsAppendWhileClaimed: a state appended while the report is claimed leaves the claim
// alone, survives the claimer's save (which knew nothing of it), and makes the report due
// again.
// testReportsReleaseClaims: a reporter starting under an owner name takes back that name's
// claims (a killed daemon's) at once, without waiting for them to expire; another owner's
// claims stay.
func testReportsReleaseClaims(t *testing.T, open Opener) {
	rs := reportStore(t, open(t))
	ctx := ctxFor(t)
	mine, theirs := reportSeed("github", "r1"), reportSeed("gitlab", "r1")
	addState(t, rs, mine, hostState(orchestrator.HostQueued, 0))
	addState(t, rs, theirs, hostState(orchestrator.HostQueued, 0))
	wantClaim(t, "the dead life's claim", rs, "node-a", time.Hour, mine.Key, theirs.Key)
	// node-b claims nothing of node-a's.
	wantClaim(t, "another owner's claim while node-a's hold", rs, "node-b", time.Hour)
	n, err := rs.ReleaseClaims(ctx, "node-b")
	if err != nil || n != 0 {
		t.Fatalf("ReleaseClaims(node-b) = %d, %v; want 0, nil", n, err)
	}
	wantClaim(t, "after another owner's release", rs, "node-b", time.Hour)
	if n, err = rs.ReleaseClaims(ctx, "node-a"); err != nil || n != 2 {
		t.Fatalf("ReleaseClaims(node-a) = %d, %v; want 2, nil", n, err)
	}
	r := wantClaim(t, "after node-a's release", rs, "node-a", time.Hour, mine.Key, theirs.Key)
	r[0].Sent = 1
	save(t, rs, "node-a", r[0])
	wantErr(t, "ReleaseClaims without an owner", func() error { _, err := rs.ReleaseClaims(ctx, ""); return err }(), runs.ErrInvalid)
}

func testReportsAppendWhileClaimed(t *testing.T, open Opener) {
	rs := reportStore(t, open(t))
	ctx := ctxFor(t)
	seed := reportSeed("github", "r1")
	addState(t, rs, seed, hostState(orchestrator.HostQueued, 0))
	a := wantClaim(t, "first claim", rs, "node-a", time.Minute, seed.Key)[0]
	addState(t, rs, seed, hostState(orchestrator.HostInProgress, 1))
	wantClaim(t, "a claimed report with a new state", rs, "node-b", time.Minute)

	a.HostID, a.Sent, a.States = "d-1", 1, nil
	save(t, rs, "node-a", a)
	got := report(t, rs, "r1", seed.Key)
	wantStates(t, "after the save", got, orchestrator.HostQueued, orchestrator.HostInProgress)
	if got.Sent != 1 || got.HostID != "d-1" || !got.Pending() {
		t.Errorf("after the save: sent %d, host ID %q, pending %v; want 1, d-1, true", got.Sent, got.HostID, got.Pending())
	}
	b := wantClaim(t, "the report with a state left", rs, "node-b", time.Minute, seed.Key)[0]
	wantStates(t, "claimed again", b, orchestrator.HostQueued, orchestrator.HostInProgress)
	if b.Sent != 1 || b.HostID != "d-1" {
		t.Errorf("claimed again: sent %d, host ID %q; want 1, d-1", b.Sent, b.HostID)
	}

	// The count sent never goes down, nor past the states.
	for _, sent := range []int{0, 3} {
		bad := b
		bad.Sent, bad.HostID = sent, "d-bad"
		wantErr(t, fmt.Sprintf("SaveReport with sent %d of 2 (1 recorded)", sent), rs.SaveReport(ctx, "node-b", bad), runs.ErrInvalid)
	}
	if got := report(t, rs, "r1", seed.Key); got.HostID != "d-1" || got.Sent != 1 {
		t.Errorf("after refused saves: host ID %q, sent %d; want d-1, 1", got.HostID, got.Sent)
	}
	b.Sent = 2
	save(t, rs, "node-b", b)
}

// testReportsNotBefore: a report is not claimed before its NotBefore, and is at or after it;
// a new state makes it due at once.
func testReportsNotBefore(t *testing.T, open Opener) {
	rs := reportStore(t, open(t))
	seed := reportSeed("github", "r1")
	addState(t, rs, seed, hostState(orchestrator.HostQueued, 0))
	a := wantClaim(t, "first claim", rs, "node-a", time.Minute, seed.Key)[0]
	later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	a.Attempts, a.NotBefore, a.LastError = 1, later, "502 Bad Gateway"
	save(t, rs, "node-a", a)
	wantClaim(t, "in backoff", rs, "node-a", time.Minute)
	wantClaim(t, "in backoff", rs, "node-b", time.Minute)
	got := report(t, rs, "r1", seed.Key)
	if got.Attempts != 1 || !got.NotBefore.Equal(later) || got.LastError != "502 Bad Gateway" || got.Sent != 0 {
		t.Errorf("after a failed attempt: attempts %d, not before %s, last error %q, sent %d; want 1, %s, 502 Bad Gateway, 0",
			got.Attempts, got.NotBefore, got.LastError, got.Sent, later)
	}

	addState(t, rs, seed, hostState(orchestrator.HostInProgress, 1))
	a = wantClaim(t, "in backoff with a new state", rs, "node-a", time.Minute, seed.Key)[0]

	// A short backoff: the report comes back at NotBefore, not before.
	soon := time.Now().Add(300 * time.Millisecond)
	a.Attempts, a.NotBefore = 2, soon
	save(t, rs, "node-a", a)
	for {
		got := claim(t, rs, "node-b", time.Minute)
		if now := time.Now(); len(got) > 0 {
			if now.Before(soon) {
				t.Fatalf("claimed at %s, before its NotBefore %s", now.Format(time.StampMicro), soon.Format(time.StampMicro))
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testReportsSentNotDue: a report whose every state is sent is not claimed, until a new state
// is appended.
func testReportsSentNotDue(t *testing.T, open Opener) {
	rs := reportStore(t, open(t))
	seed := reportSeed("github", "r1")
	addState(t, rs, seed, hostState(orchestrator.HostQueued, 0))
	addState(t, rs, seed, hostState(orchestrator.HostInProgress, 1))
	a := wantClaim(t, "first claim", rs, "node-a", time.Minute, seed.Key)[0]
	a.Sent, a.HostID = 2, "d-1"
	save(t, rs, "node-a", a)
	if got := report(t, rs, "r1", seed.Key); got.Pending() {
		t.Errorf("every state sent: Pending() = true (sent %d of %d)", got.Sent, len(got.States))
	}
	wantClaim(t, "every state sent", rs, "node-b", time.Minute)
	addState(t, rs, seed, hostState(orchestrator.HostSuccess, 2))
	b := wantClaim(t, "a new state after all were sent", rs, "node-b", time.Minute, seed.Key)[0]
	if b.Sent != 2 || len(b.States) != 3 || b.HostID != "d-1" {
		t.Errorf("claimed: sent %d of %d states, host ID %q; want 2 of 3, d-1", b.Sent, len(b.States), b.HostID)
	}
}

// testReportsOfRun: Reports answers one run's reports, by key, and none for a run without.
func testReportsOfRun(t *testing.T, open Opener) {
	rs := reportStore(t, open(t))
	ctx := ctxFor(t)
	for _, seed := range []runs.Report{reportSeed("gitlab", "r1"), reportSeed("github", "r2"), reportSeed("github", "r1")} {
		addState(t, rs, seed, hostState(orchestrator.HostQueued, 0))
	}
	for run, want := range map[string][]string{"r1": {"github/r1", "gitlab/r1"}, "r2": {"github/r2"}, "r3": {}} {
		got, err := rs.Reports(ctx, run)
		if err != nil || !slices.Equal(reportKeys(got), want) {
			t.Errorf("Reports(%s) = %v, %v; want %v", run, reportKeys(got), err, want)
		}
	}
}

// testReportsSwapLatest: each swap answers the key it replaced, per scope.
func testReportsSwapLatest(t *testing.T, open Opener) {
	rs := reportStore(t, open(t))
	ctx := ctxFor(t)
	const prod, staging = "github:acme/api:production", "github:acme/api:staging"
	for i, c := range []struct{ scope, key, want string }{
		{prod, "github/r1", ""},
		{prod, "github/r2", "github/r1"},
		{prod, "github/r2", ""}, // the same again replaces nothing
		{staging, "github/r3", ""},
		{prod, "github/r4", "github/r2"},
		{staging, "github/r5", "github/r3"},
	} {
		prev, err := rs.SwapLatestReport(ctx, c.scope, c.key)
		if err != nil || prev != c.want {
			t.Errorf("swap %d: SwapLatestReport(%s, %s) = %q, %v; want %q", i+1, c.scope, c.key, prev, err, c.want)
		}
	}
}

// testReportsSwapLatestConcurrent: concurrent swaps on two stores form one chain: every key is
// answered exactly once as someone's previous, except the last one in.
func testReportsSwapLatestConcurrent(t *testing.T, open Opener) {
	stores := []runs.ReportStore{reportStore(t, open(t)), reportStore(t, open(t))}
	ctx := ctxFor(t)
	const scope, n = "github:acme/api:production", 32
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		prevs []string
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev, err := stores[i%2].SwapLatestReport(ctx, scope, fmt.Sprintf("github/r%02d", i))
			if err != nil {
				t.Errorf("SwapLatestReport: %v", err)
				return
			}
			mu.Lock()
			prevs = append(prevs, prev)
			mu.Unlock()
		}()
	}
	wg.Wait()
	last, err := stores[0].SwapLatestReport(ctx, scope, "github/final")
	if err != nil {
		t.Fatal(err)
	}
	prevs = append(prevs, last)
	slices.Sort(prevs)
	want := []string{""}
	for i := range n {
		want = append(want, fmt.Sprintf("github/r%02d", i))
	}
	if !slices.Equal(prevs, want) {
		t.Errorf("keys answered as previous by %d concurrent swaps and one more: %q, want each key once and one \"\"", n, prevs)
	}
}

// testReportsPrune: pruning a run removes its reports that have nothing pending and the
// latest-report pointers naming them; a pending report stays, and goes at a later prune once
// delivered; a report of a run that is kept stays.
func testReportsPrune(t *testing.T, open Opener) {
	s := open(t)
	rs, p := reportStore(t, s), pruner(t, s)
	ctx := ctxFor(t)
	now := time.Now().UTC()
	run := func(age int, ended bool) string {
		r := mustCreate(t, s, runs.Run{Pipeline: "prod", CreatedAt: now.Add(-time.Duration(age) * time.Hour)})
		if ended {
			endRun(t, s, r.ID)
		}
		return r.ID
	}
	delivered, pending, live, kept := run(4, true), run(3, true), run(2, false), run(1, true)
	scopes := map[string]string{}
	for _, id := range []string{delivered, pending, live, kept} {
		seed := reportSeed("github", id)
		addState(t, rs, seed, hostState(orchestrator.HostQueued, 0))
		addState(t, rs, seed, hostState(orchestrator.HostSuccess, 1))
		scopes[id] = "github:acme/api:" + id
		if _, err := rs.SwapLatestReport(ctx, scopes[id], seed.Key); err != nil {
			t.Fatal(err)
		}
	}
	// Every report delivered but pending's, which has one state left.
	for _, r := range claim(t, rs, "node-a", time.Minute) {
		r.Sent = len(r.States)
		if r.RunID == pending {
			r.Sent = 1
		}
		save(t, rs, "node-a", r)
	}
	const probe = "github:acme/api:probe" // a second pointer to pending's report
	if _, err := rs.SwapLatestReport(ctx, probe, runs.ReportKey("github", pending)); err != nil {
		t.Fatal(err)
	}

	// MaxRuns 1: the ended runs but the newest (kept) go; live has not ended.
	if n, err := p.Prune(ctx, runs.Retention{MaxRuns: 1}); err != nil || n != 2 {
		t.Fatalf("Prune(MaxRuns 1): %d runs deleted, %v; want 2", n, err)
	}
	wantReports := func(when string, want map[string]int) {
		t.Helper()
		for id, n := range want {
			got, err := rs.Reports(ctx, id)
			if err != nil || len(got) != n {
				t.Errorf("%s: %d reports of run %s (err %v), want %d", when, len(got), id, err, n)
			}
		}
	}
	wantReports("after the prune", map[string]int{delivered: 0, pending: 1, live: 1, kept: 1})
	if prev, err := rs.SwapLatestReport(ctx, probe, "github/none"); err != nil || prev != runs.ReportKey("github", pending) {
		t.Errorf("pointer to the pending report after the prune: %q, %v; want %s", prev, err, runs.ReportKey("github", pending))
	}

	// Delivered at last, the pending report goes at the next prune, its run gone already.
	r := wantClaim(t, "the pending report", rs, "node-a", time.Minute, runs.ReportKey("github", pending))[0]
	r.Sent = len(r.States)
	save(t, rs, "node-a", r)
	if _, err := p.Prune(ctx, runs.Retention{MaxRuns: 1}); err != nil {
		t.Fatal(err)
	}
	wantReports("after the second prune", map[string]int{delivered: 0, pending: 0, live: 1, kept: 1})
	for id, want := range map[string]string{delivered: "", pending: "", live: runs.ReportKey("github", live),
		kept: runs.ReportKey("github", kept), "probe": ""} {
		scope := scopes[id]
		if id == "probe" {
			scope = probe
		}
		if prev, err := rs.SwapLatestReport(ctx, scope, "github/next"); err != nil || prev != want {
			t.Errorf("pointer of %s after the second prune: %q, %v; want %q", scope, prev, err, want)
		}
	}
}

// testReportsSurviveRestart: a report and a claim on it outlive the store that wrote them.
func testReportsSurviveRestart(t *testing.T, open Opener) {
	s1 := open(t)
	seed := reportSeed("github", "r1")
	addState(t, reportStore(t, s1), seed, hostState(orchestrator.HostQueued, 0))
	addState(t, reportStore(t, s1), seed, hostState(orchestrator.HostInProgress, 1))
	if err := s1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2 := open(t)
	r := wantClaim(t, "after a restart", reportStore(t, s2), "node-a", time.Minute, seed.Key)[0]
	wantStates(t, "claimed after a restart", r, orchestrator.HostQueued, orchestrator.HostInProgress)
	if err := s2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	rs := reportStore(t, open(t))
	wantClaim(t, "claimed before a restart", rs, "node-b", time.Minute)
	r.Sent = 2
	save(t, rs, "node-a", r)
	if got := report(t, rs, "r1", seed.Key); got.Sent != 2 || got.Pending() {
		t.Errorf("saved after a restart: sent %d, pending %v; want 2, false", got.Sent, got.Pending())
	}
}
