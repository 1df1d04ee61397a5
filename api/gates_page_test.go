package api_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Issue 36, items 3 and 4: the dashboard lists the runs waiting for approval (plan digest,
// summary, approvals given and needed) and each pipeline's deploy windows with the verdict
// now; a run's page shows its decision and offers Approve and Reject to an approver only.
func TestDashboardShowsApprovalsAndWindows(t *testing.T) {
	f := newFixture(t, withNamedTokens)
	frozen, err := config.LoadPipelineBytes("prod.yaml", []byte(`
name: prod
coolify: { url: https://coolify.example.com, token: t }
services: [{ uuid: u1, image_tag: v1 }]
windows:
  freezes: [{ from: "2000-01-01T00:00:00Z", to: "2100-01-01T00:00:00Z", reason: forever }]
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	h := api.NewServer(api.Deps{Config: f.cfg, Engine: f.engine, Runs: f.store, Locks: f.locker,
		Pipelines: map[string]*config.Pipeline{"prod": frozen}})
	run := f.trigger("demo", map[string]any{"build": "9", "image_tag": "v9"})
	f.setDecision(run.ID, &runs.Decision{Kind: runs.DecisionApproval, Digest: "plan-1abcdefghijkl", Summary: "api: image tag → v9",
		Needed: 2, Asked: time.Now(), Votes: []runs.Vote{{By: "api:alice", Approve: true, Digest: "plan-1abcdefghijkl"}}})
	page := func(path, tok string) string {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Accept", "text/html")
		req.AddCookie(f.login(tok))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	// A run in Phase 2 whose analysis asks a person is listed too.
	deciding := f.trigger("demo", map[string]any{"build": "10", "image_tag": "v10"})
	if _, err := f.store.Update(context.Background(), deciding.ID, func(r *runs.Run) error {
		r.Status, r.Decision = runs.StatusPhase2, &runs.Decision{Kind: runs.DecisionInconclusive, Digest: "inconclusive-1abcdef",
			Summary: "analysis after wave 1 of 2 inconclusive: errors", Needed: 1, Asked: time.Now()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	index := page("/", viewerToken)
	for _, want := range []string{`id="awaiting"`, `data-run="` + run.ID + `"`, "api: image tag → v9", "1 of 2",
		`data-run="` + deciding.ID + `"`, "analysis after wave 1 of 2 inconclusive",
		`id="windows"`, `data-pipeline="prod"`, "closed", "forever", "waits"} {
		if !strings.Contains(index, want) {
			t.Errorf("the dashboard lacks %q:\n%s", want, index)
		}
	}
	for tok, offers := range map[string]bool{approverToken: true, opsToken: true, deployerToken: false, viewerToken: false} {
		body := page("/runs/"+run.ID, tok)
		if !strings.Contains(body, `id="decision"`) || !strings.Contains(body, "api:alice approved") {
			t.Errorf("run page lacks the decision:\n%s", body)
		}
		if got := strings.Contains(body, `id="approve" data-digest="plan-1abcdefghijkl"`); got != offers {
			t.Errorf("run page for a %s token offers approve: %v, want %v", tok, got, offers)
		}
	}
}

// Issue 36, item 4: in a real headless Chromium, an approver logged in through the form sees
// the runs waiting for approval on the dashboard, approves one run's plan (the digest on the
// page) and rejects another's with a reason; each vote reaches the engine as the
// approver's.
func TestDashboardApproveAndRejectInABrowser(t *testing.T) {
	f := newFixture(t, withNamedTokens)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	ids := map[string]string{}
	for _, which := range []string{"approve", "reject"} {
		r := f.trigger("demo", map[string]any{"image_tag": "v-" + which})
		f.setDecision(r.ID, &runs.Decision{Kind: runs.DecisionApproval, Digest: "plan-1", Summary: "api: image tag → v-" + which,
			Needed: 1, Asked: time.Now()})
		ids[which] = r.ID
	}
	login(t, ctx, srv.URL+"/", approverToken)
	if !evalBool(t, ctx, `document.querySelectorAll("#awaiting tr[data-run]").length === 2`) {
		screenshot(t, ctx, "awaiting.png")
		t.Fatal("the dashboard does not list the two runs waiting for approval")
	}
	decided := func(what string) string {
		t.Helper()
		within(t, ctx, what, chromedp.Poll[chromedp.Void](`!document.getElementById("decide-msg").hidden`))
		msg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("decide-msg").textContent`))
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	within(t, ctx, "open the run to approve", chromedp.Navigate(srv.URL+"/runs/"+ids["approve"]),
		chromedp.Poll[chromedp.Void](`document.getElementById("approve") !== null`),
		chromedp.SetValue(chromedp.CSS("#decide-reason"), "checked the tag"),
		chromedp.Click(chromedp.CSS("#approve")))
	if msg := decided("approve"); msg != "Approved." {
		t.Errorf("after approving: %q", msg)
	}
	within(t, ctx, "open the run to reject", chromedp.Navigate(srv.URL+"/runs/"+ids["reject"]),
		chromedp.Poll[chromedp.Void](`document.getElementById("reject") !== null`),
		chromedp.SetValue(chromedp.CSS("#decide-reason"), "not during the sale"),
		chromedp.Click(chromedp.CSS("#reject")))
	if msg := decided("reject"); !strings.HasPrefix(msg, "Rejected") {
		t.Errorf("after rejecting: %q", msg)
	}
	for which, approve := range map[string]bool{"approve": true, "reject": false} {
		r, err := f.store.Get(context.Background(), ids[which])
		if err != nil {
			t.Fatal(err)
		}
		votes := r.Decision.Votes
		if len(votes) != 1 || votes[0].By != "api:alice" || votes[0].Approve != approve || (approve && votes[0].Digest != "plan-1") {
			t.Errorf("%s: votes %+v", which, votes)
		}
	}
}
