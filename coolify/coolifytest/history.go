package coolifytest

import (
	"maps"
	"net/http"
	"strings"
	"time"
)

// Config is what a deployment of an application runs: its image tag and its env vars (key →
// value, non-preview rows).
type Config struct {
	ImageTag string
	Env      map[string]string
}

// Equal reports whether two configs hold the same tag and env.
func (c Config) Equal(o Config) bool { return c.ImageTag == o.ImageTag && maps.Equal(c.Env, o.Env) }

// Call is one request as [History] sees it: the request log's entry plus what the fake
// learned while handling it.
type Call struct {
	Seq          uint64
	Method, Path string
	Route        string // as in [Request]
	// Apps are the applications the request acted on: the {uuid} of an /applications route,
	// the targets of POST /deploy, the application of the deployment a /deployments/{uuid}
	// route names. Empty when it named none or was never handled (auth, injected fault).
	Apps []string
	// Deployment is the deployment a /deployments/{uuid} route named.
	Deployment string
	Run, Fence string // X-Orchestrator-Run and X-Orchestrator-Fence
	// Status is the status sent (0: none); Handled is the status the handler produced, which
	// differs from Status when an injected fault hid the answer of a change that was made
	// (0: the request never reached its handler).
	Status, Handled int
	// ConfigWrite is set when the request changed an application's settings or env vars
	// (a handled 2xx PATCH of the application, or a create, update, bulk or delete of its env).
	ConfigWrite bool
	// At is when the fake handled the request, on its [Clock] (the time deployment spans use);
	// zero when it was never handled. Start and End are wall-clock arrival and answer.
	At, Start, End time.Time
}

// Mutating reports whether the request's method changes state.
func (c Call) Mutating() bool {
	return c.Method != http.MethodGet && c.Method != http.MethodHead && c.Method != http.MethodOptions
}

// Span is one deployment's life, on the fake's [Clock].
type Span struct {
	Deployment, App string
	// Run and Fence are the X-Orchestrator-* headers of the request that queued it.
	Run, Fence string
	Status     string
	// Queued, Start and End: End is zero while it is in progress, Start while it is queued.
	Queued, Start, End time.Time
	// Config is what it read when it started; ConfigBy is the X-Orchestrator-Run of the last
	// config write to the application before that ("" when only seeding or no run wrote it).
	Config   Config
	ConfigBy string
}

// InProgressAt reports whether the deployment was in progress at t.
func (s Span) InProgressAt(t time.Time) bool {
	return !s.Start.IsZero() && !t.Before(s.Start) && (s.End.IsZero() || t.Before(s.End))
}

// MaxInProgress is the most of spans in progress at one moment.
func MaxInProgress(spans []Span) int {
	most := 0
	for _, s := range spans {
		n := 0
		for _, o := range spans {
			if o.InProgressAt(s.Start) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// AppState is an application's configuration now and what it runs now.
type AppState struct {
	// Current is the tag and env set on the application; Running is what its last finished
	// deployment ran (a seeded running application runs its seeded tag and env).
	Current, Running Config
	// LastWriter is the X-Orchestrator-Run of the last config write ("" when none).
	LastWriter string
}

// History is the fake's record of what happened, for checkers: every completed request in
// order of arrival, every deployment, and each application's final state.
type History struct {
	Calls []Call
	Spans []Span
	Apps  map[string]AppState
}

// history is what the fake keeps beyond the request log (under Fake.mu).
type history struct {
	calls  map[uint64]callInfo // by Request.Seq
	writer map[string]string   // application uuid → run of its last config write
}

type callInfo struct {
	apps        []string
	deployment  string
	handled     int
	configWrite bool
	at          time.Time
}

// recordLocked notes what a handled request acted on and whether it changed an application's
// config.
func (f *Fake) recordLocked(c *reqCtx, tmpl string, status int) {
	if f.hist.calls == nil {
		f.hist.calls, f.hist.writer = map[uint64]callInfo{}, map[string]string{}
	}
	ci := callInfo{handled: status, at: f.clock.Now()}
	switch {
	case tmpl == "/deploy":
		p := deployParams(c)
		for _, u := range f.deployTargetsLocked(p.Get("uuid"), p.Get("tag")) {
			if f.apps[u] != nil {
				ci.apps = append(ci.apps, u)
			}
		}
	case strings.HasPrefix(tmpl, "/applications/{uuid}"), tmpl == "/deployments/applications/{uuid}":
		ci.apps = []string{c.r.PathValue("uuid")}
	case strings.HasPrefix(tmpl, "/deployments/{uuid}"):
		ci.deployment = c.r.PathValue("uuid")
		if d := f.findDeployment(ci.deployment); d != nil {
			ci.apps = []string{d.AppUUID}
		}
	}
	ci.configWrite = status >= 200 && status < 300 && c.r.Method != http.MethodGet &&
		(tmpl == "/applications/{uuid}" || strings.HasPrefix(tmpl, "/applications/{uuid}/envs"))
	if ci.configWrite {
		f.hist.writer[c.r.PathValue("uuid")] = c.rec.RunID
	}
	f.hist.calls[c.rec.Seq] = ci
}

// configLocked is the tag and env a deployment of a starting now would read.
func (f *Fake) configLocked(a *app) Config {
	c := Config{ImageTag: a.ImageTag, Env: map[string]string{}}
	for _, e := range f.envs {
		if e.resource == a.UUID && !e.IsPreview {
			v := ""
			if e.Value != nil {
				v = *e.Value
			}
			c.Env[e.Key] = v
		}
	}
	return c
}

// seedRunningEnvLocked makes a seeded running application that has never been deployed run
// its seeded env, as it runs its seeded image tag.
func (f *Fake) seedRunningEnvLocked(uuid string) {
	a := f.apps[uuid]
	if a == nil || a.NotRunning {
		return
	}
	for _, d := range f.deployments {
		if d.AppUUID == uuid {
			return
		}
	}
	a.DeployedEnv = f.configLocked(a).Env
}

// History returns what happened so far: completed requests with what they acted on,
// deployment spans with the config each ran, and every application's final state.
func (f *Fake) History() History {
	reqs := f.Requests()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advanceLocked()
	h := History{Apps: map[string]AppState{}}
	for _, r := range reqs {
		ci := f.hist.calls[r.Seq]
		h.Calls = append(h.Calls, Call{
			Seq: r.Seq, Method: r.Method, Path: r.Path, Route: r.Route, Apps: ci.apps, Deployment: ci.deployment,
			Run: r.RunID, Fence: r.Fence, Status: r.Status, Handled: ci.handled, ConfigWrite: ci.configWrite,
			At: ci.at, Start: r.Start, End: r.End,
		})
	}
	for _, d := range f.deployments {
		h.Spans = append(h.Spans, Span{
			Deployment: d.UUID, App: d.AppUUID, Run: d.RunID, Fence: d.Fence, Status: d.Status,
			Queued: d.CreatedAt, Start: d.StartedAt, End: d.FinishedAt,
			Config: Config{ImageTag: d.ImageTag, Env: maps.Clone(d.Env)}, ConfigBy: d.ConfigBy,
		})
	}
	for uuid, a := range f.apps {
		h.Apps[uuid] = AppState{
			Current:    f.configLocked(a),
			Running:    Config{ImageTag: a.DeployedImageTag, Env: maps.Clone(a.DeployedEnv)},
			LastWriter: f.hist.writer[uuid],
		}
	}
	return h
}
