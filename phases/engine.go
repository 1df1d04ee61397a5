// Package phases is the engine: it executes runs of pipelines in two phases under the lock
// protocol (docs/architecture.md, "The two phases").
//
// Phase 1 takes coolify:phase1, then one coolify:<uuid> at a time, snapshots each service,
// writes only what differs (env vars with their full flag set, the image tag), reads back to
// verify and records "synced by run R at fence F". Phase 2 takes coolify:phase2, then each
// service's lock again, checks that the service still carries this run's sync, deploys, waits
// for the deployment with its own deadline and runs the health check. Mobile steps run in the
// mobile: namespace and never while the run holds a coolify: key. A pipeline's analysis
// measures metric checks after each wave and after the release (analysis.go); a failed one
// rolls the whole release back, the flags first. Failures compensate from the Phase-1
// snapshots as the pipeline's on_failure says.
//
// The engine implements the front doors' contract, orchestrator.Engine, and returns the
// domain's errors. It depends on narrow interfaces (Coolify) and on the contracts of locks
// and runs; only cmd/orchestrator wires concrete backends and clients.
package phases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/analysis"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/mobile"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// Coolify is what the engine needs from a Coolify client (*coolify.Client).
type Coolify interface {
	GetApplication(ctx context.Context, uuid string) (*coolify.Application, error)
	GetService(ctx context.Context, uuid string) (*coolify.Service, error)
	ListApplications(ctx context.Context) ([]coolify.Application, error)
	ListEnvs(ctx context.Context, ref coolify.ResourceRef) ([]coolify.EnvVar, error)
	ListAllEnvs(ctx context.Context, ref coolify.ResourceRef) ([]coolify.EnvVar, error)
	Abilities(ctx context.Context, ref coolify.ResourceRef) (coolify.Abilities, error)
	UpsertEnvs(ctx context.Context, ref coolify.ResourceRef, vars []coolify.EnvVar) error
	DeleteEnv(ctx context.Context, ref coolify.ResourceRef, envUUID string) error
	SetImageTag(ctx context.Context, appUUID, tag string) error
	Deploy(ctx context.Context, appUUID string, force bool) (*coolify.DeployResult, error)
	ActiveDeployments(ctx context.Context, appUUID string) ([]coolify.Deployment, error)
	ListDeployments(ctx context.Context, appUUID string, skip, take int) (int, []coolify.Deployment, error)
	GetDeployment(ctx context.Context, deploymentUUID string) (*coolify.Deployment, error)
	WaitDeployment(ctx context.Context, deploymentUUID string, timeout time.Duration) (*coolify.Deployment, error)
	CancelDeployment(ctx context.Context, deploymentUUID string) error
	RestartService(ctx context.Context, serviceUUID string, pullLatest bool) (string, error)
}

// Observer receives run, phase and step outcomes and timings for metrics. Methods must not
// block. *metrics.Metrics implements it.
type Observer interface {
	RunEnded(pipeline string, status runs.Status)
	PhaseDone(pipeline string, phase runs.Phase, d time.Duration)
	StepDone(pipeline string, phase runs.Phase, status runs.StepStatus, d time.Duration)
	// RunTakenOver counts a run of this daemon that was taken over: by another daemon, or
	// (self) by this one after it lost its liveness lease and stopped the run.
	RunTakenOver(pipeline string, self bool)
	// DeploymentStillBuilding counts a deployment a run left queued or in progress in
	// Coolify because it would not end when canceled (the run failed naming it).
	DeploymentStillBuilding(pipeline string)
}

// Deps are the engine's collaborators. Store, Marks, Locker, Pipelines and Coolify are
// required.
type Deps struct {
	Store  runs.Store
	Marks  runs.MarkStore
	Locker *locks.Locker
	// Audit is the audit log the engine's own actions (a deployment canceled, a takeover, a
	// leftover lease force-released, a rollback) are recorded in. Nil: Store, when it is one
	// (both run stores are; a Store wrapped by the daemon, for pacing, is not: pass the
	// store itself here). With neither, each such record is logged as not written.
	Audit runs.AuditLog
	// Pipelines are the loaded pipeline definitions by name.
	Pipelines map[string]*config.Pipeline
	// Coolify returns the client of an instance (called once per URL and token).
	Coolify func(url, token string) Coolify
	// Flagsmith returns the client of a Flagsmith instance (called once per URL and key).
	Flagsmith func(url, apiKey string) *mobile.Client
	// Secrets builds the source a pipeline names under secrets: (called once per pipeline and
	// source). Nil refuses pipelines that name one.
	Secrets func(name string, src config.SecretSource) (secrets.Source, error)
	// Getenv reads the daemon's environment for the built-in "env" secret source.
	Getenv func(string) string
	// EnvPrefix is prepended to keys of the "env" source (e.g. "ORCH_SECRET_").
	EnvPrefix string
	// Instance names this daemon (run owner). It holds the liveness lease
	// orchestrator.DaemonLiveKey(Instance) from Start to Shutdown; runs it owned in a previous life
	// that had not ended are taken over by Start.
	Instance string
	// LivenessTTL is the TTL of the liveness lease (default config.DefaultLivenessTTL). Other
	// daemons take over this one's runs once it has expired.
	LivenessTTL time.Duration
	Logger      *slog.Logger
	Observer    Observer
	// Notifier, when set, is told about runs that end and lock waits over the pipeline's
	// threshold.
	Notifier Notifier
	// Reporter, when set, is told of each state a run enters: queued, in a phase, ended.
	Reporter Reporter
	// HTTP is the client of HTTP health checks (default: 10s timeout per request). Its
	// CheckRedirect is replaced by outbound.SameHostRedirect: a check follows no redirect to
	// another scheme, host or port than its URL's.
	HTTP *http.Client
	// Traces, when set, is the tracer provider of the runs' spans (tracing.go); nil traces
	// nothing.
	Traces trace.TracerProvider
	// PublicURL is the dashboard's address; a run's span links to its page there. Optional.
	PublicURL string
	// PollInterval paces health-check and service-status polling (default 2s).
	PollInterval time.Duration
	// Prometheus returns the client of the Prometheus a pipeline's analysis queries (default:
	// analysis.NewClient over HTTP).
	Prometheus func(url string) (analysis.Client, error)
	// Now is the clock the deploy windows are read by (default time.Now).
	Now func() time.Time
}

// Stop causes: why a run stops at its next safe point.
var (
	errCanceled   = errors.New("canceled")
	errShutdown   = errors.New("daemon shutting down")
	errSuperseded = errors.New("superseded by a newer run")
)

// cancelRequest is the stop cause of a cancel: who asked, and why when they said.
type cancelRequest struct{ by, reason string }

func (c *cancelRequest) Error() string {
	s := "canceled by " + cmp.Or(c.by, "request")
	if c.reason != "" {
		s += ": " + c.reason
	}
	return s
}

func (c *cancelRequest) Is(target error) bool { return target == errCanceled }

// errCutOff refuses a run while this daemon stops its runs after the loss of its liveness
// lease (answered 503, like a store that cannot be reached: ask again shortly).
var errCutOff = fmt.Errorf("this daemon lost its liveness lease and is stopping its runs before it takes it again: %w", runs.ErrUnavailable)

// Engine executes runs. It is safe for concurrent use. It implements the front doors'
// contract, orchestrator.Engine.
type Engine struct {
	d   Deps
	log *slog.Logger

	mu       sync.Mutex
	closed   bool
	execs    map[string]*execution // runs this engine executes now, by ID
	coolifys map[string]Coolify
	flags    map[string]*mobile.Client
	sources  map[string]secrets.Source // by pipeline and source name
	wg       sync.WaitGroup
	// lastGate is the phase-1 gate of the run submitted last: the next run waits for it, so
	// runs of this engine enter Phase 1 in the order they were submitted.
	lastGate <-chan struct{}

	live      *locks.Lease // this instance's liveness lease
	startedAt time.Time    // when Start began: runs of this instance created before are leftovers
	leftovers bool         // leftovers of this instance (a previous life's, disowned runs) remain to take over
	// cutOff is set from the loss of the liveness lease until the runs it stopped are taken
	// over: no run is started meanwhile.
	cutOff bool
	// disowned are the runs whose executions stopped because this daemon no longer owned
	// them, until they are seen ended; reported, those said to be taken over (once each).
	disowned    map[string]runs.Run
	reported    map[string]bool
	watchCancel context.CancelFunc
	watchDone   chan struct{}
}

var _ orchestrator.Engine[*runs.Run] = (*Engine)(nil)

// New returns an engine. Call Start before Submit.
func New(d Deps) (*Engine, error) {
	switch {
	case d.Store == nil, d.Marks == nil, d.Locker == nil, d.Coolify == nil:
		return nil, errors.New("phases: Store, Marks, Locker and Coolify are required")
	case d.Instance == "":
		return nil, errors.New("phases: Instance is required")
	}
	if al, ok := d.Store.(runs.AuditLog); ok && d.Audit == nil {
		d.Audit = al
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Getenv == nil {
		d.Getenv = func(string) string { return "" }
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	if d.HTTP != nil {
		c := *d.HTTP
		hc = &c
	}
	// A health URL names the host the pipeline's file chose; a redirect must not take the
	// check elsewhere (an internal address, a cloud metadata endpoint).
	hc.CheckRedirect = outbound.SameHostRedirect
	d.HTTP = hc
	if d.PollInterval <= 0 {
		d.PollInterval = 2 * time.Second
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Pipelines == nil {
		d.Pipelines = map[string]*config.Pipeline{}
	}
	if d.LivenessTTL <= 0 {
		d.LivenessTTL = config.DefaultLivenessTTL
	}
	for _, ns := range append(orchestrator.Namespaces(), orchestrator.NamespaceDaemon) {
		if err := d.Locker.RegisterNamespace(ns); err != nil {
			return nil, fmt.Errorf("phases: register lock namespace %q: %w", ns, err)
		}
	}
	return &Engine{
		d: d, log: d.Logger,
		execs:    map[string]*execution{},
		coolifys: map[string]Coolify{},
		sources:  map[string]secrets.Source{},
		flags:    map[string]*mobile.Client{},
		disowned: map[string]runs.Run{},
		reported: map[string]bool{},
	}, nil
}

// Start takes this instance's liveness lease (waiting up to 1.5 liveness TTLs for one left
// by a killed previous life to expire; ErrInstanceLive when a live daemon keeps it), then
// takes over the runs this instance owned in a previous life that had not ended (see
// takeover: their deployments still running are canceled before their leases are released),
// and starts watching for other daemons' expired liveness leases, whose runs it takes over.
// It returns the runs of its previous life it ended.
func (e *Engine) Start(ctx context.Context) ([]runs.Run, error) {
	if err := e.holdLiveness(ctx); err != nil {
		return nil, err
	}
	e.startedAt = time.Now()
	marked, err := e.takeover(ctx, e.d.Instance, e.restartReason(), true)
	if err != nil {
		// Coolify or the store may be down: the watch tries again; the leftovers' leases
		// stay held meanwhile, so nobody writes over their deployments.
		e.log.LogAttrs(ctx, slog.LevelError, "previous life's runs not taken over yet; trying again", slog.String(logError, err.Error()))
		e.mu.Lock()
		e.leftovers = true
		e.mu.Unlock()
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.watchCancel, e.watchDone = cancel, make(chan struct{})
	go e.watch(wctx)
	return marked, nil
}

func (e *Engine) restartReason() string {
	return fmt.Sprintf("daemon %s restarted while the run was executing", e.d.Instance)
}

// releaseLeftover force-releases key if it is still held under run r's holder prefix, and
// reports whether it did.
func (e *Engine) releaseLeftover(ctx context.Context, r runs.Run, key, reason string) bool {
	info, err := e.d.Locker.Get(ctx, key)
	if err != nil {
		return false // free already, expired, or backend down: the TTL will do it
	}
	if !isRunsHolder(info.Holder, r) {
		return false
	}
	why := fmt.Sprintf("run %s: %s", r.ID, reason)
	evicted, err := e.d.Locker.ForceRelease(ctx, locks.ForceRequest{
		Key: key, Fence: info.Fence, By: e.d.Instance, LockDelay: time.Millisecond, Reason: why,
	})
	if err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "leftover lease not released", slog.String(logRunID, r.ID),
			slog.String(logLockKey, key), slog.String(logError, err.Error()))
		return false
	}
	e.audit(ctx, runs.AuditForceRelease, key, why, map[string]string{"run": r.ID, "fence": strconv.FormatInt(info.Fence, 10),
		"evicted_holder": evicted.Holder, "evicted_fence": strconv.FormatInt(evicted.Fence, 10)})
	e.log.LogAttrs(ctx, slog.LevelInfo, "leftover lease released", slog.String(logRunID, r.ID),
		slog.String(logLockKey, key), slog.Int64(logFence, info.Fence))
	return true
}

// stopWatch ends the takeover watch and gives the liveness lease back.
func (e *Engine) stopWatch() {
	if e.watchCancel != nil {
		e.watchCancel()
		<-e.watchDone
	}
	if live := e.liveLease(); live != nil {
		ctx, cancel := context.WithTimeout(context.Background(), finalWriteTimeout)
		defer cancel()
		_ = live.Release(ctx)
	}
}

// Pipelines returns the names of the loaded pipelines, sorted.
func (e *Engine) Pipelines() []string { return slices.Sorted(maps.Keys(e.d.Pipelines)) }

// Submit stores a queued run of pipeline for trigger t and starts executing it. When
// t.IdempotencyKey matches an earlier run of the pipeline, that run is returned with
// existing == true and nothing starts.
//
// Under the pipeline's supersede policy, the pending runs of the same pipeline (not yet in
// Phase 1) on every daemon sharing the store end as superseded by the new one, unless one of
// them has a newer build (order: build): then the new run is returned superseded by it, and
// nothing starts (see supersedePending).
//
// Errors: orchestrator.ErrUnknownPipeline; config.Problems for an invalid trigger (matching
// orchestrator.ErrInvalid, converting to orchestrator.FieldErrors that name the trigger's
// fields); a refused *orchestrator.FieldError naming build for a build more than the
// pipeline's max_build_ahead ahead of its newest (see checkBuildAhead);
// orchestrator.ErrShuttingDown; the store's errors.
func (e *Engine) Submit(ctx context.Context, pipeline string, t orchestrator.Trigger) (*runs.Run, bool, error) {
	p := e.d.Pipelines[pipeline]
	if p == nil {
		return nil, false, orchestrator.UnknownPipeline(pipeline, e.Pipelines())
	}
	// Resolve validates the trigger too and reports every problem at once.
	resolved, err := p.Resolve(t)
	if err != nil {
		return nil, false, fmt.Errorf("invalid trigger: %w", err)
	}
	if err := e.checkBuildAhead(ctx, resolved, t); err != nil {
		return nil, false, fmt.Errorf("trigger of %s: %w", pipeline, err)
	}

	e.mu.Lock()
	closed, cutOff := e.closed, e.cutOff
	e.mu.Unlock()
	if closed {
		return nil, false, orchestrator.ErrShuttingDown
	}
	if cutOff {
		return nil, false, errCutOff
	}

	r, created, err := e.createRun(ctx, runs.Run{Pipeline: pipeline, Trigger: t, Instance: e.d.Instance, Steps: initialSteps(resolved)})
	if err != nil {
		return nil, false, fmt.Errorf("create run of %q: %w", pipeline, err)
	}
	if !created {
		return &r, true, nil
	}
	if _, err := e.d.Store.Append(ctx, r.ID, runs.Event{Type: runs.EventRunQueued, Message: queuedMessage(t)}); err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "run queued event not written", slog.String(logRunID, r.ID), slog.String(logError, err.Error()))
	}
	e.report(ctx, r)
	if resolved.Concurrency == config.ConcurrencySupersede && e.supersedePending(ctx, resolved, r) {
		if o := e.d.Observer; o != nil {
			o.RunEnded(pipeline, runs.StatusSuperseded)
		}
		if cur, err := e.d.Store.Get(ctx, r.ID); err == nil {
			r = cur
		}
		endRunSpan(e.startRunSpan(r), r.Status, r.Reason) // its whole trace: it never executes
		return &r, false, nil
	}

	x := e.newExecution(r, resolved)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		x.finish(runs.StatusInterrupted, "daemon shutting down before the run started")
		return nil, false, orchestrator.ErrShuttingDown
	}
	if e.cutOff {
		e.mu.Unlock()
		e.noteDisowned(r) // never started: the takeover after the liveness lease is back ends it
		endRunSpan(x.span, runs.StatusInterrupted, errCutOff.Error())
		return nil, false, errCutOff
	}
	x.prevGate, e.lastGate = e.lastGate, x.gate
	e.execs[r.ID] = x
	e.wg.Add(1)
	e.mu.Unlock()

	go func() {
		defer e.wg.Done()
		x.execute()
		e.mu.Lock()
		delete(e.execs, r.ID)
		e.mu.Unlock()
	}()
	return &r, false, nil
}

// Cancel asks a run to stop. A run still waiting for coolify:phase1 is dropped; a run in a
// phase stops at its next safe point (between services) and compensates as on failure.
// It returns the run as stored when the request was taken, and records who asked (by) and
// why (reason, may be empty): in a run.cancel_requested event and in the run's final reason.
//
// Errors: runs.ErrNotFound; runs.ErrEnded; orchestrator.ErrNotOwner (another instance
// executes it).
func (e *Engine) Cancel(ctx context.Context, id, by, reason string) (*runs.Run, error) {
	e.mu.Lock()
	x := e.execs[id]
	e.mu.Unlock()
	r, err := e.d.Store.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("cancel run %q: %w", id, err)
	}
	if r.Status.Terminal() {
		return &r, fmt.Errorf("cancel run %q: it is %s: %w", id, r.Status, runs.ErrEnded)
	}
	if x == nil {
		return &r, fmt.Errorf("run %q is executed by %q: %w (cancel it there)", id, r.Instance, orchestrator.ErrNotOwner)
	}
	data := map[string]string{runs.DataBy: by}
	if reason != "" {
		data[runs.DataReason] = reason
	}
	x.rec.event(runs.Event{Type: runs.EventRunCancelRequested, Message: (&cancelRequest{by, reason}).Error(), Data: data})
	x.requestStop(&cancelRequest{by: by, reason: reason})
	return &r, nil
}

// Shutdown stops taking runs, asks every run to stop at its next safe point (compensating what
// it changed), and waits for them until ctx ends; then it cancels the work still going and
// waits for the runs to record that they were interrupted and release their locks.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	all := slices.Collect(maps.Values(e.execs))
	e.mu.Unlock()
	for _, x := range all {
		x.requestStop(errShutdown)
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); e.stopWatch(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	for _, x := range all {
		x.abort(errShutdown)
	}
	<-done
	return fmt.Errorf("shutdown: grace period over, %d run(s) aborted: %w", len(all), ctx.Err())
}

// Wait blocks until the run executing under id (if any) has ended. For tests and the
// one-shot CLI.
func (e *Engine) Wait(ctx context.Context, id string) error {
	e.mu.Lock()
	x := e.execs[id]
	e.mu.Unlock()
	if x == nil {
		return nil
	}
	select {
	case <-x.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) coolifyFor(p *config.Pipeline) Coolify {
	k := p.Coolify.URL + "\x00" + p.Coolify.Token.Reveal()
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.coolifys[k]
	if c == nil {
		c = e.d.Coolify(p.Coolify.URL, p.Coolify.Token.Reveal())
		e.coolifys[k] = c
	}
	return c
}

func (e *Engine) flagsmithFor(f config.Flagsmith) (*mobile.Client, error) {
	if e.d.Flagsmith == nil {
		return nil, errors.New("no Flagsmith client configured in this daemon")
	}
	k := f.URL + "\x00" + f.APIKey.Reveal()
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.flags[k]
	if c == nil {
		c = e.d.Flagsmith(f.URL, f.APIKey.Reveal())
		e.flags[k] = c
	}
	return c, nil
}

// sourcesFor returns the secret sources of a pipeline, the built-in "env" one included. Each
// named source is built once and kept, so runs share its client (an Infisical login counts
// against the server's write rate limit).
func (e *Engine) sourcesFor(p *config.Pipeline) (map[string]secrets.Source, error) {
	out := map[string]secrets.Source{config.EnvSource: secrets.NewEnv(e.d.Getenv, e.d.EnvPrefix)}
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, src := range p.Secrets {
		k := p.Name + "\x00" + name
		if s := e.sources[k]; s != nil {
			out[name] = s
			continue
		}
		if e.d.Secrets == nil {
			return nil, fmt.Errorf("secret source %q: this daemon has no secret sources configured", name)
		}
		s, err := e.d.Secrets(name, src)
		if err != nil {
			return nil, fmt.Errorf("secret source %q: %w", name, err)
		}
		e.sources[k], out[name] = s, s
	}
	return out, nil
}

// initialSteps lays out every step of a run as pending, so a run's page shows the whole plan
// from the start.
func initialSteps(p *config.Pipeline) []runs.Step {
	var steps []runs.Step
	add := func(m config.MobileStep) {
		steps = append(steps, runs.Step{Phase: runs.PhaseMobile, Name: m.Name, Status: runs.StepPending, LockKey: m.LockKey()})
	}
	for _, m := range p.Mobile {
		if m.When == config.WhenBeforePhase1 {
			add(m)
		}
	}
	for _, ph := range []runs.Phase{runs.Phase1, runs.Phase2} {
		for _, s := range p.Services {
			step := runs.Step{Phase: ph, Name: s.Name, UUID: s.UUID, Status: runs.StepPending, LockKey: s.LockKey()}
			if ph == runs.Phase2 {
				step.Wave = s.Wave
			}
			steps = append(steps, step)
		}
	}
	for _, m := range p.Mobile {
		if m.When != config.WhenBeforePhase1 {
			add(m)
		}
	}
	return steps
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Log attribute keys (internal/logkey, shared with the API, the lock service and the clients).
const (
	logRunID    = logkey.RunID
	logPipeline = logkey.Pipeline
	logPhase    = logkey.Phase
	logService  = logkey.Service
	logLockKey  = logkey.LockKey
	logFence    = logkey.Fence
	logStatus   = logkey.Status
	logError    = logkey.Error
)
