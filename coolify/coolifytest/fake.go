// Package coolifytest is a fake Coolify server in the style of net/http/httptest: an in-memory
// http.Handler that behaves like the real Coolify 4.3.x API as far as the orchestrator uses it,
// quirks included, with knobs to inject faults and latency and inspectors that show what
// happened. The tests and the demo use it in place of a real instance.
//
// What it models (the real server: docs/outside-systems.md, "Coolify"):
//   - applications, services, env vars with the preview twins Coolify creates for applications,
//     the env PATCH that wipes an omitted value and resets omitted flags, 201 on env PATCH, 409 on
//     duplicate create, 422 on unknown fields and bad image tags;
//   - a deployment queue on a [Clock]: queued → in_progress → finished|failed, one in_progress per
//     application, at most ConcurrentBuilds per server, deploy dedup while the application has a
//     queued or in_progress deployment (the answer carries a deployment uuid that is never
//     stored), the queue limit answering 429 with Retry-After, cancel; the image tag and env vars
//     are read when a deployment starts, not when it is queued; the application's status follows
//     its deployments and its health;
//   - tokens with abilities (read, write, deploy, read:sensitive, root) answering 401/403, and
//     Laravel's throttle: by default 200 requests per minute per user (Coolify's default
//     API_RATE_LIMIT; every token of the fake is its own user) in fixed windows starting at a window's first request, then 429 "Too Many
//     Attempts." with Retry-After until the window ends ([WithRateLimit] scales or turns it off);
//   - optionally, the lag of Coolify's asynchronous status refresh ([WithStatusLag]) and the
//     pre-4.3.7 API cancel that answers 500 and stalls the queue ([WithCancelBug]).
//
// What it leaves out: teams (every token sees every resource) and team roles, databases,
// tag-mode deploys beyond the answer's shape, deployment logs beyond a stub, the instance
// settings routes, and preview (pull request) deployments.
//
// Use [NewServer] in tests (an httptest.Server closed at test end) or [New] for a plain handler
// (the demo mounts it on a real listener). Time-dependent behaviour (deployment progress, rate
// limit windows) follows the [Clock] given with [WithClock]: a [ManualClock] lets a test step it.
// The state advances lazily, on each request and each inspector call, so the fake runs no
// goroutines of its own.
package coolifytest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Abilities a token can hold.
const (
	AbilityRead          = "read"
	AbilityWrite         = "write"
	AbilityDeploy        = "deploy"
	AbilityReadSensitive = "read:sensitive"
	AbilityRoot          = "root"
)

// DefaultToken is registered by [New] with read, write, deploy and read:sensitive.
const DefaultToken = "1|coolifytest-default-token"

// Clock tells the fake what time it is.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told. It is safe for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock standing at start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Outcome is how an application's deployments end.
type Outcome int

// Deployment outcomes ([Fake.SetDeployOutcome]).
const (
	// Succeed: the deployment finishes (unless the app's health check is on and it is unhealthy).
	Succeed Outcome = iota
	// Fail: the deployment ends "failed"; the old container keeps running.
	Fail
	// Hang: the deployment stays in_progress until cancelled (Coolify has no reaper).
	Hang
	// StuckQueued: the deployment never leaves "queued" until cancelled.
	StuckQueued
)

// Timing is how long deployments take on the fake's clock.
type Timing struct {
	// Queued is the least time a deployment stays queued before a worker picks it up.
	Queued time.Duration
	// RunMin and RunMax bound the time in_progress (drawn uniformly per deployment).
	RunMin, RunMax time.Duration
}

// DefaultTiming keeps tests quick: 10 ms queued, 50 ms running.
var DefaultTiming = Timing{Queued: 10 * time.Millisecond, RunMin: 50 * time.Millisecond, RunMax: 50 * time.Millisecond}

// DemoTiming is what a person watching the demo expects: a short queue, 1–3 s of building.
var DemoTiming = Timing{Queued: 300 * time.Millisecond, RunMin: time.Second, RunMax: 3 * time.Second}

// Option configures a [Fake].
type Option func(*Fake)

// WithClock sets the clock deployments and rate-limit windows follow (default: the wall clock).
func WithClock(c Clock) Option { return func(f *Fake) { f.clock = c } }

// WithTiming sets deployment durations (default [DefaultTiming]).
func WithTiming(t Timing) Option { return func(f *Fake) { f.timing = t } }

// WithConcurrentBuilds sets the server's concurrent_builds (default 2, as Coolify's).
func WithConcurrentBuilds(n int) Option { return func(f *Fake) { f.concurrentBuilds = max(n, 1) } }

// WithQueueLimit sets deployment_queue_limit (default 25) and the Retry-After of its 429 (60 s).
func WithQueueLimit(n int, retryAfter time.Duration) Option {
	return func(f *Fake) { f.queueLimit, f.queueRetryAfter = n, retryAfter }
}

// DefaultRateLimit is the throttle a fake enforces unless told otherwise: Coolify's default
// API_RATE_LIMIT of 200 requests per minute per user (here, per token).
const (
	DefaultRateLimit  = 200
	DefaultRateWindow = time.Minute
)

// WithRateLimit limits each token to n requests per window (Laravel's fixed-window throttle)
// instead of [DefaultRateLimit] per [DefaultRateWindow]; n <= 0 turns the limit off. A test
// that needs more calls than the real limit allows scales it here (and paces its clients to
// the same budget) or turns it off, saying so.
func WithRateLimit(n int, window time.Duration) Option {
	return func(f *Fake) { f.rateN, f.rateWindow = max(n, 0), window }
}

// WithoutRateLimit turns the throttle off: WithRateLimit(0, 0).
func WithoutRateLimit() Option { return WithRateLimit(0, 0) }

// WithStatusLag makes an application's reported status lag its real state by d, as Coolify's
// asynchronous status checks do (a deployment can be "finished" while the status still reads
// the state before it), and a service read "exited" for d after its (re)start job ended.
// Default 0: the status is always current. Inspectors see an application's real status.
func WithStatusLag(d time.Duration) Option { return func(f *Fake) { f.statusLag = d } }

// WithCancelBug reproduces Coolify before 4.3.7 (issue #11327): an API cancel marks the
// deployment cancelled but answers 500 "Failed to cancel deployment: ..." and stalls the queue,
// so no queued deployment starts again.
func WithCancelBug() Option { return func(f *Fake) { f.cancelBug = true } }

// WithSeed makes the drawn deployment durations reproducible.
func WithSeed(seed uint64) Option {
	return func(f *Fake) { f.rng = mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
}

// Application is an application as seeded and inspected. Fields marked (inspect) are ignored
// by [Fake.AddApplication].
type Application struct {
	ID        int64 // (inspect) assigned
	UUID      string
	Name      string
	BuildPack string // default "dockerimage"
	ImageName string
	ImageTag  string
	// GitCommitSHA is the commit deployments are made of (default "HEAD").
	GitCommitSHA       string
	FQDN               string
	HealthCheckEnabled bool
	HealthCheckPath    string // default "/"
	Tags               []string
	// NotRunning seeds an application whose containers are not running (status "exited")
	// until a deployment finishes.
	NotRunning bool
	// Status is Coolify's "state[:health]" string. (inspect)
	Status string
	// DeployedImageTag is the tag the last finished deployment ran with (a seeded running
	// application starts with its ImageTag). (inspect)
	DeployedImageTag string
	// DeployedEnv is the env (key → value, non-preview rows) the last finished deployment read
	// when it started (a seeded running application starts with its seeded env). (inspect)
	DeployedEnv map[string]string
	// Extra holds other PATCHed fields, echoed back on GET. (inspect)
	Extra map[string]any
}

// Service is a service (docker-compose stack) as seeded and inspected.
type Service struct {
	ID          int64 // (inspect)
	UUID        string
	Name        string
	Description string
	ServiceType string
	NotRunning  bool
	Status      string // (inspect)
	// Restarts counts deploys and restarts. (inspect)
	Restarts int
	// JobEnd is when the job of the last deploy or restart ends (or ended): the containers
	// run from then on. (inspect)
	JobEnd time.Time
}

// Env is an env var row as seeded and inspected. A nil Value is a wiped value (what the real
// PATCH stores when the value is omitted); nil IsMultiline/IsShownOnce are the nulls it stores.
type Env struct {
	UUID        string // (inspect) assigned
	Key         string
	Value       *string
	IsPreview   bool
	IsBuildtime bool
	IsRuntime   bool
	IsLiteral   bool
	IsMultiline *bool
	IsShownOnce *bool
	Comment     *string
}

// Str and Bool make pointers for seeding.
func Str(s string) *string { return &s }

// Bool makes a *bool.
func Bool(b bool) *bool { return &b }

// Deployment is a deployment row as inspected.
type Deployment struct {
	ID          int64
	UUID        string
	AppUUID     string
	AppName     string
	Status      string
	Commit      string
	Force       bool
	RestartOnly bool
	// ImageTag and Env are what the deployment read when it started (empty while queued).
	ImageTag string
	Env      map[string]string
	// RunID and Fence are the X-Orchestrator-* headers of the request that queued it.
	RunID, Fence string
	// ConfigBy is the X-Orchestrator-Run of the last change to the application's settings or
	// env before the deployment started ("" when no run had changed them).
	ConfigBy   string
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// Request is one request the fake received, as the ground truth of what happened to "Coolify".
type Request struct {
	Seq      uint64 // order of arrival
	Method   string
	Path     string
	RawQuery string
	// Route is the matched route, e.g. "POST /deploy" or "PATCH /applications/{uuid}/envs"
	// (paths below /api/v1); "" when nothing matched.
	Route string
	// Header holds the headers of interest: User-Agent, Content-Type, X-Orchestrator-Run,
	// X-Orchestrator-Fence, Idempotency-Key. The Authorization header is never kept.
	Header http.Header
	RunID  string // X-Orchestrator-Run
	Fence  string // X-Orchestrator-Fence
	// TokenID is the id part of the bearer token ("1" of "1|secret"), "" when absent.
	TokenID string
	// Body is the request body (it may hold env values: the log is for tests).
	Body []byte
	// Start is when the request arrived, End when its response was written (wall clock).
	Start, End time.Time
	// Status is the status sent; 0 when the connection was dropped or the client went away.
	Status int
	// Fault describes an injected fault that shaped the answer ("" for none).
	Fault string
	// DeploymentUUID is the deployment uuid a deploy/restart answered with (stored or not).
	DeploymentUUID string
}

// Fault is an injected failure, see [Fake.FailNext].
type Fault struct {
	// Method and Route select the requests ("" matches any); Route is a template below /api/v1
	// such as "/deploy" or "/applications/{uuid}/envs/bulk".
	Method, Route string
	// UUID, when set, narrows the match to requests about that resource: the {uuid} of the
	// path, or the uuid parameter of POST /deploy.
	UUID string
	// Status is the answer's status, or [DropConnection] to reset the connection instead.
	Status int
	// Message is the answer's "message" (default: the status text).
	Message string
	// RetryAfter, when set, is sent as Retry-After (seconds, rounded up).
	RetryAfter time.Duration
	// AfterEffect applies the request first and then answers with the fault: the change is
	// made but the caller does not learn it (a lost response).
	AfterEffect bool
}

// DropConnection as a [Fault] Status resets the connection without an answer.
const DropConnection = -1

type fault struct {
	Fault
	left int
}

type latency struct {
	method, route string
	min, max      time.Duration
}

type token struct {
	abilities map[string]bool
	id        string
	window    time.Time
	count     int
}

type app struct {
	Application
	createdAt, updatedAt time.Time
	unhealthy            bool
	outcome              Outcome
	next                 []Outcome  // outcomes of the next deployments, one each (SetDeployOutcomes)
	history              []statusAt // real status changes, for WithStatusLag
}

type statusAt struct {
	at     time.Time
	status string
}

type service struct {
	Service
	createdAt, updatedAt time.Time
	unhealthy            bool
	// A (re)start queued at the last start or restart: the status before it (read until its
	// job runs at jobAt), and the end of the job.
	before               string
	jobAt, startingUntil time.Time
}

type env struct {
	Env
	id                   int64
	resource             string // app or service uuid
	isApp                bool
	createdAt, updatedAt time.Time
}

type deployment struct {
	Deployment
	appID     int64
	pr        int
	readyAt   time.Time // earliest start
	runFor    time.Duration
	outcome   Outcome
	updatedAt time.Time
	isAPI     bool
}

// Fake is the in-memory Coolify. Create it with [New]; it is an http.Handler serving
// /api/v1/... and /api/health, plus GET /_fake/apps/{uuid}/health, which is not Coolify but a
// stand-in for the application's own health endpoint (200 while it runs healthy, else 503), so
// an HTTP health check can point at the fake. All methods are safe for concurrent use.
type Fake struct {
	clock            Clock
	timing           Timing
	concurrentBuilds int
	queueLimit       int
	queueRetryAfter  time.Duration
	rateN            int
	rateWindow       time.Duration
	throttled        int // requests answered 429 by the throttle
	statusLag        time.Duration
	cancelBug        bool

	mux *http.ServeMux

	mu          sync.Mutex
	rng         *mrand.Rand
	nextID      int64
	apps        map[string]*app
	services    map[string]*service
	envs        []*env // creation order (id order)
	deployments []*deployment
	tokens      map[string]*token
	faults      []*fault
	latencies   []latency
	cursor      time.Time // time of the last processed queue event
	apiDown     bool
	stalled     bool // the queue no longer starts deployments (WithCancelBug)
	hist        history

	logMu    sync.Mutex
	seq      uint64
	reqs     []Request
	inFlight int // requests received and not yet answered
}

// New returns a fake with no resources and [DefaultToken].
func New(opts ...Option) *Fake {
	f := &Fake{
		clock:            realClock{},
		timing:           DefaultTiming,
		concurrentBuilds: 2,
		queueLimit:       25,
		queueRetryAfter:  60 * time.Second,
		rateN:            DefaultRateLimit,
		rateWindow:       DefaultRateWindow,
		rng:              mrand.New(mrand.NewPCG(1, 2)),
		apps:             map[string]*app{},
		services:         map[string]*service{},
		tokens:           map[string]*token{},
	}
	for _, o := range opts {
		o(f)
	}
	f.AddToken(DefaultToken, AbilityRead, AbilityWrite, AbilityDeploy, AbilityReadSensitive)
	f.routes()
	return f
}

// AddToken registers a bearer token with its abilities (replacing an existing one).
func (f *Fake) AddToken(tok string, abilities ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &token{abilities: map[string]bool{}}
	t.id, _, _ = strings.Cut(tok, "|")
	for _, a := range abilities {
		t.abilities[a] = true
	}
	f.tokens[tok] = t
}

// RemoveToken revokes a token: it answers 401 from now on.
func (f *Fake) RemoveToken(tok string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tokens, tok)
}

// AddApplication seeds an application and returns it as stored. A missing UUID is generated.
func (f *Fake) AddApplication(a Application) Application {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	f.nextID++
	a.ID = f.nextID
	if a.UUID == "" {
		a.UUID = newUUID()
	}
	if a.Name == "" {
		a.Name = a.UUID
	}
	if a.BuildPack == "" {
		a.BuildPack = "dockerimage"
	}
	if a.GitCommitSHA == "" {
		a.GitCommitSHA = "HEAD"
	}
	if a.HealthCheckPath == "" {
		a.HealthCheckPath = "/"
	}
	a.Status, a.DeployedImageTag, a.DeployedEnv = "", "", nil
	if !a.NotRunning {
		a.DeployedImageTag = a.ImageTag
	}
	a.Tags = slices.Clone(a.Tags)
	a.Extra = map[string]any{}
	x := &app{Application: a, createdAt: now, updatedAt: now}
	f.apps[a.UUID] = x
	f.noteStatusLocked(x, time.Time{}) // the seeded state is visible at once, lag or not
	return f.appView(x)
}

// AddService seeds a service and returns it as stored. A missing UUID is generated.
func (f *Fake) AddService(s Service) Service {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	f.nextID++
	s.ID = f.nextID
	if s.UUID == "" {
		s.UUID = newUUID()
	}
	if s.Name == "" {
		s.Name = s.UUID
	}
	s.Status, s.Restarts, s.JobEnd = "", 0, time.Time{}
	x := &service{Service: s, createdAt: now, updatedAt: now}
	f.services[s.UUID] = x
	return f.serviceView(x)
}

// SetEnv seeds (creates or replaces, by key and scope) an env var of an application or service,
// the way the UI would: a new non-preview application variable gets its preview twin. It panics
// if the resource does not exist (a seeding mistake).
func (f *Fake) SetEnv(resourceUUID string, e Env) Env {
	f.mu.Lock()
	defer f.mu.Unlock()
	isApp := f.apps[resourceUUID] != nil
	if !isApp && f.services[resourceUUID] == nil {
		panic(fmt.Sprintf("coolifytest: SetEnv: no application or service %q", resourceUUID))
	}
	e = cloneEnv(e) // the caller keeps its pointers; the fake keeps its own
	if !isApp {
		e.IsPreview = false
	}
	defer f.seedRunningEnvLocked(resourceUUID)
	if cur := f.findEnv(resourceUUID, e.Key, e.IsPreview); cur != nil {
		e.UUID = cur.UUID
		cur.Env = e
		cur.updatedAt = f.clock.Now()
		return cloneEnv(cur.Env)
	}
	return cloneEnv(f.createEnvLocked(resourceUUID, isApp, e).Env)
}

// SetDeployOutcome sets how the application's deployments queued from now on end.
func (f *Fake) SetDeployOutcome(appUUID string, o Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a := f.apps[appUUID]; a != nil {
		a.outcome, a.next = o, nil
	}
}

// SetDeployOutcomes sets how the application's next deployments end, one outcome each in
// order; the deployments after them end as the last one (a new version's deployment fails,
// the redeploy of the previous one succeeds: Fail, Succeed).
func (f *Fake) SetDeployOutcomes(appUUID string, outcomes ...Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a := f.apps[appUUID]; a != nil && len(outcomes) > 0 {
		a.outcome, a.next = outcomes[len(outcomes)-1], outcomes[:len(outcomes)-1]
	}
}

// SetAppHealthy turns an application's health on or off. Unhealthy, its status reads
// "running:unhealthy", and its deployments fail when its health check is enabled (Coolify's
// rolling update keeps the old container).
func (f *Fake) SetAppHealthy(appUUID string, healthy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a := f.apps[appUUID]; a != nil {
		a.unhealthy = !healthy
		f.noteStatusLocked(a, f.clock.Now())
	}
}

// SetServiceHealthy turns a service's health on or off (status "running:unhealthy").
func (f *Fake) SetServiceHealthy(serviceUUID string, healthy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.services[serviceUUID]; s != nil {
		s.unhealthy = !healthy
	}
}

// SetAPIEnabled turns the instance's API on or off; off, every /api/v1 route but health answers
// 403 "API is disabled." to an authenticated request (401 to any other, as authentication
// comes first).
func (f *Fake) SetAPIEnabled(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.apiDown = !on
}

// FailNext makes the next n requests matching fault.Method and fault.Route fail as described.
// Faults queue up: the oldest matching one with calls left is used.
func (f *Fake) FailNext(n int, fl Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, &fault{Fault: fl, left: n})
}

// SetLatency delays every request by a duration drawn from [lo, hi] before it is handled
// (wall clock; a client that gives up during the delay is recorded with status 0).
func (f *Fake) SetLatency(lo, hi time.Duration) { f.SetRouteLatency("", "", lo, hi) }

// SetRouteLatency delays requests matching method and route ("" matches any; route as in
// [Fault]) by a duration drawn from [lo, hi]; the most recently set matching rule wins.
func (f *Fake) SetRouteLatency(method, route string, lo, hi time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latencies = append(f.latencies, latency{method: method, route: route, min: lo, max: hi})
}

// RateLimit returns the throttle: n requests per window per token (n == 0: none).
func (f *Fake) RateLimit() (n int, window time.Duration) { return f.rateN, f.rateWindow }

// Throttled returns how many requests the throttle has answered 429 so far (not counting
// injected faults or the deployment queue's 429).
func (f *Fake) Throttled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.throttled
}

// Requests returns every request received so far, in order of arrival (completed ones only).
func (f *Fake) Requests() []Request {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	out := slices.Clone(f.reqs)
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// InFlight returns how many requests the fake has received and not yet answered: a test
// that must act while a request sits in the fake (in its latency, say) waits for it here,
// rather than on the client's side, where a request can be "written" and still be in a
// buffer.
func (f *Fake) InFlight() int {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	return f.inFlight
}

// RequestsTo returns the completed requests whose Route is route (e.g. "POST /deploy").
func (f *Fake) RequestsTo(route string) []Request {
	var out []Request
	for _, r := range f.Requests() {
		if r.Route == route {
			out = append(out, r)
		}
	}
	return out
}

// ResetRequests forgets the requests recorded so far.
func (f *Fake) ResetRequests() {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	f.reqs = nil
}

// App returns an application's current state.
func (f *Fake) App(uuid string) (Application, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advanceLocked()
	a := f.apps[uuid]
	if a == nil {
		return Application{}, false
	}
	return f.appView(a), true
}

// ServiceState returns a service's current state.
func (f *Fake) ServiceState(uuid string) (Service, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advanceLocked()
	s := f.services[uuid]
	if s == nil {
		return Service{}, false
	}
	return f.serviceView(s), true
}

// Envs returns every env row of an application or service (preview twins included), by id.
func (f *Fake) Envs(resourceUUID string) []Env {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Env
	for _, e := range f.envs {
		if e.resource == resourceUUID {
			out = append(out, cloneEnv(e.Env))
		}
	}
	return out
}

// EnvValue returns the value of the application's or service's variable key in the given scope
// and whether the row exists (a wiped value reads "" with ok true).
func (f *Fake) EnvValue(resourceUUID, key string, preview bool) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.findEnv(resourceUUID, key, preview)
	if e == nil {
		return "", false
	}
	if e.Value == nil {
		return "", true
	}
	return *e.Value, true
}

// Deployments returns the application's deployments, oldest first ("" for all).
func (f *Fake) Deployments(appUUID string) []Deployment {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advanceLocked()
	var out []Deployment
	for _, d := range f.deployments {
		if appUUID == "" || d.AppUUID == appUUID {
			out = append(out, cloneDeployment(d.Deployment))
		}
	}
	return out
}

// Deployment returns one deployment by uuid.
func (f *Fake) Deployment(uuid string) (Deployment, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advanceLocked()
	if d := f.findDeployment(uuid); d != nil {
		return cloneDeployment(d.Deployment), true
	}
	return Deployment{}, false
}

func cloneDeployment(d Deployment) Deployment {
	if d.Env != nil {
		m := make(map[string]string, len(d.Env))
		for k, v := range d.Env {
			m[k] = v
		}
		d.Env = m
	}
	return d
}

func cloneEnv(e Env) Env {
	if e.Value != nil {
		e.Value = Str(*e.Value)
	}
	if e.IsMultiline != nil {
		e.IsMultiline = Bool(*e.IsMultiline)
	}
	if e.IsShownOnce != nil {
		e.IsShownOnce = Bool(*e.IsShownOnce)
	}
	if e.Comment != nil {
		e.Comment = Str(*e.Comment)
	}
	return e
}

func (f *Fake) appView(a *app) Application {
	v := a.Application
	v.Status = f.realStatus(a)
	v.Tags = slices.Clone(a.Tags)
	v.Extra = make(map[string]any, len(a.Extra))
	for k, x := range a.Extra {
		v.Extra[k] = x
	}
	if a.DeployedEnv != nil {
		v.DeployedEnv = make(map[string]string, len(a.DeployedEnv))
		for k, x := range a.DeployedEnv {
			v.DeployedEnv[k] = x
		}
	}
	return v
}

func (f *Fake) serviceView(s *service) Service {
	v := s.Service
	v.Status, v.JobEnd = f.serviceStatus(s), s.startingUntil
	return v
}

// appStatus is the status the API reports: the real one, or with WithStatusLag the one it
// had statusLag ago.
func (f *Fake) appStatus(a *app) string {
	if f.statusLag <= 0 || len(a.history) == 0 {
		return f.realStatus(a)
	}
	cutoff := f.clock.Now().Add(-f.statusLag)
	status := a.history[0].status
	for _, h := range a.history[1:] {
		if h.at.After(cutoff) {
			break
		}
		status = h.status
	}
	return status
}

// noteStatusLocked records the application's real status as of at, if it changed.
func (f *Fake) noteStatusLocked(a *app, at time.Time) {
	s := f.realStatus(a)
	if n := len(a.history); n == 0 || a.history[n-1].status != s {
		a.history = append(a.history, statusAt{at: at, status: s})
	}
}

// realStatus is Coolify's status string for the application's current state.
func (f *Fake) realStatus(a *app) string {
	if a.NotRunning {
		for _, d := range f.deployments {
			if d.AppUUID == a.UUID && d.Status == "in_progress" {
				return "starting:unknown"
			}
		}
		return "exited"
	}
	switch {
	case a.unhealthy:
		return "running:unhealthy"
	case a.HealthCheckEnabled:
		return "running:healthy"
	}
	return "running:unknown"
}

// serviceStatus is a service's status as Coolify computes it: the status stored before a
// queued (re)start until its job runs; "starting:unhealthy" while the job runs
// (Service::isStarting); then "exited", as StopService left its containers, until the status
// refresh (WithStatusLag) sees them run.
func (f *Fake) serviceStatus(s *service) string {
	now := f.clock.Now()
	switch {
	case now.Before(s.jobAt):
		return s.before
	case now.Before(s.startingUntil):
		return "starting:unhealthy"
	case s.NotRunning, now.Before(s.startingUntil.Add(f.statusLag)):
		return "exited"
	case s.unhealthy:
		return "running:unhealthy"
	}
	return "running:healthy"
}

func (f *Fake) findEnv(resource, key string, preview bool) *env {
	for _, e := range f.envs {
		if e.resource == resource && e.Key == key && e.IsPreview == preview {
			return e
		}
	}
	return nil
}

func (f *Fake) findDeployment(uuid string) *deployment {
	for _, d := range f.deployments {
		if d.UUID == uuid {
			return d
		}
	}
	return nil
}

// createEnvLocked stores a new row, and for a non-preview application row its preview twin.
func (f *Fake) createEnvLocked(resource string, isApp bool, e Env) *env {
	now := f.clock.Now()
	f.nextID++
	e.UUID = newUUID()
	row := &env{Env: e, id: f.nextID, resource: resource, isApp: isApp, createdAt: now, updatedAt: now}
	f.envs = append(f.envs, row)
	if isApp && !e.IsPreview && f.findEnv(resource, e.Key, true) == nil {
		twin := cloneEnv(e)
		twin.IsPreview = true
		f.nextID++
		twin.UUID = newUUID()
		f.envs = append(f.envs, &env{Env: twin, id: f.nextID, resource: resource, isApp: true, createdAt: now, updatedAt: now})
	}
	return row
}

// newUUID makes an id shaped like Coolify's (cuid2-like, 24 lowercase alphanumerics).
func newUUID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [24]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("coolifytest: encode: %v", err))
	}
	return b
}
