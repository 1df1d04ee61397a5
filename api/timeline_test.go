package api_test

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The run page's timeline, in Chromium: a step's bar appears when it starts and grows with
// the clock while it runs, without a reload; lock waits, syncs and deploys get bars of their
// own kind; the run's end stops the growth.
func TestDashboardTimelineGrowsLive(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	r := f.trigger("prod", map[string]any{"build": "7", "image_tag": "v7"})
	login(t, ctx, srv.URL+"/runs/"+r.ID, readToken)
	within(t, ctx, "open the run page", chromedp.Poll[chromedp.Void](`document.getElementById("live").textContent === "live"`))

	f.moveStep(r.ID, runs.Phase1, "api", runs.StepRunning, 10, runs.EventLockAcquired, nil)
	const bar = `document.querySelector('#timeline rect.bar.sync[data-step="phase1/api"]')`
	within(t, ctx, "see the running step's bar", chromedp.Poll[chromedp.Void](`!!`+bar))
	// The axis ends at the clock, so a bar begun later than the run grows as time goes on.
	f.moveStep(r.ID, runs.Phase1, "worker", runs.StepRunning, 11, runs.EventLockAcquired, nil)
	const worker = `document.querySelector('#timeline rect.bar.sync[data-step="phase1/worker"]')`
	within(t, ctx, "see the second step's bar", chromedp.Poll[chromedp.Void](`!!`+worker))
	w0, err := chromedp.Run(ctx, chromedp.Evaluate[float64](worker+`.width.baseVal.value`))
	if err != nil {
		t.Fatal(err)
	}
	within(t, ctx, "see the bar grow with the clock",
		chromedp.Poll[chromedp.Void](worker+`.width.baseVal.value > `+strconv.FormatFloat(w0, 'f', -1, 64)))

	f.setStep(r.ID, runs.Phase1, "api", runs.StepSynced, 10)
	f.setStep(r.ID, runs.Phase1, "worker", runs.StepSynced, 11)
	f.moveStep(r.ID, runs.Phase2, "api", runs.StepRunning, 20, runs.EventDeployStarted, nil)
	within(t, ctx, "see the deploy's bar", chromedp.Poll[chromedp.Void](`!!document.querySelector('#timeline rect.bar.deploy[data-step="phase2/api"]')`))
	f.setStep(r.ID, runs.Phase2, "api", runs.StepHealthy, 20)
	// The release's analysis is a bar of its own, measuring, then coloured by its outcome.
	f.event(r.ID, runs.Event{Type: runs.EventAnalysisStarted, Message: "after the last wave: errors on api"})
	within(t, ctx, "see the analysis measuring", chromedp.Poll[chromedp.Void](`!!document.querySelector('#timeline rect.bar.analysis.measuring')`))
	f.event(r.ID, runs.Event{Type: runs.EventAnalysisEnded, Message: "after the last wave successful: errors on api 0.01",
		Data: map[string]string{runs.DataOutcome: "successful"}})
	within(t, ctx, "see the analysis end", chromedp.Poll[chromedp.Void](`!!document.querySelector('#timeline rect.bar.analysis.successful')`))
	f.finish(r.ID)
	within(t, ctx, "see the run end", chromedp.Poll[chromedp.Void](`document.getElementById("live").textContent === "run ended"`+
		` && document.getElementById("run-status").textContent === "succeeded" && document.getElementById("run-ended").textContent !== ""`))
	if !evalBool(t, ctx, `!!document.querySelector('#timeline rect.bar.wait[data-step="phase1/api"]') && !document.getElementById("timeline-legend").hidden`+
		` && document.querySelectorAll("#timeline text.label").length === 4`) {
		t.Error("the ended run's timeline lacks the lock waits, the legend or a row per started step")
	}
	end, _ := chromedp.Run(ctx, chromedp.Evaluate[float64](bar+`.width.baseVal.value`))
	time.Sleep(1500 * time.Millisecond) // the redraw interval is 1s: an ended run's bars stay put
	if later, _ := chromedp.Run(ctx, chromedp.Evaluate[float64](bar+`.width.baseVal.value`)); later != end {
		t.Errorf("the ended run's bar still moves: %v then %v", end, later)
	}
	screenshot(t, ctx, "dashboard-timeline.png")
}
