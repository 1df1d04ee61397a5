package api_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// axeVersion is the axe-core release scripts/ensure-deps.sh --browser fetches from npm into
// testdata/axe/ (git ignores it).
const axeVersion = "4.10.2"

// axeSource reads axe-core's browser build: $ORCH_AXE, else testdata/axe/. In CI a missing
// file fails the test; elsewhere it skips, saying how to get it.
func axeSource(t *testing.T) string {
	t.Helper()
	path := os.Getenv("ORCH_AXE")
	if path == "" {
		path = filepath.Join("testdata", "axe", "axe-"+axeVersion+".min.js")
	}
	b, err := os.ReadFile(path)
	if err == nil {
		return string(b)
	}
	msg := "axe-core not found at " + path + ": run `scripts/ensure-deps.sh --browser` (it fetches it from npm), or set ORCH_AXE"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// checkAccessible runs axe-core (WCAG 2.0 and 2.1, levels A and AA) on the page the tab
// shows and fails the test with every violation, each with the elements it found.
func checkAccessible(t *testing.T, ctx context.Context, axe, page string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(c, chromedp.Evaluate[chromedp.Void](axe)); err != nil {
		t.Fatalf("%s: load axe-core: %v", page, err)
	}
	got, err := chromedp.Run(c, chromedp.Evaluate[[]string](`axe.run(document, {runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}})
		.then(function (r) {
			return r.violations.map(function (v) {
				return v.id + " (" + v.impact + "): " + v.help + " at " + v.nodes.map(function (n) { return n.target.join(" "); }).join(", ");
			});
		})`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: run axe-core: %v", page, err)
	}
	for _, v := range got {
		t.Errorf("%s: accessibility violation %s", page, v)
	}
}

// TestDashboardPagesAreAccessible runs axe-core in Chromium on every page of the dashboard,
// filled as in use: the login form, the index with runs (one waiting) and locks (with the
// admin's forms), a run's page (waiting banner, steps, timeline, actions), the services page,
// the delivery figures, the lock history and the 404 page.
func TestDashboardPagesAreAccessible(t *testing.T) {
	axe := axeSource(t)
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	sc := newWaitingScene(t, f)
	done := f.trigger("prod", map[string]any{"build": "40", "image_tag": "v40", "commit": "5f2c3e1a9b7d"})
	f.moveStep(done.ID, runs.Phase1, "api", runs.StepSynced, 10, runs.EventServiceSynced, func(s *runs.Step) {
		s.Changes = runs.Changes{ImageTag: &orchestrator.TagChange{Old: "v39", New: "v40"}}
	})
	f.finish(done.ID)
	lease, err := f.locker.Acquire(context.Background(), locks.Request{Key: "coolify:phase1", Holder: "prod#40/phase1", Message: "syncing", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	f.engine.services = []orchestrator.Service{{UUID: "q8m2k4v7x1c9d3f6h0j5n2p8", Names: []string{"api"},
		Pipelines: []orchestrator.ServicePipeline{{Pipeline: "prod", Service: "api"}},
		Running:   &orchestrator.ServiceRunning{ImageTag: "v40", Deployment: "dpl-1", RunID: done.ID, Since: time.Now()}}}

	within(t, ctx, "open the login form", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	checkAccessible(t, ctx, axe, "login form")
	login(t, ctx, srv.URL+"/", adminToken)
	for _, p := range []struct{ name, path, ready string }{
		{"index", "/", `!!document.querySelector('tr[data-run="` + sc.waiter.ID + `"] .waiting')`},
		{"waiting run", "/runs/" + sc.waiter.ID, `document.getElementById("live").textContent === "live"`},
		{"succeeded run", "/runs/" + done.ID, `document.getElementById("live").textContent === "run ended"`},
		{"services", "/services", `!!document.querySelector("tr[data-service]")`},
		{"delivery figures", "/delivery", `!!document.querySelector("tr[data-pipeline]")`},
		{"lock history", "/locks/history", `document.querySelectorAll("#lock-timeline rect.bar").length > 0`},
		{"not found", "/runs/01NOSUCHRUN0000000000000000", `document.readyState === "complete"`},
	} {
		within(t, ctx, "open the "+p.name+" page", chromedp.Navigate(srv.URL+p.path), chromedp.Poll[chromedp.Void](p.ready))
		checkAccessible(t, ctx, axe, p.name+" page")
	}
	if t.Failed() {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		t.Logf("last page:\n%s", strings.TrimSpace(html))
	}
}
