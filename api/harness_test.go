package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/testutil"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
	"github.com/deploy-orchestrator/orchestrator/metrics"
	"github.com/deploy-orchestrator/orchestrator/notify"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
)

// Tokens and secrets of the test config. Each is a sentinel the secrets tests search for.
const (
	triggerToken  = "trigger-token-SENTINEL-0001"
	adminToken    = "admin-token-SENTINEL-0002"
	readToken     = "read-token-SENTINEL-0003"
	githubSecret  = "github-secret-SENTINEL-0004"
	gitlabSecret  = "gitlab-secret-SENTINEL-0005"
	genericSecret = "generic-secret-SENTINEL-0006"
)

var sentinels = []string{triggerToken, adminToken, readToken, githubSecret, gitlabSecret, genericSecret, oidcClientSecret}

// testEngine stands in for the deploy engine (package phases), which the API reaches only
// through orchestrator.Engine. It is backed by the real run store: Submit creates a run with one
// pending step per service and phase and a run.queued event; the test moves steps with
// drive. It checks triggers the way the engine will: unknown pipeline, and a pipeline's
// required image tag.
type testEngine struct {
	store runs.Store
	// pipelines maps a name to its services.
	pipelines map[string][]string

	// resolvers are pipelines whose triggers Submit checks with config's Resolve, as the
	// engine does, returning its error the way the engine wraps it.
	resolvers map[string]*config.Pipeline

	// services and servicesErr are what Services answers.
	services    []orchestrator.Service
	servicesErr error

	mu        sync.Mutex
	submitted int
	closed    bool // Submit answers ErrShuttingDown, as the engine does while it stops
}

var _ orchestrator.Engine[*runs.Run] = (*testEngine)(nil)

func (e *testEngine) setClosed(v bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = v
}

func (e *testEngine) Submit(ctx context.Context, pipeline string, t orchestrator.Trigger) (*runs.Run, bool, error) {
	services, ok := e.pipelines[pipeline]
	if !ok {
		return nil, false, fmt.Errorf("submit %q: %w", pipeline, orchestrator.ErrUnknownPipeline)
	}
	if p := e.resolvers[pipeline]; p != nil {
		if _, err := p.Resolve(t); err != nil {
			return nil, false, fmt.Errorf("invalid trigger: %w", err)
		}
	}
	if pipeline == "prod" && t.ImageTag == "" {
		// What phases.Engine returns when Pipeline.Resolve fails: config.Problems, wrapped,
		// naming the trigger's field.
		return nil, false, fmt.Errorf("invalid trigger: %w", config.Problems{{
			File: "/etc/orchestrator/pipelines/prod.yaml", Field: "services[0].image_tag", Trigger: "image_tag",
			Message: `the trigger has no image_tag (referenced as "${trigger.image_tag}")`,
		}})
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, false, fmt.Errorf("submit %q: %w", pipeline, orchestrator.ErrShuttingDown)
	}
	r := runs.Run{Pipeline: pipeline, Trigger: t}
	for _, ph := range []runs.Phase{runs.Phase1, runs.Phase2} {
		for _, s := range services {
			r.SetStep(runs.Step{Phase: ph, Name: s, UUID: "uuid-" + s, Status: runs.StepPending, LockKey: "coolify:uuid-" + s})
		}
	}
	run, created, err := e.store.Create(ctx, r)
	if err != nil {
		return nil, false, fmt.Errorf("submit %q: %w", pipeline, err)
	}
	if created {
		e.mu.Lock()
		e.submitted++
		e.mu.Unlock()
		if _, err := e.store.Append(ctx, run.ID, runs.Event{Type: runs.EventRunQueued}); err != nil {
			return nil, false, err
		}
	}
	return &run, !created, nil
}

// panicPipeline is a pipeline name whose Plan panics, as a bug in the engine would.
const panicPipeline = "panics"

func (e *testEngine) Cancel(ctx context.Context, id, by, reason string) (*runs.Run, error) {
	run, err := e.store.Update(ctx, id, func(r *runs.Run) error {
		r.Status = runs.StatusCanceled
		r.Reason = strings.TrimSuffix("canceled by "+by+": "+reason, ": ")
		r.EndedAt = time.Now().UTC()
		return nil
	}, runs.Event{Type: runs.EventRunCanceled})
	if err != nil {
		return nil, fmt.Errorf("cancel %q: %w", id, err)
	}
	return &run, nil
}

// Decide records the vote on the run's decision as the engine does for one approval needed,
// refusing a digest other than "plan-1".
func (e *testEngine) Decide(ctx context.Context, id string, v orchestrator.DecisionVote) (*runs.Run, error) {
	if v.Approve && v.Digest != "plan-1" {
		return nil, fmt.Errorf("decide %q: %w", id, orchestrator.ErrDecisionChanged)
	}
	run, err := e.store.Update(ctx, id, func(r *runs.Run) error {
		if r.Decision == nil {
			r.Decision = &runs.Decision{Kind: runs.DecisionApproval, Digest: "plan-1", Needed: 1}
		}
		r.Decision.Votes = append(r.Decision.Votes, runs.Vote{By: v.By, Approve: v.Approve, Digest: v.Digest, Reason: v.Reason})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decide %q: %w", id, err)
	}
	return &run, nil
}

// OverrideWindow grants at once, except to "api:ops (again)", refused as the person who
// asked first.
func (e *testEngine) OverrideWindow(ctx context.Context, id, by, reason string) (*runs.Run, bool, error) {
	run, err := e.store.Get(ctx, id)
	if err != nil {
		return nil, false, fmt.Errorf("override %q: %w", id, err)
	}
	if strings.HasSuffix(by, "(again)") {
		return &run, false, fmt.Errorf("override %q: %w", id, orchestrator.ErrSecondPerson)
	}
	return &run, true, nil
}

func (e *testEngine) Plan(ctx context.Context, pipeline string, t orchestrator.Trigger) (*orchestrator.Plan, error) {
	if pipeline == panicPipeline {
		var m map[string]int
		//lint:ignore SA5000 the runtime's own panic, as a buggy engine would raise, is the point
		m[t.ImageTag]++ // a bug: assignment to a nil map
	}
	services, ok := e.pipelines[pipeline]
	if !ok {
		return nil, fmt.Errorf("plan %q: %w", pipeline, orchestrator.ErrUnknownPipeline)
	}
	plan := &orchestrator.Plan{Pipeline: pipeline, Parallel: 1}
	for _, name := range services {
		plan.Services = append(plan.Services, orchestrator.ServicePlan{Name: name, UUID: "uuid-" + name, Kind: "application",
			ImageTag: &orchestrator.TagChange{New: t.ImageTag}})
	}
	return plan, nil
}

func (e *testEngine) Pipelines() []string {
	var names []string
	for n := range e.pipelines {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (e *testEngine) Services(context.Context) ([]orchestrator.Service, error) {
	return e.services, e.servicesErr
}

func (e *testEngine) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.submitted
}

// fixture is a server over the real SQLite run store and lock backend.
type fixture struct {
	t       testing.TB
	cfg     *config.Daemon
	store   *sqlitestore.Store
	locker  *locks.Locker
	engine  *testEngine
	metrics *metrics.Metrics
	// notifier is the daemon's, when the config has a notify block.
	notifier *notify.Notifier
	logs     *testutil.SyncBuffer
	h        http.Handler
}

func testConfig() *config.Daemon {
	return &config.Daemon{
		Tokens: config.Tokens{Trigger: triggerToken, Admin: adminToken, Read: readToken},
		Webhooks: config.Webhooks{
			GitHub: &config.Webhook{Secret: githubSecret, Rules: []config.WebhookRule{
				{Event: "workflow_run", Repository: "acme/api", Branch: "main", Workflow: "release",
					Pipeline: "prod", Trigger: config.TriggerTemplate{ImageTag: "${payload.workflow_run.head_sha}"}},
				{Event: "push", Repository: "acme/api", Branch: "main", Pipeline: "demo",
					Trigger: config.TriggerTemplate{Params: map[string]string{"pusher": "${payload.pusher.name}"}}},
			}},
			GitLab: &config.Webhook{Secret: gitlabSecret, Rules: []config.WebhookRule{
				{Event: "pipeline", Repository: "acme/web", Branch: "main", Pipeline: "demo",
					Trigger: config.TriggerTemplate{ImageTag: "${payload.object_attributes.sha}"}},
			}},
			Generic: &config.Webhook{Secret: genericSecret, Rules: []config.WebhookRule{
				{Event: "build.succeeded", Repository: "acme/*", Pipeline: "demo"},
			}},
		},
		MaxBodyBytes: 256 << 10,
		// httptest.NewRequest's Host, and httptest.NewServer's.
		AllowedHosts: []string{"example.com", "127.0.0.1"},
	}
}

func newFixture(t testing.TB, mutate ...func(*config.Daemon)) *fixture {
	t.Helper()
	dir := t.TempDir()
	store, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "runs.db"))
	if err != nil {
		t.Fatalf("open run store: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	drv, err := sqlitelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		t.Fatalf("open lock db: %v", err)
	}
	metrics := metrics.New()
	locker := locks.New(drv, locks.Options{Observer: metrics})
	t.Cleanup(func() { locker.Close() })

	cfg := testConfig()
	for _, m := range mutate {
		m(cfg)
	}
	f := &fixture{
		t: t, cfg: cfg, store: store, locker: locker, metrics: metrics, logs: &testutil.SyncBuffer{},
		engine: &testEngine{store: store, pipelines: map[string][]string{
			"demo": {"api", "worker"},
			"prod": {"api", "worker", "web"},
		}},
	}
	logger := slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var notifier api.Notifier
	if cfg.Notify != nil {
		n := notify.New(notify.Options{Default: cfg.Notify, Recorder: store, Logger: logger,
			Metrics: metrics.OutsideRequest, Outcome: metrics.Notification})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = n.Close(ctx)
		})
		notifier, f.notifier = n, n
	}
	f.h = api.NewServer(api.Deps{
		Config: cfg, Engine: f.engine, Runs: store, Locks: locker, Metrics: metrics, Logger: logger,
		Heartbeat: 50 * time.Millisecond, Notifier: notifier,
	})
	t.Cleanup(func() {
		for _, s := range sentinels {
			if strings.Contains(f.logs.String(), s) {
				t.Errorf("the log holds the secret %q", s)
			}
		}
	})
	return f
}

// request builds a request; body is a string, []byte, or a value encoded as JSON.
func request(method, path, token string, body any) *http.Request {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			panic(err)
		}
		rd = bytes.NewReader(data)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

func (f *fixture) serve(req *http.Request) *httptest.ResponseRecorder {
	f.t.Helper()
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	for _, s := range sentinels {
		if strings.Contains(rec.Body.String(), s) {
			f.t.Errorf("%s %s: the answer holds the secret %q", req.Method, req.URL.Path, s)
		}
	}
	return rec
}

func (f *fixture) do(method, path, token string, body any) *httptest.ResponseRecorder {
	f.t.Helper()
	return f.serve(request(method, path, token, body))
}

// apiError is the JSON error body.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

// wantError checks an error answer: status, JSON body with a code, and the field when given.
func wantError(t *testing.T, rec *httptest.ResponseRecorder, status int, field string) apiError {
	t.Helper()
	var e apiError
	if rec.Code != status {
		t.Fatalf("status: got %d, want %d (body %s)", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type: got %q, want application/json", ct)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, rec.Body)
	}
	if e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("error body lacks code or message: %s", rec.Body)
	}
	if field != "" && e.Error.Field != field {
		t.Fatalf("error field: got %q, want %q (body %s)", e.Error.Field, field, rec.Body)
	}
	return e
}

func decodeJSON[T any](t testing.TB, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	return v
}

// runCount is how many runs the store holds.
func (f *fixture) runCount() int {
	f.t.Helper()
	n, cursor := 0, ""
	for {
		p, err := f.store.List(context.Background(), runs.Filter{Limit: runs.MaxLimit, Cursor: cursor})
		if err != nil {
			f.t.Fatalf("list runs: %v", err)
		}
		n += len(p.Runs)
		if p.Next == "" {
			return n
		}
		cursor = p.Next
	}
}

// trigger starts a run through the API and returns it.
func (f *fixture) trigger(pipeline string, body any) runs.Run {
	f.t.Helper()
	rec := f.do("POST", "/v1/pipelines/"+pipeline+"/runs", triggerToken, body)
	if rec.Code != http.StatusAccepted {
		f.t.Fatalf("trigger %s: got %d, want 202: %s", pipeline, rec.Code, rec.Body)
	}
	return *decodeJSON[struct{ Run *runs.Run }](f.t, rec).Run
}

// setStep moves one step of a run, with its event, as the engine would.
func (f *fixture) setStep(id string, phase runs.Phase, name string, status runs.StepStatus, fence int64) {
	f.t.Helper()
	f.moveStep(id, phase, name, status, fence, runs.EventServiceSynced, nil)
}

// moveStep is setStep with the event type and a function that fills in more of the step.
func (f *fixture) moveStep(id string, phase runs.Phase, name string, status runs.StepStatus, fence int64,
	ev runs.EventType, more func(*runs.Step)) {
	f.t.Helper()
	_, err := f.store.Update(context.Background(), id, func(r *runs.Run) error {
		s := r.Step(phase, name)
		if s == nil {
			return fmt.Errorf("no step %s/%s", phase, name)
		}
		now := time.Now().UTC()
		if s.StartedAt.IsZero() {
			s.StartedAt = now
		}
		if status.Done() {
			s.EndedAt = now
		}
		s.Status, s.Fence, s.LockWait = status, fence, 120*time.Millisecond
		if r.Status == runs.StatusQueued {
			r.Status, r.StartedAt = runs.Status(phase), now
		}
		if r.Status != runs.Status(phase) {
			r.Status = runs.Status(phase)
		}
		if more != nil {
			more(s)
		}
		return nil
	}, runs.Event{Type: ev, Phase: phase, Service: name, Fence: fence, LockKey: "coolify:uuid-" + name})
	if err != nil {
		f.t.Fatalf("set step %s/%s: %v", phase, name, err)
	}
}

// event appends ev to run id's events.
func (f *fixture) event(id string, ev runs.Event) {
	f.t.Helper()
	if _, err := f.store.Update(context.Background(), id, func(*runs.Run) error { return nil }, ev); err != nil {
		f.t.Fatalf("event %s on %s: %v", ev.Type, id, err)
	}
}

// finish ends a run as succeeded, with its end event.
func (f *fixture) finish(id string) {
	f.t.Helper()
	_, err := f.store.Update(context.Background(), id, func(r *runs.Run) error {
		r.Status, r.EndedAt = runs.StatusSucceeded, time.Now().UTC()
		return nil
	}, runs.Event{Type: runs.EventRunSucceeded})
	if err != nil {
		f.t.Fatalf("finish %s: %v", id, err)
	}
}

// setDecision puts d on run id as the engine does when the run asks, status awaiting.
func (f *fixture) setDecision(id string, d *runs.Decision) {
	f.t.Helper()
	if _, err := f.store.Update(context.Background(), id, func(r *runs.Run) error {
		r.Status, r.Decision = runs.StatusAwaiting, d
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
}
