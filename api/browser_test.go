package api_test

import (
	"bytes"
	"context"
	"flag"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "copy the dashboard screenshot to docs/dashboard.png")

// chromium finds the browser: $ORCH_CHROMIUM, else chromium from PATH. In CI a missing
// browser fails the test; elsewhere it skips, saying how to install it.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ORCH_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found: run `scripts/ensure-deps.sh --browser` as root (or apt-get install -y chromium), or set ORCH_CHROMIUM"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium with a fresh profile and returns a tab's context. The
// browser is stopped, and its profile removed, when the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := chromium(t)
	profile, err := os.MkdirTemp("", "orchestrator-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Chromium's helpers may still write to the profile for a moment after the browser
		// has exited; retry the removal briefly.
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("could not remove the browser profile %s", profile)
	})
	var out bytes.Buffer
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1100, 1000),
		chromedp.CombinedOutput(&out),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser process to exit
		if t.Failed() && out.Len() > 0 {
			t.Logf("chromium output:\n%s", out.String())
		}
	})
	// Start the browser now, without a timeout (a timeout here would stop the browser).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", bin, err)
	}
	return ctx
}

// within runs actions on the tab with a deadline.
func within(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func evalBool(t *testing.T, ctx context.Context, expr string) bool {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[bool](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", p, len(png))
	return p
}

// stepStatuses is a JS expression: the run page's steps as "phase/name=status" joined by ",".
const stepStatuses = `Array.from(document.querySelectorAll("tr[data-step]")).map(r => r.dataset.step + "=" + r.dataset.status).join(",")`

// TestDashboardFollowsARunLive opens a run's page in a real headless Chromium, drives the
// run's steps to done from the test, and sees the services move without a reload.
func TestDashboardFollowsARunLive(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h) // loopback
	t.Cleanup(srv.Close)           // registered before the streams, so it runs after they are closed
	ctx := browser(t)

	r := f.trigger("prod", map[string]string{"build": "1234", "image_tag": "v2.4.0", "commit": "5f2c3e1a9b7d", "app_version": "2.4.0"})

	// The first visit carries the read token once; the page stores it in a cookie and
	// redirects to the clean URL.
	within(t, ctx, "open the run page",
		chromedp.Navigate(srv.URL+"/runs/"+r.ID+"?token="+readToken),
		chromedp.Poll[chromedp.Void](`document.getElementById("live") && document.getElementById("live").textContent === "live"`),
		chromedp.Evaluate[chromedp.Void](`window.__sameDocument = "still-here"`),
	)
	if !evalBool(t, ctx, `location.search === ""`) {
		t.Error("the token stayed in the address bar")
	}
	if got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](stepStatuses)); strings.Count(got, "=pending") != 6 {
		t.Fatalf("steps before the run moves: got %s, want 6 pending", got)
	}

	// Phase 1 done, Phase 2 under way: the picture for the README.
	for i, svc := range []string{"api", "worker", "web"} {
		f.moveStep(r.ID, runs.Phase1, svc, runs.StepSynced, int64(10+i), runs.EventServiceSynced, func(s *runs.Step) {
			s.StartedAt = s.StartedAt.Add(-time.Duration(1400+300*i) * time.Millisecond)
			s.Changes = runs.Changes{ImageTag: &runs.TagChange{Old: "v2.3.9", New: "v2.4.0"}, Env: []runs.EnvChange{{Key: "APP_VERSION", Action: runs.EnvUpdate, ValueChanged: true}, {Key: "DATABASE_URL", Action: runs.EnvCreate}}}
		})
	}
	f.moveStep(r.ID, runs.Phase2, "api", runs.StepHealthy, 21, runs.EventHealthOK, func(s *runs.Step) {
		s.StartedAt = s.StartedAt.Add(-42 * time.Second)
		s.DeploymentUUID = "dpl-7f3a9c"
	})
	f.moveStep(r.ID, runs.Phase2, "worker", runs.StepRunning, 22, runs.EventDeployStarted, func(s *runs.Step) {
		s.DeploymentUUID = "dpl-81be02"
	})
	within(t, ctx, "see phase 1 synced and phase 2 moving",
		chromedp.Poll[chromedp.Void](`(`+stepStatuses+`) === "phase1/api=synced,phase1/worker=synced,phase1/web=synced,phase2/api=healthy,phase2/worker=running,phase2/web=pending"`),
	)
	mid := screenshot(t, ctx, "dashboard-run.png")
	if *updateScreenshot {
		data, _ := os.ReadFile(mid)
		if err := os.WriteFile(filepath.Join("..", "docs", "dashboard.png"), data, 0o644); err != nil {
			t.Fatalf("update docs/dashboard.png: %v", err)
		}
	}

	f.setStep(r.ID, runs.Phase2, "worker", runs.StepHealthy, 22)
	f.setStep(r.ID, runs.Phase2, "web", runs.StepHealthy, 23)
	f.finish(r.ID)
	within(t, ctx, "see every service done and the run succeeded",
		chromedp.Poll[chromedp.Void](`(`+stepStatuses+`) === "phase1/api=synced,phase1/worker=synced,phase1/web=synced,phase2/api=healthy,phase2/worker=healthy,phase2/web=healthy"`+
			` && document.getElementById("run-status").textContent === "succeeded"`+
			` && document.getElementById("live").textContent === "run ended"`),
	)
	if !evalBool(t, ctx, `window.__sameDocument === "still-here"`) {
		t.Fatal("the page reloaded: it must update in place")
	}
	if !evalBool(t, ctx, `document.querySelector('tr[data-step="phase2/web"] td[data-label="Fence"]').textContent === "23"`) {
		t.Error("the fence of phase2/web is not shown")
	}
	if !evalBool(t, ctx, `document.querySelectorAll("#events li").length === 9`) {
		n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#events li").length`))
		t.Errorf("event log lines: got %d, want 9 (queued, 7 steps, succeeded)", n)
	}
	screenshot(t, ctx, "dashboard-run-done.png")

	// Readable on a phone: the tables turn into labelled cards.
	within(t, ctx, "phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	if !evalBool(t, ctx, `getComputedStyle(document.querySelector("table.steps thead")).display === "none"`+
		` && document.documentElement.scrollWidth <= 390`) {
		t.Error("the run page does not fit a 390px-wide phone screen")
	}
	screenshot(t, ctx, "dashboard-run-phone.png")

	// The index lists the run, then picks up a new run and a new lock without a reload.
	within(t, ctx, "open the index",
		chromedp.EmulateViewport(1100, 1000),
		chromedp.Navigate(srv.URL+"/"),
		chromedp.Evaluate[chromedp.Void](`window.__sameDocument = "index"`),
	)
	if !evalBool(t, ctx, `document.querySelector('tr[data-run="`+r.ID+`"]') !== null`) {
		t.Error("the index does not list the run")
	}
	next := f.trigger("demo", map[string]string{"build": "1235"})
	lease, err := f.locker.Acquire(context.Background(), locks.Request{Key: "coolify:phase1", Holder: "demo#1235/phase1", Message: "syncing", TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	defer lease.Release(context.Background())
	within(t, ctx, "see the new run and the new lock on the index",
		chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-run="`+next.ID+`"]') !== null`+
			` && document.querySelector('tr[data-lock="coolify:phase1"]') !== null`+
			` && document.querySelector("#locks .empty").hidden`),
	)
	if !evalBool(t, ctx, `window.__sameDocument === "index"`) {
		t.Error("the index reloaded: it must update in place")
	}
	html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sentinels {
		if strings.Contains(html, s) {
			t.Errorf("the dashboard shows the secret %q", s)
		}
	}
}
