package api_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

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
	dir := os.Getenv("ORCH_SCREENSHOTS") // keep them there (a test's temp dir goes with it)
	if dir == "" {
		dir = t.TempDir()
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", p, len(png))
	return p
}

// load runs steps that navigate (a link, a form's submit) and returns the status of the
// page they lead to.
func load(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) int64 {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(c, steps...)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return resp.Status
}

// login opens page, which answers the login form (401), logs in with token and waits to be
// back on page.
func login(t *testing.T, ctx context.Context, page, token string) {
	t.Helper()
	if st := load(t, ctx, "open "+page, chromedp.Navigate(page)); st != 401 {
		t.Fatalf("%s without a session: status %d, want the login form with 401", page, st)
	}
	if st := load(t, ctx, "log in",
		chromedp.SetValue(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
	); st != 200 {
		t.Fatalf("after logging in: status %d, want 200", st)
	}
	u, err := url.Parse(page)
	if err != nil {
		t.Fatal(err)
	}
	if !evalBool(t, ctx, `location.pathname === `+strconv.Quote(u.Path)+` && location.search === "" && document.getElementById("session-role") !== null`) {
		t.Fatalf("after logging in: not back on %s, or no session shown", u.Path)
	}
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

	// The first visit answers the login form; logging in with the read token leads back to
	// the run page.
	login(t, ctx, srv.URL+"/runs/"+r.ID, readToken)
	within(t, ctx, "open the run page",
		chromedp.Poll[chromedp.Void](`document.getElementById("live") && document.getElementById("live").textContent === "live"`),
		chromedp.Evaluate[chromedp.Void](`window.__sameDocument = "still-here"`),
	)
	if !evalBool(t, ctx, `location.pathname === "/runs/`+r.ID+`" && location.search === ""`) {
		t.Error("after logging in, the browser is not on the run page's clean URL")
	}
	if got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](stepStatuses)); strings.Count(got, "=pending") != 6 {
		t.Fatalf("steps before the run moves: got %s, want 6 pending", got)
	}

	// Phase 1 done, Phase 2 under way. (README's picture is the demo's own run page:
	// scripts/dashboard-screenshot.sh takes it.)
	for i, svc := range []string{"api", "worker", "web"} {
		f.moveStep(r.ID, runs.Phase1, svc, runs.StepSynced, int64(10+i), runs.EventServiceSynced, func(s *runs.Step) {
			s.StartedAt = s.StartedAt.Add(-time.Duration(1400+300*i) * time.Millisecond)
			s.Changes = runs.Changes{ImageTag: &orchestrator.TagChange{Old: "v2.3.9", New: "v2.4.0"}, Env: []orchestrator.EnvChange{{Key: "APP_VERSION", Action: orchestrator.EnvUpdate, ValueChanged: true}, {Key: "DATABASE_URL", Action: orchestrator.EnvCreate}}}
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
	screenshot(t, ctx, "dashboard-run.png")

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

// fitsWidth is a JS expression: "" when nothing on the page is wider than the viewport and
// no section's content spills out of its card, else what does.
const fitsWidth = `(() => {
  const bad = [];
  const root = document.documentElement;
  if (root.scrollWidth > innerWidth) bad.push("page " + root.scrollWidth + "px > " + innerWidth + "px");
  document.querySelectorAll("main section").forEach(s => {
    if (s.scrollWidth > s.clientWidth) bad.push("#" + (s.id || s.className) + " " + s.scrollWidth + "px > " + s.clientWidth + "px");
  });
  return bad.join("; ");
})()`

// checkFits fails the test when the page does not fit a viewport of width px.
func checkFits(t *testing.T, ctx context.Context, page string, width int64, mobile bool) {
	t.Helper()
	opts := []chromedp.EmulateViewportOption{}
	if mobile {
		opts = append(opts, chromedp.EmulateMobile)
	}
	within(t, ctx, "viewport", chromedp.EmulateViewport(width, 900, opts...))
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	bad, err := chromedp.Run(c, chromedp.Evaluate[string](fitsWidth))
	if err != nil {
		t.Fatal(err)
	}
	if bad != "" {
		screenshot(t, ctx, "spill.png")
		t.Errorf("%s at %dpx: %s", page, width, bad)
	}
}

// actionMsg waits for the page's action status line to say something and returns it.
func actionMsg(t *testing.T, ctx context.Context, what string) string {
	t.Helper()
	within(t, ctx, what, chromedp.Poll[chromedp.Void](`!document.getElementById("action-msg").hidden`))
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := chromedp.Run(c, chromedp.Evaluate[string](`document.getElementById("action-msg").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	within(t, ctx, "clear the status line", chromedp.Evaluate[chromedp.Void](`document.getElementById("action-msg").hidden = true`))
	return msg
}

// TestDashboardActions logs in through the form and drives every action of the dashboard
// in a real headless Chromium, checking each effect through the API: with the admin token,
// force-release a lock at the fence shown (and see a stale fence refused with the API's
// error), freeze and unfreeze with a message, cancel a run; with the trigger token, cancel a
// run and nothing else. Also: the session cookie's flags, and the layout at 1280 and 400 px.
// TestDashboardStepsDoNotBreakWords: with real fences (16 digits) and long change details,
// as the demo's run page has, a step's status badge and name stay whole: the detail column
// wraps instead (the badges read "synce|d" and a step "work|er" before).
func TestDashboardStepsDoNotBreakWords(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.PublicRead = true })
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	r := f.trigger("prod", map[string]string{"build": "1001", "image_tag": "v1.4.0"})
	for i, svc := range []string{"api", "worker", "web"} {
		f.moveStep(r.ID, runs.Phase1, svc, runs.StepSynced, 1796308873377367+int64(i), runs.EventServiceSynced, func(s *runs.Step) {
			s.Changes = runs.Changes{ImageTag: &orchestrator.TagChange{Old: "v1.3.0", New: "v1.4.0"}, Env: []orchestrator.EnvChange{
				{Key: "APP_URL", Action: orchestrator.EnvCreate}, {Key: "DATABASE_URL", Action: orchestrator.EnvCreate},
				{Key: "GIT_SHA", Action: orchestrator.EnvCreate}, {Key: "QUEUE_CONCURRENCY", Action: orchestrator.EnvCreate},
				{Key: "LOG_LEVEL", Action: orchestrator.EnvUpdate, ValueChanged: true}, {Key: "SENTRY_DSN", Action: orchestrator.EnvCreate}}}
		})
	}
	within(t, ctx, "open the run page", chromedp.Navigate(srv.URL+"/runs/"+r.ID),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('tr[data-step^="phase1/"] .s-synced').length === 3`))
	// Each badge's and step name's text is one line box.
	broken, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(
		'tr[data-step] .badge, tr[data-step] td[data-label="Step"]')).filter(el => {
		const r = document.createRange(); r.selectNodeContents(el); return r.getClientRects().length > 1
	}).map(el => el.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(broken) > 0 {
		screenshot(t, ctx, "dashboard-broken-words.png")
		t.Errorf("these break across lines: %q", broken)
	}
}

func TestDashboardActions(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	ctx := browser(t)
	bg := context.Background()

	// Locks with long holders and messages, the kind that used to spill out of the card.
	long := "prod#2026-12-03T05:00:00Z-build-987654321/phase1/payments-gateway-worker-eu-west-1"
	held, err := f.locker.Acquire(bg, locks.Request{Key: "coolify:phase1", Holder: long,
		Message: "syncing payments-gateway-worker-eu-west-1,payments-gateway-api-eu-west-1,payments-gateway-web-eu-west-1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(bg)
	stale, err := f.locker.Acquire(bg, locks.Request{Key: "coolify:uuid-api", Holder: "demo#7/api", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// A daemon's liveness lease is listed, but no operator action can take it (the API refuses
	// every key outside the operator namespaces): no button for it.
	daemonKey := orchestrator.DaemonLiveKey("vm/:8080")
	live, err := f.locker.Acquire(bg, locks.Request{Key: daemonKey, Holder: orchestrator.DaemonHolder("vm/:8080"), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release(bg)
	noDaemonButton := `document.querySelector('tr[data-lock="` + daemonKey + `"]') !== null && document.querySelector('tr[data-lock="` + daemonKey + `"] button') === null`

	// A wrong token is refused on the form; the admin token logs in.
	if st := load(t, ctx, "open the index", chromedp.Navigate(srv.URL+"/")); st != 401 {
		t.Fatalf("index without a session: %d, want 401 with the login form", st)
	}
	if st := load(t, ctx, "log in with a wrong token",
		chromedp.SetValue(chromedp.CSS("#token"), "not-a-token-of-this-daemon"),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
	); st != 403 || !evalBool(t, ctx, `document.getElementById("login-error").textContent.includes("not valid")`) {
		t.Fatalf("wrong token: status %d, want 403 and the reason on the form", st)
	}
	login(t, ctx, srv.URL+"/", adminToken)
	cookies, err := chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{})
		return res.Cookies, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cookies) != 1 || !cookies[0].HTTPOnly || cookies[0].SameSite != network.CookieSameSiteStrict {
		t.Fatalf("session cookie: got %+v, want one, HttpOnly and SameSite=Strict", cookies)
	}
	if !evalBool(t, ctx, `document.cookie === ""`) {
		t.Error("the page's script can read the session cookie")
	}

	// The layout fits a laptop and a phone.
	within(t, ctx, "see both locks", chromedp.Poll[chromedp.Void](`document.querySelectorAll("tr[data-lock]").length === 3`))
	if !evalBool(t, ctx, noDaemonButton) {
		t.Errorf("the index offers an action on the daemon's lease %s, which the API refuses", daemonKey)
	}
	checkFits(t, ctx, "index", 1280, false)
	screenshot(t, ctx, "dashboard-index-1280.png")
	checkFits(t, ctx, "index", 400, true)
	screenshot(t, ctx, "dashboard-index-400.png")
	within(t, ctx, "back to a laptop", chromedp.EmulateViewport(1280, 900))

	// Force-release at the fence shown: the panel names it, the API gets it.
	fence := strconv.FormatInt(held.Fence(), 10)
	within(t, ctx, "open the release panel",
		chromedp.Click(chromedp.CSS(`tr[data-lock="coolify:phase1"] button[data-act="release"]`)),
		chromedp.WaitVisible(chromedp.CSS("#release-form")),
	)
	if !evalBool(t, ctx, `document.querySelector('#release-form [data-f="fence"]').textContent === "`+fence+`"`) {
		t.Fatalf("the release panel does not show fence %s", fence)
	}
	within(t, ctx, "release",
		chromedp.SetValue(chromedp.CSS("#release-reason"), "holder died"),
		chromedp.Click(chromedp.CSS(`#release-form button[type="submit"]`)),
	)
	if msg := actionMsg(t, ctx, "release answered"); !strings.Contains(msg, "Released coolify:phase1 (fence "+fence) {
		t.Fatalf("after release: %q", msg)
	}
	if l := f.lockInfo("coolify:phase1"); l.Key != "" {
		t.Fatalf("coolify:phase1 is still held: %+v", l)
	}
	audit := decodeJSON[struct{ Entries []runs.LockAuditEntry }](t, f.do("GET", "/v1/locks/audit", adminToken, nil)).Entries
	if len(audit) == 0 || audit[0].Action != "force_release" || audit[0].Reason != "holder died" ||
		audit[0].Evicted == nil || audit[0].Evicted.Fence != held.Fence() || audit[0].By != "api:admin" {
		t.Fatalf("audit after the release: %+v", audit)
	}
	within(t, ctx, "the row goes", chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-lock="coolify:phase1"]') === null`))
	if !evalBool(t, ctx, noDaemonButton) {
		t.Errorf("redrawn, the locks offer an action on the daemon's lease %s, which the API refuses", daemonKey)
	}

	// A stale fence: the lock changed hands after the page read it. The API refuses, the
	// page says why, and the new holder keeps the lock.
	within(t, ctx, "open the release panel of coolify:uuid-api",
		chromedp.Click(chromedp.CSS(`tr[data-lock="coolify:uuid-api"] button[data-act="release"]`)),
		chromedp.WaitVisible(chromedp.CSS("#release-form")),
	)
	if err := stale.Release(bg); err != nil {
		t.Fatal(err)
	}
	next, err := f.locker.Acquire(bg, locks.Request{Key: "coolify:uuid-api", Holder: "demo#8/api", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(bg)
	within(t, ctx, "release at the old fence",
		chromedp.SetValue(chromedp.CSS("#release-reason"), "stuck"),
		chromedp.Click(chromedp.CSS(`#release-form button[type="submit"]`)),
	)
	if msg := actionMsg(t, ctx, "stale release answered"); !strings.HasPrefix(msg, "Refused (409 lock_changed)") {
		t.Fatalf("release at a stale fence: %q, want the API's 409", msg)
	}
	if l := f.lockInfo("coolify:uuid-api"); l.Fence != next.Fence() {
		t.Fatalf("coolify:uuid-api after the refused release: %+v, want fence %d", l, next.Fence())
	}

	// Freeze with a message; a key the API refuses shows the API's reason.
	within(t, ctx, "freeze a key that is not one",
		chromedp.Click(chromedp.CSS(`#release-form button[data-close]`)),
		chromedp.SetValue(chromedp.CSS("#freeze-key"), "coolfy:phase2"),
		chromedp.SetValue(chromedp.CSS("#freeze-message"), "db migration, ask #ops"),
		chromedp.Click(chromedp.CSS(`#freeze-form button[type="submit"]`)),
	)
	if msg := actionMsg(t, ctx, "bad freeze answered"); !strings.HasPrefix(msg, "Refused (400 invalid)") || !strings.Contains(msg, "namespace") {
		t.Fatalf("freeze of a bad key: %q, want the API's 400", msg)
	}
	within(t, ctx, "freeze coolify:phase2",
		chromedp.SetValue(chromedp.CSS("#freeze-key"), "coolify:phase2"),
		chromedp.SetValue(chromedp.CSS("#freeze-for"), "30m"),
		chromedp.Click(chromedp.CSS(`#freeze-form button[type="submit"]`)),
	)
	if msg := actionMsg(t, ctx, "freeze answered"); !strings.HasPrefix(msg, "Froze coolify:phase2 until") {
		t.Fatalf("after freeze: %q", msg)
	}
	if l := f.lockInfo("coolify:phase2"); !l.Frozen || l.Message != "db migration, ask #ops" ||
		time.Until(l.ExpiresAt) < 29*time.Minute || time.Until(l.ExpiresAt) > 31*time.Minute {
		t.Fatalf("coolify:phase2 after the freeze: %+v", l)
	}
	within(t, ctx, "unfreeze coolify:phase2",
		chromedp.Click(chromedp.CSS(`tr[data-lock="coolify:phase2"] button[data-act="unfreeze"]`)),
		chromedp.WaitVisible(chromedp.CSS("#unfreeze-form")),
		chromedp.SetValue(chromedp.CSS("#unfreeze-reason"), "migration done"),
		chromedp.Click(chromedp.CSS(`#unfreeze-form button[type="submit"]`)),
	)
	if msg := actionMsg(t, ctx, "unfreeze answered"); msg != "Unfroze coolify:phase2." {
		t.Fatalf("after unfreeze: %q", msg)
	}
	if l := f.lockInfo("coolify:phase2"); l.Key != "" {
		t.Fatalf("coolify:phase2 after the unfreeze: %+v", l)
	}

	// Cancel a run as admin, after a confirmation.
	cancelOnPage := func(who string, r runs.Run) {
		t.Helper()
		within(t, ctx, who+" cancels "+r.ID,
			chromedp.Click(chromedp.CSS("#cancel-ask")),
			chromedp.Click(chromedp.CSS("#cancel-yes")),
			chromedp.Poll[chromedp.Void](`document.getElementById("run-status").textContent === "canceled" && document.getElementById("cancel-form").hidden`),
		)
		got := decodeJSON[runs.Run](t, f.do("GET", "/v1/runs/"+r.ID, readToken, nil))
		if got.Status != runs.StatusCanceled {
			t.Fatalf("%s's cancel: run status %s, want canceled", who, got.Status)
		}
	}
	first := f.trigger("prod", map[string]string{"build": "1", "image_tag": "v1"})
	load(t, ctx, "open the run", chromedp.Navigate(srv.URL+"/runs/"+first.ID))
	within(t, ctx, "the run page is live", chromedp.Poll[chromedp.Void](`document.getElementById("live").textContent === "live"`))
	checkFits(t, ctx, "run page", 1280, false)
	checkFits(t, ctx, "run page", 400, true)
	within(t, ctx, "back to a laptop", chromedp.EmulateViewport(1280, 900))
	cancelOnPage("admin", first)

	// The trigger token: cancel, and no lock actions.
	if st := load(t, ctx, "log out", chromedp.Click(chromedp.CSS("#logout"))); st != 200 ||
		!evalBool(t, ctx, `location.pathname === "/login" && document.getElementById("login-form") !== null`) {
		t.Fatalf("after logging out: status %d, want the login form", st)
	}
	second := f.trigger("demo", map[string]string{"build": "2"})
	login(t, ctx, srv.URL+"/runs/"+second.ID, triggerToken)
	within(t, ctx, "the run page is live", chromedp.Poll[chromedp.Void](`document.getElementById("live").textContent === "live"`))

	// A step superseded while the page is open says why, as the CLI does.
	note := "not deployed: run 0000-newer re-synced it at fence 31"
	if _, err := f.store.Update(bg, second.ID, func(r *runs.Run) error {
		r.Step(runs.Phase2, "api").Status = runs.StepSuperseded
		return nil
	}, runs.Event{Type: runs.EventServiceSuperseded, Phase: runs.Phase2, Service: "api", Message: note}); err != nil {
		t.Fatal(err)
	}
	within(t, ctx, "see the superseded step explained",
		chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-step="phase2/api"] td[data-label="Detail"]').textContent === `+strconv.Quote(note)))
	cancelOnPage("trigger", second)
	load(t, ctx, "open the index", chromedp.Navigate(srv.URL+"/"))
	if !evalBool(t, ctx, `document.querySelector("button[data-act], #freeze-form, #release-form") === null && document.getElementById("session-role").textContent === "trigger (deployer)"`) {
		t.Error("the trigger token's index offers lock actions")
	}
}
