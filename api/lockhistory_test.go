package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// lockHistoryScene records, as the engine does, run a holding coolify:phase1 (fence 5) for a
// second while run b waits for it, then b holding it, still.
func lockHistoryScene(t *testing.T, f *fixture) (a, b runs.Run, t0 time.Time) {
	t.Helper()
	ctx := context.Background()
	a = f.trigger("prod", map[string]any{"build": "1", "image_tag": "v1"})
	b = f.trigger("prod", map[string]any{"build": "2", "image_tag": "v2"})
	t0 = time.Now().UTC().Add(-2 * time.Second)
	key := "coolify:phase1"
	if _, err := f.store.Append(ctx, a.ID,
		runs.Event{Type: runs.EventLockWaiting, Phase: runs.Phase1, LockKey: key, At: t0},
		runs.Event{Type: runs.EventLockAcquired, Phase: runs.Phase1, LockKey: key, Fence: 5, At: t0.Add(10 * time.Millisecond)},
		runs.Event{Type: runs.EventLockReleased, Phase: runs.Phase1, LockKey: key, Fence: 5, At: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Append(ctx, b.ID,
		runs.Event{Type: runs.EventLockWaiting, Phase: runs.Phase1, LockKey: key, At: t0.Add(100 * time.Millisecond), Message: "held by prod#1/phase1"},
		runs.Event{Type: runs.EventLockAcquired, Phase: runs.Phase1, LockKey: key, Fence: 6, At: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	return a, b, t0
}

// GET /v1/locks/history: per key, each run's hold (with its fence) and wait over the period,
// a hold still going without an end; an unknown period is refused naming the field.
func TestLockHistoryAPI(t *testing.T) {
	f := newFixture(t)
	a, b, t0 := lockHistoryScene(t, f)
	rec := f.do("GET", "/v1/locks/history?period=1h", readToken, nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/locks/history: %d %s", rec.Code, rec.Body)
	}
	type span struct {
		Key, Kind, RunID string
		Fence            int64
		From, To         time.Time
	}
	got := decodeJSON[struct {
		Spans []struct {
			Key   string    `json:"key"`
			Kind  string    `json:"kind"`
			RunID string    `json:"run_id"`
			Fence int64     `json:"fence"`
			From  time.Time `json:"from"`
			To    time.Time `json:"to"`
		} `json:"spans"`
	}](t, rec).Spans
	want := []span{
		{"coolify:phase1", "held", a.ID, 5, t0.Add(10 * time.Millisecond), t0.Add(time.Second)},
		{"coolify:phase1", "waited", b.ID, 0, t0.Add(100 * time.Millisecond), t0.Add(time.Second)},
		{"coolify:phase1", "held", b.ID, 6, t0.Add(time.Second), time.Time{}},
	}
	if len(got) != len(want) {
		t.Fatalf("spans = %+v, want %+v", got, want)
	}
	for i, w := range want {
		g := span{got[i].Key, got[i].Kind, got[i].RunID, got[i].Fence, got[i].From, got[i].To}
		if g.Key != w.Key || g.Kind != w.Kind || g.RunID != w.RunID || g.Fence != w.Fence || !g.From.Equal(w.From) || !g.To.Equal(w.To) {
			t.Errorf("span %d = %+v, want %+v", i, g, w)
		}
	}
	wantError(t, f.do("GET", "/v1/locks/history?period=2y", readToken, nil), http.StatusBadRequest, "period")
}

// The lock history page, in Chromium: a row per key, each hold linked to its run.
func TestDashboardLockHistory(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	a, b, _ := lockHistoryScene(t, f)
	ctx := browser(t)
	login(t, ctx, srv.URL+"/", readToken)
	within(t, ctx, "open the lock history from the header", chromedp.Click(chromedp.CSS("#nav-history")))
	pollUntil(t, ctx, "the three bars", `location.pathname === "/locks/history" && document.querySelectorAll("#lock-timeline rect.bar").length === 3`)
	for what, expr := range map[string]string{
		"the first run's hold, linked": `!!document.querySelector('#lock-timeline a[data-run="` + a.ID + `"] rect[data-kind="held"][data-key="coolify:phase1"]')`,
		"the second run's wait":        `!!document.querySelector('#lock-timeline a[data-run="` + b.ID + `"] rect[data-kind="waited"]')`,
		"the key's row":                `Array.prototype.some.call(document.querySelectorAll("#lock-timeline text.label"), function (e) { return e.textContent === "coolify:phase1"; })`,
	} {
		if !evalBool(t, ctx, expr) {
			t.Errorf("the lock history does not show %s", what)
		}
	}
	screenshot(t, ctx, "dashboard-lock-history.png")
}
