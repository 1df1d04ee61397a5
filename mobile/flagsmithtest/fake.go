// Package flagsmithtest is a fake Flagsmith Admin API for tests and the demo, in the style of
// net/http/httptest: an http.Handler with in-memory state (projects, features, environments
// with feature versioning v1 or v2, feature states and versions), seeders and inspectors,
// and knobs for latency, failures (before or after a write took effect), throttling (429 with
// Retry-After) and a writer that changes a value behind the client's back right after the
// client read it.
//
// It follows the real server where package mobile depends on it (see docs/outside-systems.md,
// "Flagsmith"): trailing-slash paths, "Authorization: Api-Key <key>", DRF pages and error
// bodies, the type a legacy write infers from the JSON type of feature_state_value, the 400
// that v2 environments answer to legacy writes, versions that clone the live version and
// publish immediately, a version's previous_version_uuid and the feature states of a version.
// What it leaves out: segment and identity overrides, change-request workflows, multivariate
// values, and every route the orchestrator does not call (they answer 404).
//
// Choices the server's source does not settle, made here and easy to revisit: a refused API
// key answers 401 (docs/outside-systems.md, "Flagsmith authentication and paths": the source
// gives only the body); the versions routes of a v1 environment answer 400 "Environment must
// use v2 feature versioning."; a legacy write of JSON null clears the value.
package flagsmithtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
)

// DefaultAPIKey is the organisation API key a Fake accepts unless WithAPIKey says otherwise.
const DefaultAPIKey = "fake-org.api-key-for-tests"

// LegacyWriteDetail is the message v2 environments answer a direct feature state write with
// (HTTP 400), from Flagsmith PR #7488.
const LegacyWriteDetail = "This environment uses v2 feature versioning. Use the environment feature version endpoint instead."

// Option configures a Fake.
type Option func(*Fake)

// WithAPIKey sets the organisation API key the fake accepts.
func WithAPIKey(key string) Option { return func(f *Fake) { f.apiKey = key } }

// WithLatency delays every answer by d (the demo uses a realistic value).
func WithLatency(d time.Duration) Option { return func(f *Fake) { f.latency = d } }

// WithClock sets the clock for timestamps and live_from (default time.Now). Timestamps the
// fake hands out always grow, even when the clock stands still.
func WithClock(now func() time.Time) Option { return func(f *Fake) { f.clock = now } }

// WithPageSizeLimit caps page_size on list routes (default 999, Flagsmith's limit), so a
// test can make a client follow "next" links without seeding a thousand features.
func WithPageSizeLimit(n int) Option { return func(f *Fake) { f.maxPage = max(1, n) } }

// WithMiddleware wraps the fake's handler, e.g. to validate every request and response
// against the OpenAPI document. NewServer serves the wrapped handler.
func WithMiddleware(mw func(http.Handler) http.Handler) Option {
	return func(f *Fake) { f.middleware = append(f.middleware, mw) }
}

// Fake is the fake Flagsmith. It is an http.Handler and safe for concurrent use.
type Fake struct {
	apiKey     string
	clock      func() time.Time
	middleware []func(http.Handler) http.Handler
	handler    http.Handler
	maxPage    int

	mu       sync.Mutex
	latency  time.Duration
	last     time.Time
	nextID   int64
	projects map[int64]bool
	features map[int64]*feature
	envs     map[string]*environment // by API key
	states   map[int64]*state        // every state ever made, by id
	current  map[pair]*state         // v1: the environment default
	versions map[pair][]*version     // v2: every version, oldest first
	requests []Request
	failN    int
	failCode int
	appliedN int // writes to apply, then answer appliedC
	appliedC int
	throttle int
	retryAft time.Duration
	meddlers []*meddler
}

type pair struct{ env, feature int64 }

type feature struct {
	id      int64
	name    string
	project int64
	uuid    string
	created time.Time
}

type environment struct {
	id        int64
	apiKey    string
	name      string
	project   int64
	v2        bool
	approvals *int
	uuid      string
}

type state struct {
	id       int64
	feature  int64
	env      int64
	enabled  bool
	value    stored
	uuid     string
	created  time.Time
	updated  time.Time
	version  string // v2: uuid of the version holding the state
	liveFrom *time.Time
}

// stored is Flagsmith's FeatureStateValue row: a type and one typed column.
type stored struct {
	typ  string // "unicode", "int", "bool"
	str  *string
	num  *int64
	flag *bool
}

type version struct {
	uuid      string
	env       int64
	feature   int64
	created   time.Time
	updated   time.Time
	published bool
	liveFrom  *time.Time
	desc      *string
	state     *state
}

type meddler struct {
	env     int64
	feature int64
	left    int
	fn      func(current any) any
	when    moment
}

// moment is when a meddler fires.
type moment int

const (
	onRead  moment = iota // after a featurestates GET returned the state
	onWrite               // before a write of the state (v1 PUT/PATCH, v2 version POST) is handled
)

func (m moment) knob() string {
	if m == onWrite {
		return "ChangeBeforeWrite"
	}
	return "ChangeAfterRead"
}

// Request is one call the fake received, as the request log keeps it.
type Request struct {
	Method string
	Path   string
	Query  string
	Body   []byte
	Status int
	// At is when the request arrived (wall clock).
	At time.Time
	// UserAgent, Run and Fence are the traceability headers (Run and Fence empty if absent).
	UserAgent string
	Run       string
	Fence     string
	// Authorized tells whether the Authorization header carried the fake's API key; the
	// key itself is not kept.
	Authorized bool
}

// New returns a fake with no environments. Add some with AddEnvironment and SetValue.
func New(opts ...Option) *Fake {
	f := &Fake{
		apiKey:   DefaultAPIKey,
		clock:    time.Now,
		nextID:   100,
		maxPage:  999,
		projects: map[int64]bool{},
		features: map[int64]*feature{},
		envs:     map[string]*environment{},
		states:   map[int64]*state{},
		current:  map[pair]*state{},
		versions: map[pair][]*version{},
	}
	for _, o := range opts {
		o(f)
	}
	var h http.Handler = f.routes()
	for i := len(f.middleware) - 1; i >= 0; i-- {
		h = f.middleware[i](h)
	}
	f.handler = h
	return f
}

// Server is a Fake served on a loopback port.
type Server struct {
	*Fake
	// URL is the base URL to give mobile.New; APIKey the key it accepts.
	URL    string
	APIKey string
	srv    *httptest.Server
}

// NewServer starts a fake on a loopback port and closes it when the test ends.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	f := New(opts...)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return &Server{Fake: f, URL: srv.URL, APIKey: f.apiKey, srv: srv}
}

// Close stops the server (NewServer's cleanup does it too).
func (s *Server) Close() { s.srv.Close() }

// ServeHTTP serves the Admin API routes, after the fault knobs had their say.
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.handler.ServeHTTP(w, r) }

// --- seeders and inspectors ---

// Environment describes an environment to add.
type Environment struct {
	// APIKey is the environment key used in Admin API paths (required, unique).
	APIKey string
	Name   string // default APIKey
	// Project is the project id (default 1); projects are made on first use.
	Project int64
	// V2 turns on feature versioning v2.
	V2 bool
	// MinimumChangeRequestApprovals turns change requests on when not nil.
	MinimumChangeRequestApprovals *int
}

// AddEnvironment adds an environment and a default state (no value, disabled) for every
// feature of its project. It returns the environment's integer id.
// Errors: an empty or duplicate API key.
func (f *Fake) AddEnvironment(e Environment) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.APIKey == "" {
		return 0, errors.New("flagsmithtest: environment needs an API key")
	}
	if _, dup := f.envs[e.APIKey]; dup {
		return 0, fmt.Errorf("flagsmithtest: environment %q exists", e.APIKey)
	}
	if e.Name == "" {
		e.Name = e.APIKey
	}
	if e.Project == 0 {
		e.Project = 1
	}
	f.projects[e.Project] = true
	env := &environment{id: f.id(), apiKey: e.APIKey, name: e.Name, project: e.Project, v2: e.V2,
		approvals: e.MinimumChangeRequestApprovals, uuid: newUUID()}
	f.envs[e.APIKey] = env
	for _, ft := range f.features {
		if ft.project == env.project {
			f.initState(env, ft)
		}
	}
	return env.id, nil
}

// AddFeature adds a feature to a project and a default state (no value, disabled) in each
// of the project's environments; on v2 environments as a first published version. It
// returns the feature id. Errors: a feature with that name (case-insensitively) exists.
func (f *Fake) AddFeature(project int64, name string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ft, err := f.addFeature(project, name)
	if err != nil {
		return 0, err
	}
	return ft.id, nil
}

func (f *Fake) addFeature(project int64, name string) (*feature, error) {
	for _, ft := range f.features {
		if ft.project == project && strings.EqualFold(ft.name, name) {
			return nil, fmt.Errorf("flagsmithtest: feature %q exists in project %d", name, project)
		}
	}
	f.projects[project] = true
	ft := &feature{id: f.id(), name: name, project: project, uuid: newUUID(), created: f.now()}
	f.features[ft.id] = ft
	for _, env := range f.envs {
		if env.project == project {
			f.initState(env, ft)
		}
	}
	return ft, nil
}

func (f *Fake) initState(env *environment, ft *feature) {
	now := f.now()
	st := &state{id: f.id(), feature: ft.id, env: env.id, uuid: newUUID(), created: now, updated: now,
		value: stored{typ: "unicode"}}
	f.states[st.id] = st
	k := pair{env.id, ft.id}
	if !env.v2 {
		f.current[k] = st
		return
	}
	v := &version{uuid: newUUID(), env: env.id, feature: ft.id, created: now, updated: now,
		published: true, liveFrom: &now, state: st}
	st.version, st.liveFrom = v.uuid, &now
	f.versions[k] = append(f.versions[k], v)
}

// SetValue changes the environment default of the named feature as another writer would:
// on v1 it updates the state (and its updated_at), on v2 it publishes a new version. The
// feature is added to the environment's project when missing. value is a string, an
// integer, a bool or nil; its Go type decides the stored type, as the server's legacy write
// infers it from the JSON type. Errors: unknown environment, unsupported value type.
func (f *Fake) SetValue(envKey, featureName string, value any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	env, ok := f.envs[envKey]
	if !ok {
		return fmt.Errorf("flagsmithtest: no environment %q", envKey)
	}
	sv, err := storedOf(value)
	if err != nil {
		return err
	}
	ft := f.featureByName(env.project, featureName)
	if ft == nil {
		if ft, err = f.addFeature(env.project, featureName); err != nil {
			return err
		}
	}
	f.write(env, ft, sv, nil)
	return nil
}

// write sets the environment default as a direct write (v1) or a published version (v2).
func (f *Fake) write(env *environment, ft *feature, sv stored, enabled *bool) *state {
	k := pair{env.id, ft.id}
	if !env.v2 {
		st := f.current[k]
		st.value, st.updated = sv, f.now()
		if enabled != nil {
			st.enabled = *enabled
		}
		return st
	}
	live := f.liveState(env.id, ft.id)
	now := f.now()
	st := &state{id: f.id(), feature: ft.id, env: env.id, uuid: newUUID(), created: now, updated: now, value: sv}
	if live != nil {
		st.enabled = live.enabled
	}
	if enabled != nil {
		st.enabled = *enabled
	}
	v := &version{uuid: newUUID(), env: env.id, feature: ft.id, created: now, updated: now,
		published: true, liveFrom: &now, state: st}
	st.version, st.liveFrom = v.uuid, &now
	f.states[st.id] = st
	f.versions[k] = append(f.versions[k], v)
	return st
}

// EnableV2 turns on feature versioning v2 for the environment, as
// POST …/enable-v2-versioning/ does once its background task ran: every feature's current
// state becomes the state of a first, live version. Errors: unknown environment, or v2 is
// already on.
func (f *Fake) EnableV2(envKey string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	env, ok := f.envs[envKey]
	if !ok {
		return fmt.Errorf("flagsmithtest: no environment %q", envKey)
	}
	if env.v2 {
		return fmt.Errorf("flagsmithtest: environment %q already uses v2 versioning", envKey)
	}
	env.v2 = true
	for k, st := range f.current {
		if k.env != env.id {
			continue
		}
		now := f.now()
		v := &version{uuid: newUUID(), env: env.id, feature: k.feature, created: now, updated: now,
			published: true, liveFrom: &now, state: st}
		st.version, st.liveFrom = v.uuid, &now
		f.versions[k] = append(f.versions[k], v)
		delete(f.current, k)
	}
	return nil
}

// Value returns the current environment default value of the named feature: a string, an
// int64, a bool or nil. Errors: unknown environment or feature.
func (f *Fake) Value(envKey, featureName string) (any, error) {
	st, err := f.State(envKey, featureName)
	return st.Value, err
}

// StateInfo is an inspector's view of an environment default.
type StateInfo struct {
	ID        int64
	Feature   int64
	Enabled   bool
	Value     any    // string, int64, bool or nil
	Type      string // "unicode", "int" or "bool", as Flagsmith stores it
	UpdatedAt time.Time
	Version   string // v2: uuid of the live version
}

// State returns the current environment default of the named feature.
// Errors: unknown environment or feature.
func (f *Fake) State(envKey, featureName string) (StateInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	env, ft, err := f.lookup(envKey, featureName)
	if err != nil {
		return StateInfo{}, err
	}
	st := f.currentState(env, ft.id)
	if st == nil {
		return StateInfo{}, fmt.Errorf("flagsmithtest: no live state of %q in %q", featureName, envKey)
	}
	return StateInfo{ID: st.id, Feature: ft.id, Enabled: st.enabled, Value: st.value.goValue(),
		Type: st.value.typ, UpdatedAt: st.updated, Version: st.version}, nil
}

// VersionInfo is an inspector's view of a v2 version.
type VersionInfo struct {
	UUID      string
	Published bool
	Live      bool
	Value     any
}

// Versions returns every version of the named feature in a v2 environment, oldest first.
// Errors: unknown environment or feature.
func (f *Fake) Versions(envKey, featureName string) ([]VersionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	env, ft, err := f.lookup(envKey, featureName)
	if err != nil {
		return nil, err
	}
	var out []VersionInfo
	now := f.horizon()
	for _, v := range f.versions[pair{env.id, ft.id}] {
		out = append(out, VersionInfo{UUID: v.uuid, Published: v.published, Live: v.isLive(now), Value: v.state.value.goValue()})
	}
	return out, nil
}

// Requests returns the request log, oldest first.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// Writes returns the logged requests that were not GETs.
func (f *Fake) Writes() []Request {
	var out []Request
	for _, r := range f.Requests() {
		if r.Method != http.MethodGet {
			out = append(out, r)
		}
	}
	return out
}

// ResetRequests empties the request log.
func (f *Fake) ResetRequests() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = nil
}

// --- fault knobs ---

// SetLatency delays every following answer by d.
func (f *Fake) SetLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

// FailNext makes the next n requests fail with status (a 5xx, as a proxy or a crashing
// server would, with a plain-text body).
func (f *Fake) FailNext(n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN, f.failCode = n, status
}

// FailAfterApplyNext makes the next n writes (requests other than GET) take effect and then
// answer status instead of their result, with a plain-text body: what a client sees when a
// proxy gives up (502, 504) or the connection drops after the server committed. Those writes
// do not consume FailNext or ThrottleNext, so a test can also fail the reads that follow.
func (f *Fake) FailAfterApplyNext(n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.appliedN, f.appliedC = n, status
}

// ThrottleNext makes the next n requests answer 429 with Retry-After (whole seconds,
// rounded up) and DRF's throttling body.
func (f *Fake) ThrottleNext(n int, retryAfter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle, f.retryAft = n, retryAfter
}

// ChangeAfterRead makes another writer change the named feature right after each of the
// next n reads of its environment default (a featurestates GET that returns it): fn gets
// the current value (string, int64, bool or nil) and returns the new one, which is written
// as SetValue would. It simulates a change that lands between a client's read and its
// write. Errors: unknown environment or feature.
func (f *Fake) ChangeAfterRead(envKey, featureName string, n int, fn func(current any) any) error {
	return f.meddle(envKey, featureName, n, fn, onRead)
}

// ChangeBeforeWrite makes another writer change the named feature right before each of the
// next n writes of its environment default are handled (a PUT or PATCH of the state on v1, a
// POST of a version on v2): fn gets the current value and returns the new one, which is
// written as SetValue would (v1: the state is updated; v2: a version is published). The
// client's write then lands on a change it never read: what happens when another writer's
// request arrives between the client's last read and its write, a window no re-read can
// close. On v2 the client's version clones the outside version (its previous_version_uuid
// names it) and replaces its value. Several knobs armed for the same write all fire, in the
// order they were armed, so a test can publish a chain of outside versions. Errors: unknown
// environment or feature.
func (f *Fake) ChangeBeforeWrite(envKey, featureName string, n int, fn func(current any) any) error {
	return f.meddle(envKey, featureName, n, fn, onWrite)
}

func (f *Fake) meddle(envKey, featureName string, n int, fn func(current any) any, when moment) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	env, ft, err := f.lookup(envKey, featureName)
	if err != nil {
		return err
	}
	f.meddlers = append(f.meddlers, &meddler{env: env.id, feature: ft.id, left: n, fn: fn, when: when})
	return nil
}

// --- helpers on state (callers hold f.mu) ---

func (f *Fake) id() int64 { f.nextID++; return f.nextID }

// now is the clock, made strictly increasing at microsecond resolution (Flagsmith's).
func (f *Fake) now() time.Time {
	t := f.clock().UTC().Truncate(time.Microsecond)
	if !t.After(f.last) {
		t = f.last.Add(time.Microsecond)
	}
	f.last = t
	return t
}

// horizon is "now" for deciding what is live: never before a timestamp already handed out,
// so a version published this instant is live even when now bumped its live_from ahead of
// the clock.
func (f *Fake) horizon() time.Time {
	if t := f.clock().UTC(); t.After(f.last) {
		return t
	}
	return f.last
}

func (f *Fake) lookup(envKey, featureName string) (*environment, *feature, error) {
	env, ok := f.envs[envKey]
	if !ok {
		return nil, nil, fmt.Errorf("flagsmithtest: no environment %q", envKey)
	}
	ft := f.featureByName(env.project, featureName)
	if ft == nil {
		return nil, nil, fmt.Errorf("flagsmithtest: no feature %q in project %d", featureName, env.project)
	}
	return env, ft, nil
}

func (f *Fake) featureByName(project int64, name string) *feature {
	for _, ft := range f.features {
		if ft.project == project && ft.name == name {
			return ft
		}
	}
	return nil
}

func (f *Fake) envByID(id int64) *environment {
	for _, e := range f.envs {
		if e.id == id {
			return e
		}
	}
	return nil
}

// currentState is what the featurestates routes return: the v1 default, or the state of
// the newest live version on v2.
func (f *Fake) currentState(env *environment, featureID int64) *state {
	if !env.v2 {
		return f.current[pair{env.id, featureID}]
	}
	return f.liveState(env.id, featureID)
}

func (f *Fake) liveState(envID, featureID int64) *state {
	if v := f.liveVersion(envID, featureID); v != nil {
		return v.state
	}
	return nil
}

func (f *Fake) liveVersion(envID, featureID int64) *version {
	now := f.horizon()
	var best *version
	for _, v := range f.versions[pair{envID, featureID}] {
		if v.isLive(now) && (best == nil || !v.liveFrom.Before(*best.liveFrom)) {
			best = v
		}
	}
	return best
}

func (v *version) isLive(now time.Time) bool {
	return v.published && v.liveFrom != nil && !v.liveFrom.After(now)
}

// afterRead runs the behind-the-back writers armed to fire after a read of this feature.
func (f *Fake) afterRead(env *environment, featureID int64) { f.runMeddlers(env, featureID, onRead) }

// beforeWrite runs the behind-the-back writers armed to fire before a write of this feature.
func (f *Fake) beforeWrite(env *environment, featureID int64) {
	f.runMeddlers(env, featureID, onWrite)
}

func (f *Fake) runMeddlers(env *environment, featureID int64, when moment) {
	for _, m := range f.meddlers {
		if m.left <= 0 || m.when != when || m.env != env.id || m.feature != featureID {
			continue
		}
		m.left--
		cur := f.currentState(env, featureID)
		var curV any
		if cur != nil {
			curV = cur.value.goValue()
		}
		sv, err := storedOf(m.fn(curV))
		if err != nil {
			panic(fmt.Sprintf("flagsmithtest: %s function returned %v", when.knob(), err))
		}
		f.write(env, f.features[featureID], sv, nil)
	}
	f.meddlers = slices.DeleteFunc(f.meddlers, func(m *meddler) bool { return m.left <= 0 })
}

func storedOf(v any) (stored, error) {
	switch t := v.(type) {
	case nil:
		return stored{typ: "unicode"}, nil
	case string:
		return stored{typ: "unicode", str: &t}, nil
	case bool:
		return stored{typ: "bool", flag: &t}, nil
	case int:
		n := int64(t)
		return stored{typ: "int", num: &n}, nil
	case int32:
		n := int64(t)
		return stored{typ: "int", num: &n}, nil
	case int64:
		return stored{typ: "int", num: &t}, nil
	}
	return stored{}, fmt.Errorf("flagsmithtest: value of type %T is not a string, integer, bool or nil", v)
}

func (s stored) goValue() any {
	switch s.typ {
	case "int":
		if s.num != nil {
			return *s.num
		}
	case "bool":
		if s.flag != nil {
			return *s.flag
		}
	default:
		if s.str != nil {
			return *s.str
		}
	}
	return nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// --- HTTP plumbing ---

// recorder captures the status for the request log.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// serve wraps the router with the request log, latency, the fault knobs and authentication.
func (f *Fake) serve(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &recorder{ResponseWriter: w}
		entry := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body, At: time.Now(),
			UserAgent: r.UserAgent(), Run: r.Header.Get("X-Orchestrator-Run"), Fence: r.Header.Get("X-Orchestrator-Fence"),
			Authorized: r.Header.Get("Authorization") == "Api-Key "+f.apiKey}
		defer func() {
			entry.Status = rec.status
			f.mu.Lock()
			f.requests = append(f.requests, entry)
			f.mu.Unlock()
		}()

		f.mu.Lock()
		latency := f.latency
		applyThenFail, appliedCode := r.Method != http.MethodGet && f.appliedN > 0, f.appliedC
		if applyThenFail {
			f.appliedN--
		}
		fail, failCode := !applyThenFail && f.failN > 0, f.failCode
		if fail {
			f.failN--
		}
		throttle, retryAfter := !applyThenFail && !fail && f.throttle > 0, f.retryAft
		if throttle {
			f.throttle--
		}
		f.mu.Unlock()

		if latency > 0 && ctxtime.Sleep(r.Context(), latency) != nil {
			rec.WriteHeader(499) // the client went away; nobody reads this
			return
		}
		if fail {
			http.Error(rec, http.StatusText(failCode), failCode)
			return
		}
		if throttle {
			secs := int(math.Ceil(retryAfter.Seconds()))
			rec.Header().Set("Retry-After", strconv.Itoa(secs))
			writeJSON(rec, http.StatusTooManyRequests, detail(fmt.Sprintf("Request was throttled. Expected available in %d seconds.", secs)))
			return
		}
		auth := r.Header.Get("Authorization")
		switch {
		case auth == "":
			writeJSON(rec, http.StatusUnauthorized, detail("Authentication credentials were not provided."))
			return
		case !entry.Authorized:
			writeJSON(rec, http.StatusUnauthorized, detail("Valid Master API Key not found."))
			return
		}
		if applyThenFail {
			mux.ServeHTTP(discard{header: http.Header{}}, r) // applied; the answer is lost
			http.Error(rec, http.StatusText(appliedCode), appliedCode)
			return
		}
		mux.ServeHTTP(rec, r)
	})
}

// discard is a ResponseWriter that drops the answer.
type discard struct{ header http.Header }

func (d discard) Header() http.Header         { return d.header }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

type detailBody struct {
	Detail string `json:"detail"`
}

func detail(msg string) detailBody { return detailBody{Detail: msg} }

// fieldErrors is DRF's validation error body: {"field": ["message"]}.
func fieldErrors(field, msg string) map[string][]string { return map[string][]string{field: {msg}} }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter) { writeJSON(w, http.StatusNotFound, detail("Not found.")) }

const timeLayout = "2006-01-02T15:04:05.000000Z"

func ts(t time.Time) string { return t.UTC().Format(timeLayout) }

func tsPtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := ts(*t)
	return &s
}
