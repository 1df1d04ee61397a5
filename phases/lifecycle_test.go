package phases_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// holdPhase1 takes coolify:phase1 as an operator would, so runs queue behind it.
func holdPhase1(t *testing.T, h *harness) *locks.Lease {
	t.Helper()
	l, err := h.locker.Acquire(context.Background(), locks.Request{Key: "coolify:phase1", Holder: "test#0/blocker"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCancelQueuedRunDropsIt(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	blocker := holdPhase1(t, h)
	id := h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	h.waitEvent(id, runs.EventLockWaiting, "")
	if _, err := h.engine.Cancel(context.Background(), id, "api:admin (alice)", "wrong build"); err != nil {
		t.Fatal(err)
	}
	r := h.wait(id)
	if want := "canceled by api:admin (alice): wrong build"; r.Status != runs.StatusCanceled || r.Reason != want {
		t.Errorf("status = %s (%s), want canceled (%s)", r.Status, r.Reason, want)
	}
	if ev := h.waitEvent(id, runs.EventRunCancelRequested, ""); ev.Data[runs.DataBy] != "api:admin (alice)" || ev.Data[runs.DataReason] != "wrong build" {
		t.Errorf("%s data = %v, want who and why", ev.Type, ev.Data)
	}
	for _, req := range h.coolify.Requests() { // only the token check, which reads
		if req.Method != http.MethodGet {
			t.Errorf("a canceled queued run sent %s %s to Coolify", req.Method, req.Path)
		}
	}
	_ = blocker.Release(context.Background())
	if _, err := h.engine.Cancel(context.Background(), id, "test", ""); !errors.Is(err, runs.ErrEnded) {
		t.Errorf("second cancel: %v, want ErrRunEnded", err)
	}
	if _, err := h.engine.Cancel(context.Background(), "no-such-run", "test", ""); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("cancel unknown: %v, want ErrRunNotFound", err)
	}
}

func TestCancelRunningRunStopsAtSafePointAndCompensates(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api", "worker"}, ""))
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
	id := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	h.waitEvent(id, runs.EventDeployStarted, "api")
	if _, err := h.engine.Cancel(context.Background(), id, "test", ""); err != nil {
		t.Fatal(err)
	}
	// The current step (api's deploy) is not cut short: it ends at its deadline (the hung
	// deployment is canceled then), and the run stops before worker.
	r := h.wait(id)
	if r.Status != runs.StatusCanceled {
		t.Fatalf("status = %s (%s), want canceled", r.Status, r.Reason)
	}
	if n := len(h.coolify.Deployments(uuidWorker)); n != 0 {
		t.Errorf("worker deployed %d times after the cancel", n)
	}
	if app, _ := h.coolify.App(uuidWorker); app.ImageTag != "v1" {
		t.Errorf("worker tag = %q, want v1 restored", app.ImageTag)
	}
}

// A lock wait is a safe point: a run canceled while it waits for coolify:phase2 (held here,
// as by a freeze) stops at once and undoes Phase 1, instead of waiting out its budget (ten
// minutes here: longer than h.wait waits).
func TestCancelWhileWaitingForALock(t *testing.T) {
	h := newHarness(t)
	h.start(strings.Replace(h.pipelineYAML("prod", []string{"api"}, ""), "phase: { timeout: 20s", "phase: { timeout: 10m", 1))
	blocker, err := h.locker.Acquire(context.Background(), locks.Request{Key: "coolify:phase2", Holder: "test#0/blocker"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Release(context.Background()) }()
	id := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := runs.Follow(ctx, h.store, id, 0, func(e runs.Event) error {
		if e.Type == runs.EventLockWaiting && e.LockKey == "coolify:phase2" {
			return errSeen
		}
		return nil
	}); !errors.Is(err, errSeen) {
		t.Fatalf("no wait for coolify:phase2: %v", err)
	}
	if _, err := h.engine.Cancel(context.Background(), id, "test", ""); err != nil {
		t.Fatal(err)
	}
	r := h.wait(id)
	if r.Status != runs.StatusCanceled {
		t.Fatalf("status = %s (%s), want canceled", r.Status, r.Reason)
	}
	if app, _ := h.coolify.App(uuidAPI); app.ImageTag != "v1" || len(h.coolify.Deployments(uuidAPI)) != 0 {
		t.Errorf("api: tag %q after %d deployments, want v1 restored and none", app.ImageTag, len(h.coolify.Deployments(uuidAPI)))
	}
}

func TestSupersedeReplacesPendingRunOnly(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, "concurrency: supersede\n"))
	blocker := holdPhase1(t, h)
	first := h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	h.waitEvent(first, runs.EventLockWaiting, "")
	second := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v3"})
	if r := h.wait(first); r.Status != runs.StatusSuperseded || !strings.Contains(r.Reason, second) || r.SupersededBy != second {
		t.Errorf("first run: %s (%q) superseded by %q, want superseded by %s", r.Status, r.Reason, r.SupersededBy, second)
	}
	_ = blocker.Release(context.Background())
	if r := h.wait(second); r.Status != runs.StatusSucceeded {
		t.Errorf("second run: %s (%s)", r.Status, r.Reason)
	}
	if app, _ := h.coolify.App(uuidAPI); app.DeployedImageTag != "v3" || len(h.coolify.Deployments(uuidAPI)) != 1 {
		t.Errorf("api runs %q after %d deployments, want v3 after 1", app.DeployedImageTag, len(h.coolify.Deployments(uuidAPI)))
	}
}

func TestMobileStepAfterPhase2(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			h := newHarness(t)
			// The first Flagsmith call waits until the test has looked at the run's held locks.
			arrived, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			hold := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("X-Orchestrator-Fence") != "" { // the step's, not the preflight's reads
						once.Do(func() { close(arrived); <-resume })
					}
					next.ServeHTTP(w, r)
				})
			}
			fs := flagsmithtest.NewServer(t, flagsmithtest.WithMiddleware(hold))
			if _, err := fs.AddEnvironment(flagsmithtest.Environment{APIKey: "env-key", V2: v2}); err != nil {
				t.Fatal(err)
			}
			if err := fs.SetValue("env-key", "version_state", `{"ios":{"latest_version":"2.10.0","min_version":"2.0.0"},"android":{"latest_version":"2.3.0"}}`); err != nil {
				t.Fatal(err)
			}
			h.start(h.pipelineYAML("prod", []string{"api"}, fmt.Sprintf(`mobile:
  - name: version_state
    flagsmith: { url: %q, api_key: %q, environment: env-key }
    feature: version_state
    set:
      ios.latest_version: "${trigger.app_version}"
      android.latest_version: "${trigger.app_version}"
    never_downgrade: true
`, fs.URL, fs.APIKey)))
			id := h.submit("prod", orchestrator.Trigger{Build: "3", ImageTag: "v2", AppVersion: "2.9.0"})
			<-arrived
			during, err := h.store.Get(context.Background(), id)
			close(resume)
			if err != nil {
				t.Fatal(err)
			}
			const key = "mobile:flagsmith:version_state"
			if !slices.Equal(during.HeldLocks, []string{key}) {
				t.Errorf("held locks during the mobile step = %v, want [%s]", during.HeldLocks, key)
			}
			r := h.wait(id)
			if r.Status != runs.StatusSucceeded {
				t.Fatalf("status = %s (%s)", r.Status, r.Reason)
			}
			// The mobile: lease is the engine's, recorded like every other.
			var got []runs.EventType
			for _, ev := range h.events(id) {
				if ev.LockKey == key && ev.Type != runs.EventPhaseStarted && ev.Type != runs.EventMobileUpdated {
					got = append(got, ev.Type)
				}
			}
			if want := []runs.EventType{runs.EventLockWaiting, runs.EventLockAcquired, runs.EventLockReleased}; !slices.Equal(got, want) {
				t.Errorf("events of %s = %v, want %v", key, got, want)
			}
			if len(r.HeldLocks) != 0 {
				t.Errorf("held locks after the run = %v", r.HeldLocks)
			}
			v, err := fs.Value("env-key", "version_state")
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				IOS     map[string]string `json:"ios"`
				Android map[string]string `json:"android"`
			}
			if err := json.Unmarshal([]byte(v.(string)), &doc); err != nil {
				t.Fatalf("version_state is no longer a JSON document string: %v (%v)", err, v)
			}
			if doc.IOS["latest_version"] != "2.10.0" || doc.Android["latest_version"] != "2.9.0" || doc.IOS["min_version"] != "2.0.0" {
				t.Errorf("version_state = %+v, want ios kept at 2.10.0 (never downgrade), android 2.9.0, min kept", doc)
			}
			s := stepOf(t, r, runs.PhaseMobile, "version_state")
			if s.Status != runs.StepUpdated || s.Fence == 0 || len(s.Changes.Fields) != 1 {
				t.Errorf("mobile step = %+v, want updated with a fence and one field", s)
			}
			// It shows the old and new value of the field it changed (never those it skipped).
			if want := []runs.FieldChange{{Field: "android.latest_version", Old: `"2.3.0"`, New: `"2.9.0"`}}; !slices.Equal(s.Changes.Values, want) {
				t.Errorf("mobile step's values = %+v, want %+v", s.Changes.Values, want)
			}
			if got, want := s.Changes.String(), `fields: android.latest_version "2.3.0" → "2.9.0"`; got != want {
				t.Errorf("mobile step's changes read %q, want %q", got, want)
			}
			// The preflight's reads, before any lease, carry the run only; the step's carry its
			// fence too, and it writes only under it.
			for _, req := range fs.Requests() {
				if req.Run != id || (req.Fence != fmt.Sprint(s.Fence) && (req.Fence != "" || req.Method != http.MethodGet)) {
					t.Errorf("%s %s carried run %q fence %q, want %s and %d (or no fence, for a preflight read)", req.Method, req.Path, req.Run, req.Fence, id, s.Fence)
				}
			}
		})
	}
}

func TestPlanShowsChangesAndLocksWithoutWriting(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api", "worker"}, ""))
	blocker := holdPhase1(t, h)
	defer blocker.Release(context.Background())
	p, err := h.engine.Plan(context.Background(), "prod", orchestrator.Trigger{Build: "5", ImageTag: "v7"})
	if err != nil {
		t.Fatal(err)
	}
	api := p.Services[0]
	if api.ImageTag == nil || api.ImageTag.Old != "v1" || api.ImageTag.New != "v7" {
		t.Errorf("api tag plan = %+v, want v1 → v7", api.ImageTag)
	}
	actions := map[string]string{}
	for _, e := range api.Env {
		actions[e.Key] = e.Action
	}
	if actions["LOG_LEVEL"] != "update" || actions["BUILD"] != "create" || actions["SENTRY_DSN"] != "create" {
		t.Errorf("api env plan = %v", actions)
	}
	if p.Locks[0].Key != "coolify:phase1" || p.Locks[0].Free || p.Locks[0].Current.Holder != "test#0/blocker" {
		t.Errorf("phase1 lock plan = %+v, want held by test#0/blocker", p.Locks[0])
	}
	for _, req := range h.coolify.Requests() {
		if req.Method != "GET" {
			t.Errorf("plan sent %s %s", req.Method, req.Path)
		}
	}
	b, _ := json.Marshal(p)
	if strings.Contains(string(b), "sentry-secret") || strings.Contains(string(b), `"info"`) {
		t.Errorf("plan shows values: %s", b)
	}
}

// A wait that lasts says who holds the key, and for an operator freeze, until when and why
// (the message `locks freeze` asks for is "shown to waiting runs").
func TestLockWaitSaysWhoHoldsTheKey(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	blocker := holdPhase1(t, h)
	first := h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	if ev := h.waitEvent(first, runs.EventLockWaiting, ""); !strings.Contains(ev.Message, "held by test#0/blocker") {
		t.Errorf("lock.waiting message %q, want it to name the holder test#0/blocker", ev.Message)
	}
	if got, want := h.get(first).WaitingFor(), "waiting for coolify:phase1, held by test#0/blocker since "; !strings.HasPrefix(got, want) {
		t.Errorf("waiting run's WaitingFor() = %q, want it to start %q", got, want)
	}
	if _, err := h.engine.Cancel(context.Background(), first, "test", ""); err != nil {
		t.Fatal(err)
	}
	if r := h.wait(first); len(r.Waiting) != 0 {
		t.Errorf("ended run still waits: %+v", r.Waiting)
	}
	_ = blocker.Release(context.Background())

	if _, err := h.locker.Freeze(context.Background(), locks.FreezeRequest{Key: "coolify:phase1", Message: "db migration, ask #ops", By: "alice",
		Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	second := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v3"})
	if ev := h.waitEvent(second, runs.EventLockWaiting, ""); !strings.Contains(ev.Message, "frozen by operator:alice until ") ||
		!strings.Contains(ev.Message, "db migration, ask #ops") {
		t.Errorf("lock.waiting message %q, want the freeze's holder, end and message", ev.Message)
	}
	if got, want := h.get(second).WaitingFor(), "waiting for coolify:phase1, frozen by operator:alice until "; !strings.HasPrefix(got, want) ||
		!strings.HasSuffix(got, ": db migration, ask #ops") {
		t.Errorf("frozen run's WaitingFor() = %q, want %q…: db migration, ask #ops", got, want)
	}
	if _, err := h.engine.Cancel(context.Background(), second, "test", ""); err != nil {
		t.Fatal(err)
	}
	h.wait(second)
}

// A run waiting for a lock another run holds names that run, and the wait ends with the grant.
func TestWaitingRunNamesTheRunHoldingTheKey(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang) // the first run holds api's lock
	first := h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	h.waitEvent(first, runs.EventDeployStarted, "api")
	second := h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v3"})
	h.waitEvent(second, runs.EventLockWaiting, "api")
	var w []runs.Wait
	if w = h.get(second).Waiting; len(w) != 1 {
		t.Fatalf("second run's Waiting = %+v, want one wait", w)
	}
	if w[0].LockKey != "coolify:"+uuidAPI || w[0].Step != "api" || w[0].HolderRun != first || w[0].HeldSince.IsZero() || w[0].Since.IsZero() {
		t.Errorf("second run's wait = %+v, want api's lock held by run %s, with both times", w[0], first)
	}
	if got := w[0].String(); !strings.Contains(got, "held by run "+first+" (prod#1/api) since ") {
		t.Errorf("wait reads %q, want it to name run %s and its holder prod#1/api", got, first)
	}
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Succeed)
	if _, err := h.engine.Cancel(context.Background(), first, "test", ""); err != nil {
		t.Fatal(err)
	}
	h.waitEvent(second, runs.EventLockAcquired, "api")
	if w := h.get(second).Waiting; len(w) != 0 {
		t.Errorf("second run granted api's lock still waits for %+v", w)
	}
	h.wait(second)
}
