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

// Re-run starts a new run with the run's parameters; roll back to this starts a deliberate
// rollback to a succeeded run's build, with the reason it requires; a run that did not
// succeed cannot be rolled back to; the read token may do neither.
func TestRerunAndRollbackTo(t *testing.T) {
	f := newFixture(t)
	first := f.trigger("prod", map[string]any{"build": "41", "image_tag": "v41", "commit": "5f2c3e1a9b7d", "app_version": "4.1.0",
		"params": map[string]string{"channel": "beta"}, "job_url": "https://ci.example/jobs/7"})

	rec := f.do("POST", "/v1/runs/"+first.ID+"/rerun", triggerToken, map[string]string{"by": "alice"})
	if rec.Code != http.StatusAccepted {
		t.Fatalf("rerun: %d %s", rec.Code, rec.Body)
	}
	re := decodeJSON[struct{ Run runs.Run }](t, rec).Run
	if tr := re.Trigger; re.ID == first.ID || tr.Build != "41" || tr.ImageTag != "v41" || tr.Commit != "5f2c3e1a9b7d" || tr.AppVersion != "4.1.0" ||
		tr.Params["channel"] != "beta" || tr.Rollback || tr.Reason != "re-run of run "+first.ID || tr.By != "api:trigger (alice)" ||
		tr.Origin.JobURL != "https://ci.example/jobs/7" || rec.Header().Get("Location") != "/v1/runs/"+re.ID {
		t.Errorf("re-run: %+v (Location %q), want a new run with the first one's parameters", re, rec.Header().Get("Location"))
	}

	wantError(t, f.do("POST", "/v1/runs/"+first.ID+"/rollback", triggerToken, map[string]string{"reason": "v42 breaks checkout"}), http.StatusConflict, "")
	f.finish(first.ID)
	wantError(t, f.do("POST", "/v1/runs/"+first.ID+"/rollback", triggerToken, map[string]string{}), http.StatusBadRequest, "reason")
	wantError(t, f.do("POST", "/v1/runs/"+first.ID+"/rollback", readToken, map[string]string{"reason": "x"}), http.StatusForbidden, "")
	rec = f.do("POST", "/v1/runs/"+first.ID+"/rollback", triggerToken, map[string]string{"reason": "v42 breaks checkout"})
	if rec.Code != http.StatusAccepted {
		t.Fatalf("rollback: %d %s", rec.Code, rec.Body)
	}
	rb := decodeJSON[struct{ Run runs.Run }](t, rec).Run
	if tr := rb.Trigger; !tr.Rollback || tr.Build != "41" || tr.ImageTag != "v41" ||
		tr.Reason != "roll back to run "+first.ID+" (build 41): v42 breaks checkout" {
		t.Errorf("rollback: %+v, want a rollback to build 41 with the reason", tr)
	}
	wantError(t, f.do("POST", "/v1/runs/01NOSUCHRUN0000000000000000/rerun", triggerToken, nil), http.StatusNotFound, "id")
}

// In Chromium, with the trigger token: Re-run opens the new run's page; Roll back to this
// (offered once the run succeeded) asks for a reason and opens the rollback's page.
func TestDashboardRerunAndRollBack(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	first := f.trigger("prod", map[string]any{"build": "41", "image_tag": "v41"})

	login(t, ctx, srv.URL+"/runs/"+first.ID, triggerToken)
	within(t, ctx, "open the run page", chromedp.Poll[chromedp.Void](`document.getElementById("live").textContent === "live"`))
	if !evalBool(t, ctx, `document.getElementById("rollback-form").hidden`) {
		t.Error("a running run offers a rollback to it")
	}
	within(t, ctx, "re-run", chromedp.Click(chromedp.CSS("#rerun")))
	leftPage(t, ctx, "/runs/"+first.ID)
	var second runs.Run
	deadline := time.Now().Add(10 * time.Second)
	for second.ID == "" && time.Now().Before(deadline) {
		page, err := f.store.List(context.Background(), runs.Filter{Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Runs {
			if r.ID != first.ID {
				second = r
			}
		}
	}
	if second.ID == "" || second.Trigger.Build != "41" || !evalBool(t, ctx, `location.pathname === "/runs/`+second.ID+`"`) {
		t.Fatalf("after Re-run: new run %+v; the browser is not on its page", second)
	}

	within(t, ctx, "back to the first run", chromedp.Navigate(srv.URL+"/runs/"+first.ID),
		chromedp.Poll[chromedp.Void](`document.getElementById("live").textContent === "live"`))
	f.finish(first.ID)
	within(t, ctx, "see the rollback offered", chromedp.Poll[chromedp.Void](`!document.getElementById("rollback-form").hidden`))
	screenshot(t, ctx, "dashboard-rollback.png")
	within(t, ctx, "roll back",
		chromedp.SetValue(chromedp.CSS("#rollback-reason"), "v42 breaks checkout"),
		chromedp.Click(chromedp.CSS("#rollback")))
	leftPage(t, ctx, "/runs/"+first.ID)
	within(t, ctx, "see the rollback's page",
		chromedp.Poll[chromedp.Void](`document.body.textContent.indexOf("roll back to run `+first.ID+` (build 41): v42 breaks checkout") >= 0`))
	if !evalBool(t, ctx, `!!Array.prototype.find.call(document.querySelectorAll("dt"), function (d) { return d.textContent === "Rollback"; })`) {
		t.Error("the rollback's page does not say it is a rollback")
	}
	if strings.Contains(second.Trigger.Reason, "roll back") {
		t.Error("the re-run is worded as a rollback")
	}
}

// leftPage waits until the tab has left path for another run page that has loaded (a script's
// navigation: a Poll would see its page go away under it).
func leftPage(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	pollUntil(t, ctx, "a run's page other than "+path,
		`location.pathname !== "`+path+`" && document.readyState === "complete" && !!document.getElementById("run")`)
}

// pollUntil evaluates expr in the tab until it is true, through navigations (an evaluation
// that meets a page going away is tried again), for 15 s.
func pollUntil(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("never saw %s", what)
}
