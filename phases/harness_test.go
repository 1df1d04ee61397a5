package phases_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/pacing"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/redislock"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
	"github.com/deploy-orchestrator/orchestrator/mobile"
	"github.com/deploy-orchestrator/orchestrator/phases"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// store is what the engine needs of a run store.
type store interface {
	runs.Store
	runs.MarkStore
	runs.ReportStore
}

// harness is one engine over real backends and a fake Coolify.
type harness struct {
	t       testing.TB
	coolify *coolifytest.Server // nil in a child process, which uses the parent's
	// coolifyURL and coolifyToken address the fake Coolify.
	coolifyURL, coolifyToken string
	locker                   *locks.Locker
	store                    store
	engine                   *phases.Engine
	dir                      string
	env                      map[string]string
	// health maps a service name to the URL of its HTTP health check (none when absent).
	health map[string]string
	// backend is "sqlite" or "redis".
	backend string
	// secrets, when set, builds the pipeline's named secret sources.
	secrets func(name string, src config.SecretSource) (secrets.Source, error)
	// pace paces the engine's Coolify clients to the fake's throttle, as the daemon does.
	pace *pacing.Pool
	// limiter, when set, paces the engine's Coolify clients instead of pace.
	limiter outbound.Limiter
	// rdb is the Redis client of the redis backend.
	rdb redis.UniversalClient
	// instance is the engine's instance ID (default "test-instance").
	instance string
	// redisURL addresses the Redis server of a "redis" harness.
	redisURL string
	// observer, when set, is the engine's Observer.
	observer phases.Observer
	// notifier, when set, is the engine's Notifier.
	notifier phases.Notifier
	// reporter, when set, makes the engine's Reporter for the loaded pipelines.
	reporter func(pipelines map[string]*config.Pipeline) phases.Reporter
	// now, when set, is the engine's clock for deploy windows.
	now func() time.Time
	// version, when set, is the engine's Coolify clients' version: their requests carry
	// User-Agent orchestrator/<version>, which tells two engines' requests apart in the fake.
	version string
	// traces, when set, is the engine's tracer provider; publicURL its dashboard address.
	traces    trace.TracerProvider
	publicURL string
	// purposes, when set, is told the purpose of each Coolify request the engine sends.
	purposes func(coolify.Purpose)
}

// harnessRateLimit is the fake's throttle in end-to-end tests (requests per minute per
// token), scaled up from Coolify's 200 so tests stay quick; the engine's clients are paced to
// it and a test fails if the throttle ever answered 429. Benchmarks turn it off explicitly.
const harnessRateLimit = 60000

// harnessPollInterval is the lockers' fallback poll in end-to-end tests. Waiters are woken by
// release signals, so the poll rarely decides how long a test takes; but a waiter's queue
// ticket lives only three polls past its last attempt, and a waiter whose goroutine was not
// scheduled for that long (a loaded CI machine under the race detector stalls goroutines for
// hundreds of milliseconds) loses its place in the FIFO queue, so tests that rely on the
// queue's order (TestStaleOnASharedServiceUnderItsLock) would see runs take a lock out of
// turn. A second keeps a ticket three seconds.
const harnessPollInterval = time.Second

// harnessLivenessTTL is the engines' liveness lease in end-to-end tests: short, so takeover
// tests do not wait long for a dead daemon, yet long enough that a heartbeat delayed by a
// loaded machine under the race detector does not lose it (renewed every third of it, it is
// lost only when no renewal lands for two thirds of it); a lost lease stops every run of the
// daemon, and the tests that do not measure the takeover would then fail at random.
const harnessLivenessTTL = 3 * time.Second

// app UUIDs seeded in the fake.
const (
	uuidAPI    = "app-api-0000000000000001"
	uuidWorker = "app-worker-0000000000002"
	uuidWeb    = "app-web-00000000000000003"
	uuidGhost  = "app-ghost-0000000000000004" // not in the fake
	// uuidBroken is in the fake but refuses every write (400, so nothing was written to it): a
	// Phase-1 failure after the services before it were synced (the preflight finds nothing
	// wrong with it).
	uuidBroken = "app-broken-000000000000005"
)

// backends are the lock and run-store backends every end-to-end test runs on.
var backends = []string{"sqlite", "redis"}

// forEachBackend runs test once per backend.
func forEachBackend(t *testing.T, test func(t *testing.T, backend string)) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { test(t, b) })
	}
}

func newHarness(t *testing.T, opts ...coolifytest.Option) *harness {
	return newHarnessOn(t, "sqlite", opts...)
}

func newHarnessOn(t testing.TB, backend string, opts ...coolifytest.Option) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), env: map[string]string{"ORCH_SECRET_SENTRY_DSN": "sentry-secret-value-123"}, backend: backend}
	h.coolify = coolifytest.NewServer(t, append([]coolifytest.Option{coolifytest.WithRateLimit(harnessRateLimit, time.Minute)}, opts...)...)
	t.Cleanup(func() {
		if n := h.coolify.Throttled(); n > 0 {
			t.Errorf("the fake Coolify's throttle answered 429 %d times: the engine's calls were not paced under it", n)
		}
	})
	h.coolifyURL, h.coolifyToken = h.coolify.URL, h.coolify.Token
	for _, a := range []coolifytest.Application{
		{UUID: uuidAPI, Name: "api", ImageName: "ghcr.io/acme/api", ImageTag: "v1"},
		{UUID: uuidWorker, Name: "worker", ImageName: "ghcr.io/acme/worker", ImageTag: "v1"},
		{UUID: uuidWeb, Name: "web", ImageName: "ghcr.io/acme/web", ImageTag: "v1"},
	} {
		h.coolify.AddApplication(a)
	}
	h.coolify.AddApplication(coolifytest.Application{UUID: uuidBroken, Name: "broken", ImageName: "ghcr.io/acme/broken", ImageTag: "v1"})
	h.coolify.FailNext(1<<30, coolifytest.Fault{Method: "PATCH", UUID: uuidBroken, Status: http.StatusBadRequest,
		Message: "Invalid request."})
	h.coolify.SetEnv(uuidAPI, coolifytest.Env{Key: "LOG_LEVEL", Value: coolifytest.Str("debug"), IsRuntime: true, IsBuildtime: true})
	h.coolify.SetEnv(uuidAPI, coolifytest.Env{Key: "KEEP_ME", Value: coolifytest.Str("untouched"), IsRuntime: true, IsLiteral: true})

	h.openBackends()
	h.openPacing(h.coolify.RateLimit())
	return h
}

// openPacing paces the engine's clients under n calls per window (none when n is 0): on
// Redis for the redis backend, in the process for sqlite, as the daemon does.
func (h *harness) openPacing(n int, window time.Duration) {
	if n == 0 {
		h.pace = pacing.Off()
		return
	}
	budget := pacing.Budget{Limit: n, Window: window}
	var err error
	if h.rdb != nil {
		h.pace, err = pacing.NewRedisPool(h.rdb, budget, pacing.Options{})
	} else {
		h.pace, err = pacing.NewLocalPool(budget, pacing.Options{})
	}
	if err != nil {
		h.t.Fatal(err)
	}
}

// adoptHarness is the child process's harness: the parent's state files and fake Coolify.
func adoptHarness(t *testing.T) *harness {
	h := &harness{t: t, backend: "sqlite", dir: os.Getenv("PHASES_TEST_DIR"), env: map[string]string{"ORCH_SECRET_SENTRY_DSN": "sentry-secret-value-123"},
		coolifyURL: os.Getenv("PHASES_TEST_COOLIFY"), coolifyToken: coolifytest.DefaultToken}
	h.openBackends()
	h.openPacing(harnessRateLimit, time.Minute)
	return h
}

func (h *harness) openBackends() {
	t := h.t
	if h.backend == "redis" {
		if h.redisURL == "" {
			h.redisURL = redistest.Start(t).URL()
		}
		client, err := redislock.NewClient(h.redisURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		h.rdb = client
		h.locker = locks.New(redislock.New(client, redislock.Options{}), locks.Options{PollInterval: harnessPollInterval})
		t.Cleanup(func() { h.locker.Close() })
		st := redisstore.New(client, redisstore.Options{})
		t.Cleanup(func() { st.Close() })
		h.store = st
		return
	}
	d, err := sqlitelock.Open(filepath.Join(h.dir, "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	h.locker = locks.New(d, locks.Options{PollInterval: harnessPollInterval})
	t.Cleanup(func() { h.locker.Close() })
	s, err := sqlitestore.Open(context.Background(), filepath.Join(h.dir, "runs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h.store = s
}

// pipelineYAML is a pipeline over the three seeded apps; extra is appended.
func (h *harness) pipelineYAML(name string, services []string, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ncoolify:\n  url: %s\n  token: %q\nservices:\n", name, h.coolifyURL, h.coolifyToken)
	for _, s := range services {
		uuid := map[string]string{"api": uuidAPI, "worker": uuidWorker, "web": uuidWeb, "ghost": uuidGhost, "broken": uuidBroken}[s]
		fmt.Fprintf(&b, `  - name: %s
    uuid: %s
    image_tag: "${trigger.image_tag}"
    env:
      - key: LOG_LEVEL
        value: info
        is_buildtime: false
      - key: BUILD
        value: "${trigger.build}"
      - key: SENTRY_DSN
        secret: { source: env, key: SENTRY_DSN }
    deploy_timeout: 5s
`, s, uuid)
		if u := h.health[s]; u != "" {
			fmt.Fprintf(&b, "    health:\n      http: { url: %q, expect_status: 200, timeout: 300ms }\n", u)
		}
	}
	b.WriteString(`locks:
  ttl: 30s
  phase: { timeout: 20s, max_retries: 0 }
  service: { timeout: 20s, max_retries: 0 }
`)
	b.WriteString(extra)
	return b.String()
}

// start builds the engine over the given pipeline files (YAML texts) and starts it.
func (h *harness) start(pipelines ...string) {
	h.t.Helper()
	ps := map[string]*config.Pipeline{}
	for i, y := range pipelines {
		p, err := config.LoadPipelineBytes(fmt.Sprintf("p%d.yaml", i), []byte(y), func(k string) string { return h.env[k] })
		if err != nil {
			h.t.Fatalf("load pipeline: %v", err)
		}
		ps[p.Name] = p
	}
	var reporter phases.Reporter
	if h.reporter != nil {
		reporter = h.reporter(ps)
	}
	e, err := phases.New(phases.Deps{
		Store: h.store, Marks: h.store, Locker: h.locker, Pipelines: ps, Reporter: reporter,
		Coolify: func(url, token string) phases.Coolify {
			opts := []coolify.Option{coolify.WithPollInterval(10 * time.Millisecond), coolify.WithVersion(cmp.Or(h.version, "dev")),
				coolify.WithRetry(coolify.RetryPolicy{MaxRetries: 3, MinWait: 5 * time.Millisecond, MaxWait: 50 * time.Millisecond, MaxRetryAfter: time.Second})}
			if h.limiter != nil {
				opts = append(opts, coolify.WithLimiter(h.limiter))
			} else if p := h.pace.For(url, token); p != nil {
				opts = append(opts, coolify.WithLimiter(p))
			}
			if h.purposes != nil {
				opts = append(opts, coolify.WithPurposeMetrics(h.purposes))
			}
			if b := h.pace.Board(url, token); b != nil {
				opts = append(opts, coolify.WithBoard(b))
			}
			return coolify.New(url, token, opts...)
		},
		Flagsmith:    func(url, key string) *mobile.Client { return mobile.New(url, key) },
		Secrets:      h.secrets,
		Getenv:       func(k string) string { return h.env[k] },
		EnvPrefix:    "ORCH_SECRET_",
		Instance:     cmp.Or(h.instance, "test-instance"),
		LivenessTTL:  harnessLivenessTTL,
		Logger:       slog.New(slog.DiscardHandler),
		PollInterval: 10 * time.Millisecond,
		Observer:     h.observer,
		Notifier:     h.notifier,
		Traces:       h.traces,
		PublicURL:    h.publicURL,
		Now:          h.now,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := e.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.engine = e
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
}

// peer is a second daemon sharing h's store and locks: its own connections to h's backends
// (on SQLite, the same files, as a second process on the host opens them) and its own
// instance ID, over the same fake Coolify. Start it with start.
func (h *harness) peer(instance string) *harness { return h.peerVia(instance, h.redisURL) }

// peerVia is peer on the redis backend reached at redisURL instead of h's: the same server
// through a fault proxy, say.
func (h *harness) peerVia(instance, redisURL string) *harness {
	p := &harness{t: h.t, coolify: h.coolify, coolifyURL: h.coolifyURL, coolifyToken: h.coolifyToken, dir: h.dir,
		env: h.env, health: h.health, backend: h.backend, secrets: h.secrets, instance: instance, redisURL: redisURL}
	p.openBackends()
	return p
}

// submit triggers a run and returns its ID.
func (h *harness) submit(pipeline string, t orchestrator.Trigger) string {
	h.t.Helper()
	r, _, err := h.engine.Submit(context.Background(), pipeline, t)
	if err != nil {
		h.t.Fatalf("submit %s: %v", pipeline, err)
	}
	return r.ID
}

// wait waits for a run to end and returns it.
func (h *harness) wait(id string) runs.Run {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := h.engine.Wait(ctx, id); err != nil {
		h.t.Fatalf("run %s did not end: %v", id, err)
	}
	r, err := h.store.Get(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	if !r.Status.Terminal() {
		h.t.Fatalf("run %s: status %s after its execution ended", id, r.Status)
	}
	return r
}

// get reads a run from the store.
func (h *harness) get(id string) runs.Run {
	h.t.Helper()
	r, err := h.store.Get(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *harness) events(id string) []runs.Event {
	h.t.Helper()
	evs, err := h.store.Events(context.Background(), id, 0, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

// errSeen ends a Follow once the awaited event is seen.
var errSeen = errors.New("seen")

// waitEvent blocks until run id logs an event of type typ for service (any when "").
func (h *harness) waitEvent(id string, typ runs.EventType, service string) runs.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got runs.Event
	err := runs.Follow(ctx, h.store, id, 0, func(e runs.Event) error {
		if e.Type == typ && (service == "" || e.Service == service) {
			got = e
			return errSeen
		}
		return nil
	})
	if !errors.Is(err, errSeen) {
		h.t.Fatalf("run %s: no %s event for %q: %v", id, typ, service, err)
	}
	return got
}

func stepOf(t *testing.T, r runs.Run, phase runs.Phase, name string) runs.Step {
	t.Helper()
	s := r.Step(phase, name)
	if s == nil {
		t.Fatalf("run %s has no %s step %q", r.ID, phase, name)
	}
	return *s
}
