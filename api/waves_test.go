package api_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// waveRun is a prod run whose Phase-2 steps deploy in two waves: api and worker, then web.
func waveRun(t *testing.T, f *fixture) runs.Run {
	t.Helper()
	r := f.trigger("prod", map[string]string{"build": "7", "image_tag": "v2"})
	_, err := f.store.Update(context.Background(), r.ID, func(run *runs.Run) error {
		run.Step(runs.Phase2, "web").Wave = 1
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rowOrder lists a run page's wave headings and Phase-2 step rows, in page order.
var rowOrder = regexp.MustCompile(`<th colspan="7">(Wave \d of \d)</th>|data-step="phase2/([a-z]+)"`)

// The run page groups Phase-2 steps by wave under a heading per wave; Phase 1 stays flat.
func TestRunPageGroupsWaves(t *testing.T) {
	f := newFixture(t)
	r := waveRun(t, f)
	rec := f.do("GET", "/runs/"+r.ID, readToken, nil)
	if rec.Code != 200 {
		t.Fatalf("run page: %d %s", rec.Code, rec.Body)
	}
	var got []string
	for _, m := range rowOrder.FindAllStringSubmatch(rec.Body.String(), -1) {
		got = append(got, m[1]+m[2])
	}
	if want := "Wave 1 of 2,api,worker,Wave 2 of 2,web"; strings.Join(got, ",") != want {
		t.Errorf("run page rows: got %s, want %s", strings.Join(got, ","), want)
	}
}

// The live redraw (run.js) keeps the grouping the server rendered.
func TestDashboardGroupsWavesLive(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	r := waveRun(t, f)
	login(t, ctx, srv.URL+"/runs/"+r.ID, readToken)
	f.setStep(r.ID, runs.Phase2, "api", runs.StepHealthy, 21)
	const rows = `Array.from(document.querySelectorAll('section[data-phase="phase2"] tr')).` +
		`filter(r => r.className === "wave" || r.dataset.step).map(r => r.className === "wave" ? r.textContent : r.dataset.step + "=" + r.dataset.status).join(",")`
	within(t, ctx, "see phase 2 grouped by wave after a live update",
		chromedp.Poll[chromedp.Void](`(`+rows+`) === "Wave 1 of 2,phase2/api=healthy,phase2/worker=pending,Wave 2 of 2,phase2/web=pending"`),
	)
}
