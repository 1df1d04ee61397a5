package api_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// waitingScene is what the waiting tests look at: run holder holds coolify:phase2 (its
// lease's message names it, as the engine's do), run waiter waits for it, recorded as the
// engine records a wait that lasts, and a real waiter is queued on the key.
type waitingScene struct {
	holder, waiter runs.Run
	lease          *locks.Lease
}

func newWaitingScene(t *testing.T, f *fixture) waitingScene {
	t.Helper()
	ctx := context.Background()
	var sc waitingScene
	sc.holder = f.trigger("prod", map[string]string{"build": "41", "image_tag": "v1"})
	sc.waiter = f.trigger("prod", map[string]string{"build": "42", "image_tag": "v2"})
	var err error
	sc.lease, err = f.locker.Acquire(ctx, locks.Request{Key: "coolify:phase2", Holder: "prod#41/phase2",
		Message: "run " + sc.holder.ID + " (prod) phase2", TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	t.Cleanup(func() { _ = sc.lease.Release(context.Background()) })
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // the waiter's own Acquire, queued on the key
		defer close(done)
		l, err := f.locker.Acquire(wctx, locks.Request{Key: "coolify:phase2", Holder: "prod#42/phase2", Owner: sc.waiter.ID,
			TTL: time.Minute, Budget: locks.Budget{Timeout: time.Minute}})
		if err == nil {
			_ = l.Release(context.Background())
		} else if !errors.Is(err, context.Canceled) {
			t.Errorf("waiter's acquire: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	info, err := f.locker.Get(ctx, "coolify:phase2")
	if err != nil {
		t.Fatal(err)
	}
	w := runs.Wait{LockKey: "coolify:phase2", Phase: runs.Phase2, Step: "phase2", Since: time.Now().UTC(),
		Holder: info.Holder, HolderRun: sc.holder.ID, HeldSince: info.AcquiredAt, Message: info.Message}
	if _, err := f.store.Update(ctx, sc.waiter.ID, func(r *runs.Run) error {
		r.Status, r.StartedAt, r.Waiting = runs.StatusPhase1, time.Now().UTC(), []runs.Wait{w}
		return nil
	}, runs.Event{Type: runs.EventLockWaiting, Phase: runs.Phase2, LockKey: w.LockKey}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // the waiter is queued once the backend counts it
		ls, err := f.locker.List(ctx, "coolify:phase2")
		if err == nil && len(ls) == 1 && ls[0].Waiters == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter never queued on coolify:phase2: %+v %v", ls, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sc
}

// TestAPISaysWhatARunWaitsOn: a waiting run's JSON carries its wait in words, and the locks
// list names the runs waiting for each key.
func TestAPISaysWhatARunWaitsOn(t *testing.T) {
	f := newFixture(t)
	sc := newWaitingScene(t, f)

	got := decodeJSON[struct {
		Waiting []struct {
			LockKey   string `json:"lock_key"`
			HolderRun string `json:"holder_run"`
			Text      string `json:"text"`
		} `json:"waiting"`
	}](t, f.do("GET", "/v1/runs/"+sc.waiter.ID, readToken, nil))
	want := "waiting for coolify:phase2, held by run " + sc.holder.ID + " (prod#41/phase2) since "
	if len(got.Waiting) != 1 || got.Waiting[0].HolderRun != sc.holder.ID || !strings.HasPrefix(got.Waiting[0].Text, want) {
		t.Errorf("run JSON waiting = %+v, want one wait reading %q…", got.Waiting, want)
	}

	rec := f.do("GET", "/v1/locks", readToken, nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/locks: %d %s", rec.Code, rec.Body)
	}
	ls := decodeJSON[struct {
		Locks []struct {
			Key         string `json:"key"`
			Waiters     int    `json:"waiters"`
			WaitingRuns []struct {
				RunID    string `json:"run_id"`
				Pipeline string `json:"pipeline"`
				Step     string `json:"step"`
			} `json:"waiting_runs"`
		} `json:"locks"`
	}](t, rec).Locks
	if len(ls) != 1 || ls[0].Waiters != 1 || len(ls[0].WaitingRuns) != 1 || ls[0].WaitingRuns[0].RunID != sc.waiter.ID ||
		ls[0].WaitingRuns[0].Pipeline != "prod" || ls[0].WaitingRuns[0].Step != "phase2" {
		t.Errorf("locks = %+v, want coolify:phase2 with 1 waiter: run %s (prod, phase2)", ls, sc.waiter.ID)
	}
}

// TestDashboardSaysWhatARunWaitsOn: in Chromium, the index shows what a run waits on and
// which runs wait for a lock (linked); the run's page shows the waiting banner, which goes
// away without a reload when the run moves on, and then its end time and duration.
func TestDashboardSaysWhatARunWaitsOn(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	login(t, ctx, srv.URL+"/", readToken)
	sc := newWaitingScene(t, f) // after the index is open: its script shows the wait
	want := "waiting for coolify:phase2, held by run " + sc.holder.ID + " (prod#41/phase2) since "
	within(t, ctx, "see the wait on the index",
		chromedp.Poll[chromedp.Void](`(function () {
			var w = document.querySelector('tr[data-run="`+sc.waiter.ID+`"] .waiting');
			var a = document.querySelector('tr[data-lock="coolify:phase2"] td[data-label="Waiters"] a');
			return !!w && w.textContent.indexOf(`+jsString(want)+`) === 0 && !!a && a.getAttribute("href") === "/runs/`+sc.waiter.ID+`";
		})()`),
	)
	screenshot(t, ctx, "dashboard-waiting-index.png")

	within(t, ctx, "open the waiting run's page",
		chromedp.Navigate(srv.URL+"/runs/"+sc.waiter.ID),
		chromedp.Poll[chromedp.Void](`document.getElementById("live").textContent === "live"`),
		chromedp.Evaluate[chromedp.Void](`window.__same = "yes"`),
	)
	if !evalBool(t, ctx, `!document.getElementById("waiting").hidden && document.getElementById("waiting").textContent.indexOf(`+jsString(want)+`) === 0`) {
		t.Error("the run page does not say what the run waits on")
	}
	if !evalBool(t, ctx, `document.getElementById("run-ended").textContent === "" && document.getElementById("run-took").textContent === "running"`) {
		t.Error("a running run's page shows an end")
	}
	screenshot(t, ctx, "dashboard-waiting-run.png")

	if _, err := f.store.Update(context.Background(), sc.waiter.ID, func(r *runs.Run) error {
		r.Waiting, r.Status = nil, runs.StatusPhase2
		return nil
	}, runs.Event{Type: runs.EventLockAcquired, Phase: runs.Phase2, LockKey: "coolify:phase2"}); err != nil {
		t.Fatal(err)
	}
	within(t, ctx, "see the banner go", chromedp.Poll[chromedp.Void](`document.getElementById("waiting").hidden`))
	until := time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)
	if _, err := f.store.Update(context.Background(), sc.waiter.ID, func(r *runs.Run) error {
		r.Waiting = []runs.Wait{{LockKey: "coolify:app-web", Phase: runs.Phase2, Step: "web", Since: time.Now().UTC(),
			Holder: "operator:alice", Frozen: true, Until: until, Message: "release freeze, ask #ops"}}
		return nil
	}, runs.Event{Type: runs.EventLockWaiting, Phase: runs.Phase2, Service: "web", LockKey: "coolify:app-web"}); err != nil {
		t.Fatal(err)
	}
	within(t, ctx, "see the freeze the run waits for",
		chromedp.Poll[chromedp.Void](`!document.getElementById("waiting").hidden && document.getElementById("waiting").textContent === `+
			jsString("waiting for coolify:app-web, frozen by operator:alice until 2026-12-24T18:00:00Z: release freeze, ask #ops")),
	)
	if _, err := f.store.Update(context.Background(), sc.waiter.ID, func(r *runs.Run) error {
		r.Waiting = nil
		return nil
	}, runs.Event{Type: runs.EventLockAcquired, Phase: runs.Phase2, Service: "web", LockKey: "coolify:app-web"}); err != nil {
		t.Fatal(err)
	}
	within(t, ctx, "see the banner go again", chromedp.Poll[chromedp.Void](`document.getElementById("waiting").hidden`))
	f.finish(sc.waiter.ID)
	within(t, ctx, "see the end time and the duration",
		chromedp.Poll[chromedp.Void](`/^\d\d:\d\d:\d\dZ$/.test(document.getElementById("run-ended").textContent)`+
			` && /^\d+(ms|\.\d+s|m\d\ds)|^\d+\.\ds$/.test(document.getElementById("run-took").textContent)`),
	)
	if !evalBool(t, ctx, `window.__same === "yes"`) {
		t.Error("the run page reloaded: it must update in place")
	}
}

// TestRunPageLinksCommitJobAndSupersedingRun: the run page links the commit and the CI job
// its origin names, and a superseded run the run that superseded it.
func TestRunPageLinksCommitJobAndSupersedingRun(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	newer := f.trigger("prod", map[string]string{"build": "8", "image_tag": "v8"})
	old, _, err := f.store.Create(ctx, runs.Run{Pipeline: "prod", Trigger: orchestrator.Trigger{Build: "7", ImageTag: "v7", Commit: "5f2c3e1a9b7d",
		Origin: orchestrator.Origin{Provider: "github", Repo: "acme/app", CommitURL: "https://github.com/acme/app/commit/5f2c3e1a9b7d",
			JobURL: "https://github.com/acme/app/actions/runs/99"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Update(ctx, old.ID, func(r *runs.Run) error {
		r.Status, r.Reason, r.EndedAt, r.SupersededBy = runs.StatusSuperseded, "superseded by a newer run "+newer.ID, time.Now().UTC(), newer.ID
		r.SetStep(runs.Step{Phase: runs.Phase2, Name: "api", Status: runs.StepFailed, DeploymentUUID: "dep-1",
			DeploymentURL: "https://coolify.example.com/project/p/environment/e/application/a/deployment/dep-1"})
		return nil
	}, runs.Event{Type: runs.EventRunSuperseded}); err != nil {
		t.Fatal(err)
	}
	rec := f.do("GET", "/runs/"+old.ID, readToken, nil)
	body := rec.Body.String()
	for _, want := range []string{
		`<a id="commit-link" href="https://github.com/acme/app/commit/5f2c3e1a9b7d"`,
		`<a href="https://github.com/acme/app/actions/runs/99" rel="noopener noreferrer">CI job</a>`,
		`<div id="superseded-by"><dt>Superseded by</dt><dd><a href="/runs/` + newer.ID + `">`,
		`<a class="coolify-link" href="https://coolify.example.com/project/p/environment/e/application/a/deployment/dep-1" rel="noopener noreferrer">open in Coolify</a>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("run page lacks %s", want)
		}
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// An unknown pipeline's 404 lists the pipelines the daemon knows.
func TestUnknownPipelineListsTheKnownOnes(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/v1/pipelines/prd/runs", "/v1/pipelines/prd/plan?image_tag=v1"} {
		method := "POST"
		if strings.Contains(path, "plan") {
			method = "GET"
		}
		e := wantError(t, f.do(method, path, triggerToken, map[string]string{"image_tag": "v1"}), http.StatusNotFound, "name")
		if want := `pipeline "prd": unknown pipeline (known: demo, prod)`; e.Error.Message != want {
			t.Errorf("%s %s: message %q, want %q", method, path, e.Error.Message, want)
		}
	}
}

// A mobile step's detail shows the old and new value of each field it changed, drawn by the
// page's script as the step moves (and by the server on a reload).
func TestRunPageShowsMobileValues(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	r := f.trigger("prod", map[string]any{"build": "7", "image_tag": "v7", "app_version": "1.4.0"})
	login(t, ctx, srv.URL+"/runs/"+r.ID, readToken)
	within(t, ctx, "open the run page", chromedp.Poll[chromedp.Void](`document.getElementById("live").textContent === "live"`))
	if _, err := f.store.Update(context.Background(), r.ID, func(x *runs.Run) error {
		x.SetStep(runs.Step{Phase: runs.PhaseMobile, Name: "version_state", Status: runs.StepUpdated, Changes: runs.Changes{
			Fields: []string{"ios.latest"}, Values: []runs.FieldChange{{Field: "ios.latest", Old: `"1.3.0"`, New: `"1.4.0"`}}}})
		return nil
	}, runs.Event{Type: runs.EventMobileUpdated, Phase: runs.PhaseMobile, Service: "version_state"}); err != nil {
		t.Fatal(err)
	}
	const want = `fields: ios.latest "1.3.0" → "1.4.0"`
	within(t, ctx, "see the values", chromedp.Poll[chromedp.Void](
		`(function () { var d = document.querySelector('tr[data-step="mobile/version_state"] td[data-label="Detail"]'); return !!d && d.textContent === `+jsString(want)+`; })()`))
	if body := f.do("GET", "/runs/"+r.ID, readToken, nil).Body.String(); !strings.Contains(body, `fields: ios.latest &#34;1.3.0&#34; → &#34;1.4.0&#34;`) {
		t.Error("the server-rendered run page does not show the mobile step's values")
	}
}
