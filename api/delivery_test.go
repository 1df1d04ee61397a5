package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// deliveryScene: prod deployed twice (one took 2 minutes), and failed once after deploying.
func deliveryScene(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	for i, st := range []runs.Status{runs.StatusSucceeded, runs.StatusFailed, runs.StatusSucceeded} {
		r := f.trigger("prod", map[string]any{"build": 10 + i, "image_tag": "v1"})
		if _, err := f.store.Update(ctx, r.ID, func(x *runs.Run) error {
			x.Status, x.StartedAt, x.EndedAt = st, x.CreatedAt, x.CreatedAt.Add(2*time.Minute)
			x.Step(runs.Phase2, "api").DeploymentUUID = "d"
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// GET /v1/delivery, /delivery and /metrics give each pipeline's deployments, lead time,
// change failure rate and time to restore.
func TestDeliveryFigures(t *testing.T) {
	f := newFixture(t)
	deliveryScene(t, f)
	rec := f.do("GET", "/v1/delivery?days=7", readToken, nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/delivery: %d %s", rec.Code, rec.Body)
	}
	got := decodeJSON[struct {
		Days      int            `json:"days"`
		Pipelines []runs.Figures `json:"pipelines"`
	}](t, rec)
	if len(got.Pipelines) != 1 {
		t.Fatalf("figures = %+v, want prod's", got)
	}
	p := got.Pipelines[0]
	if got.Days != 7 || p.Pipeline != "prod" || p.Deployments != 2 || p.Changes != 3 || p.Failures != 1 || p.LeadTime != 2*time.Minute {
		t.Errorf("prod = %+v, want 2 deployments of 3 changes, 1 failure, lead time 2m", p)
	}
	wantError(t, f.do("GET", "/v1/delivery?days=5", readToken, nil), http.StatusBadRequest, "days")

	metrics := f.do("GET", "/metrics", readToken, nil).Body.String()
	for _, want := range []string{`orchestrator_delivery_deployments_per_day{days="7",pipeline="prod"} 0.2857`,
		`orchestrator_delivery_change_failure_rate{days="30",pipeline="prod"} 0.3333`, `orchestrator_delivery_lead_time_seconds{days="90",pipeline="prod"} 120`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// The delivery page in Chromium, reached from the header.
func TestDashboardDeliveryPage(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	deliveryScene(t, f)
	ctx := browser(t)
	login(t, ctx, srv.URL+"/", readToken)
	within(t, ctx, "open the delivery page", chromedp.Click(chromedp.CSS("#nav-delivery")))
	pollUntil(t, ctx, "prod's figures", `location.pathname === "/delivery" && !!document.querySelector('tr[data-pipeline="prod"]')`)
	row := `document.querySelector('tr[data-pipeline="prod"]')`
	if !evalBool(t, ctx, row+`.querySelector('td[data-label="Deployments"]').textContent === "2"`+
		` && `+row+`.querySelector('td[data-label="Change failure rate"]').textContent === "33% (1 of 3)"`+
		` && `+row+`.querySelector('td[data-label="Lead time"]').textContent === "2m00s"`) {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](row+`.outerHTML`))
		t.Errorf("the delivery page's row: %s", html)
	}
	screenshot(t, ctx, "dashboard-delivery.png")
}
