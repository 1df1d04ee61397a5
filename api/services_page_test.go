package api_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deploy-orchestrator/orchestrator"
)

// The services page, in Chromium: each service's running build, since when, the run that
// put it there (linked) and its last deployment, reached from the header's link.
func TestDashboardServicesPage(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	since := time.Date(2026, 12, 6, 5, 30, 0, 0, time.UTC)
	f.engine.services = []orchestrator.Service{
		{UUID: "q8m2k4v7x1c9d3f6h0j5n2p8", Names: []string{"api"},
			Pipelines: []orchestrator.ServicePipeline{{Pipeline: "prod", Service: "api", Newest: &orchestrator.ServiceMark{RunID: "01RUNAPI", Build: "1234"}}},
			Running: &orchestrator.ServiceRunning{ImageTag: "v2.4.0", Commit: "5f2c3e1a9b7d", AppVersion: "2.4.0", Deployment: "dpl-7f3a9c",
				RunID: "01M94ZQVVFQF2ZXTKA22C6J9PJ", Pipeline: "prod", Build: "1234", Since: since}},
		{UUID: "w3r7t1y5u9i2o6p0a4s8d2f6", Names: []string{"worker"},
			Pipelines: []orchestrator.ServicePipeline{{Pipeline: "prod", Service: "worker"}}},
	}
	ctx := browser(t)
	login(t, ctx, srv.URL+"/", readToken)
	within(t, ctx, "open the services page from the header",
		chromedp.Click(chromedp.CSS("#nav-services")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-service="w3r7t1y5u9i2o6p0a4s8d2f6"]`)),
	)
	row := `document.querySelector('tr[data-service="q8m2k4v7x1c9d3f6h0j5n2p8"]')`
	for what, expr := range map[string]string{
		"the running tag and app version": row + `.querySelector('td[data-label="Runs now"]').textContent.indexOf("v2.4.0 app 2.4.0 · commit 5f2c3e1a9b7d") >= 0`,
		"since when":                      row + `.querySelector('td[data-label="Since"]').textContent.indexOf("05:30:00Z 2026-12-06") === 0`,
		"the run, linked":                 row + `.querySelector('td[data-label="By run"] a').getAttribute("href") === "/runs/01M94ZQVVFQF2ZXTKA22C6J9PJ"`,
		"the last deployment, linked":     row + `.querySelector('td[data-label="Last deployment"] a.deployment').textContent === "dpl-7f3a9c"`,
		"a service no run verified":       `document.querySelector('tr[data-service="w3r7t1y5u9i2o6p0a4s8d2f6"]').textContent.indexOf("no run has verified it yet") >= 0`,
	} {
		if !evalBool(t, ctx, expr) {
			t.Errorf("the services page does not show %s", what)
		}
	}
	screenshot(t, ctx, "dashboard-services.png")
	checkFits(t, ctx, srv.URL+"/services", 390, true)
}
