package coolifytest

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
)

// routes is the map of the fake's API: every route with the ability it needs. Paths are below
// /api/v1 (health also answers on /api/health).
func (f *Fake) routes() {
	f.mux = http.NewServeMux()
	f.handle("GET", "/health", "", f.health)
	f.mux.HandleFunc("GET /api/health", func(w http.ResponseWriter, r *http.Request) {
		f.serve(w, r, "GET", "/health", "", f.health)
	})

	f.handle("GET", "/applications", AbilityRead, f.listApplications)
	f.handle("GET", "/applications/{uuid}", AbilityRead, f.getApplication)
	f.handle("PATCH", "/applications/{uuid}", AbilityWrite, f.patchApplication)
	f.handle("GET", "/applications/{uuid}/envs", AbilityRead, f.listEnvs)
	f.handle("POST", "/applications/{uuid}/envs", AbilityWrite, f.createEnv)
	f.handle("PATCH", "/applications/{uuid}/envs", AbilityWrite, f.updateEnv)
	f.handle("PATCH", "/applications/{uuid}/envs/bulk", AbilityWrite, f.bulkEnvs)
	f.handle("DELETE", "/applications/{uuid}/envs/{env_uuid}", AbilityWrite, f.deleteEnv)
	f.handle("POST", "/applications/{uuid}/start", AbilityDeploy, f.startApplication)
	f.handle("POST", "/applications/{uuid}/restart", AbilityDeploy, f.restartApplication)
	f.handle("POST", "/applications/{uuid}/stop", AbilityDeploy, f.stopApplication)

	f.handle("GET", "/services", AbilityRead, f.listServices)
	f.handle("GET", "/services/{uuid}", AbilityRead, f.getService)
	f.handle("GET", "/services/{uuid}/envs", AbilityRead, f.listEnvs)
	f.handle("POST", "/services/{uuid}/envs", AbilityWrite, f.createEnv)
	f.handle("PATCH", "/services/{uuid}/envs", AbilityWrite, f.updateEnv)
	f.handle("PATCH", "/services/{uuid}/envs/bulk", AbilityWrite, f.bulkEnvs)
	f.handle("DELETE", "/services/{uuid}/envs/{env_uuid}", AbilityWrite, f.deleteEnv)
	f.handle("POST", "/services/{uuid}/start", AbilityDeploy, f.startService)
	f.handle("POST", "/services/{uuid}/restart", AbilityDeploy, f.restartService)
	f.handle("POST", "/services/{uuid}/stop", AbilityDeploy, f.stopService)

	f.handle("POST", "/deploy", AbilityDeploy, f.deploy)
	f.handle("GET", "/deployments", AbilityRead, f.listDeployments)
	f.handle("GET", "/deployments/{uuid}", AbilityRead, f.getDeployment)
	f.handle("POST", "/deployments/{uuid}/cancel", AbilityDeploy, f.cancelDeployment)
	f.handle("GET", "/deployments/applications/{uuid}", AbilityRead, f.listAppDeployments)

	// Action routes answered GET until v4.2.0; now 405 with a hint, past the ability check of
	// the POST (so a GET tells whether the token has it without acting).
	for _, p := range []string{"/deploy", "/applications/{uuid}/start", "/applications/{uuid}/restart",
		"/applications/{uuid}/stop", "/services/{uuid}/start", "/services/{uuid}/restart", "/services/{uuid}/stop"} {
		f.handle("GET", p, AbilityDeploy, f.movedToPost)
	}
	f.handle("GET", "/servers/{uuid}/validate", AbilityWrite, f.movedToPost)

	// Not Coolify: a stand-in for the application's own health endpoint, so a pipeline's HTTP
	// health check can point at the fake (200 when running and healthy, else 503).
	f.mux.HandleFunc("GET /_fake/apps/{uuid}/health", func(w http.ResponseWriter, r *http.Request) {
		f.serve(w, r, "GET", "/_fake/apps/{uuid}/health", "", f.appHealth)
	})
	f.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		f.serve(w, r, r.Method, "", "", func(*reqCtx) response {
			return jsonError(http.StatusNotFound, "Not found.")
		})
	})
}

// ServeHTTP serves the fake API. An injected [DropConnection] fault panics with
// http.ErrAbortHandler, which net/http's server turns into a reset connection.
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.mux.ServeHTTP(w, r) }

func (f *Fake) handle(method, tmpl, ability string, h handlerFunc) {
	f.mux.HandleFunc(method+" /api/v1"+tmpl, func(w http.ResponseWriter, r *http.Request) {
		f.serve(w, r, method, tmpl, ability, h)
	})
}

// reqCtx is what a handler sees; handlers run with f.mu held.
type reqCtx struct {
	r         *http.Request
	body      []byte
	sensitive bool // token may see env values
	rec       *Request
}

type response struct {
	status int
	body   []byte
	header http.Header
}

type handlerFunc func(*reqCtx) response

func jsonResponse(status int, v any) response {
	return response{status: status, body: mustJSON(v)}
}

func jsonError(status int, msg string) response {
	return jsonResponse(status, map[string]any{"message": msg})
}

func validationError(errs map[string]any) response {
	return jsonResponse(http.StatusUnprocessableEntity, map[string]any{"message": "Validation failed.", "errors": errs})
}

// serve runs one request through the fake's layers: record, latency, injected fault, auth,
// rate limit, ability, the handler (under the state lock), and the answer.
func (f *Fake) serve(w http.ResponseWriter, r *http.Request, method, tmpl, ability string, h handlerFunc) {
	route := method + " " + tmpl
	if tmpl == "" {
		route = ""
	}
	rec := f.begin(r, route)
	defer f.end(rec)

	if d := f.latencyFor(method, tmpl); d > 0 {
		if ctxtime.Sleep(r.Context(), d) != nil {
			rec.Fault = "client went away during latency"
			return
		}
	}
	uuid := r.PathValue("uuid")
	if uuid == "" {
		uuid = r.URL.Query().Get("uuid")
	}
	fl := f.takeFault(method, tmpl, uuid)
	if fl != nil && !fl.AfterEffect {
		f.writeFault(w, fl, rec)
		return
	}
	resp := f.process(r, tmpl, ability, h, rec)
	if fl != nil {
		f.writeFault(w, fl, rec)
		return
	}
	for k, vs := range resp.header {
		w.Header()[k] = vs
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body)
	rec.Status = resp.status
}

func (f *Fake) process(r *http.Request, tmpl, ability string, h handlerFunc, rec *Request) response {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &reqCtx{r: r, body: rec.Body, rec: rec}
	if ability != "" {
		// Coolify's order: auth:sanctum, the throttle (Laravel runs authentication first),
		// ApiAllowed, then the route's ability.
		auth := r.Header.Get("Authorization")
		raw, ok := strings.CutPrefix(auth, "Bearer ")
		tok := f.tokens[strings.TrimSpace(raw)]
		if !ok || tok == nil {
			return jsonError(http.StatusUnauthorized, "Unauthenticated.")
		}
		if f.rateN > 0 {
			now := f.clock.Now()
			if tok.window.IsZero() || !now.Before(tok.window.Add(f.rateWindow)) {
				tok.window, tok.count = now, 0
			}
			if tok.count >= f.rateN {
				f.throttled++
				resp := jsonError(http.StatusTooManyRequests, "Too Many Attempts.")
				resp.header = http.Header{"Retry-After": {retryAfterSeconds(tok.window.Add(f.rateWindow).Sub(now))}}
				return resp
			}
			tok.count++
		}
		if f.apiDown {
			return jsonResponse(http.StatusForbidden, map[string]any{"success": true, "message": "API is disabled."})
		}
		if !tok.abilities[AbilityRoot] && !tok.abilities[ability] {
			return jsonError(http.StatusForbidden, "Missing required permissions: "+ability)
		}
		c.sensitive = tok.abilities[AbilityRoot] || tok.abilities[AbilityReadSensitive]
	}
	f.advanceLocked()
	resp := h(c)
	f.recordLocked(c, tmpl, resp.status)
	return resp
}

func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

func (f *Fake) latencyFor(method, tmpl string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.latencies) - 1; i >= 0; i-- {
		l := f.latencies[i]
		if (l.method == "" || l.method == method) && (l.route == "" || l.route == tmpl) {
			if l.max <= l.min {
				return l.min
			}
			return l.min + time.Duration(f.rng.Int64N(int64(l.max-l.min)+1))
		}
	}
	return 0
}

func (f *Fake) takeFault(method, tmpl, uuid string) *Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, fl := range f.faults {
		if fl.left > 0 && (fl.Method == "" || fl.Method == method) && (fl.Route == "" || fl.Route == tmpl) &&
			(fl.UUID == "" || fl.UUID == uuid) {
			fl.left--
			out := fl.Fault
			if fl.left == 0 {
				f.faults = append(f.faults[:i:i], f.faults[i+1:]...)
			}
			return &out
		}
	}
	return nil
}

func (f *Fake) writeFault(w http.ResponseWriter, fl *Fault, rec *Request) {
	if fl.Status == DropConnection {
		rec.Fault = "connection dropped"
		if fl.AfterEffect {
			rec.Fault = "connection dropped after the change was made"
		}
		rec.Status = 0
		panic(http.ErrAbortHandler)
	}
	msg := fl.Message
	if msg == "" {
		msg = http.StatusText(fl.Status)
	}
	rec.Fault = "injected " + strconv.Itoa(fl.Status)
	if fl.AfterEffect {
		rec.Fault += " after the change was made"
	}
	w.Header().Set("Content-Type", "application/json")
	if fl.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(fl.RetryAfter))
	}
	w.WriteHeader(fl.Status)
	_, _ = w.Write(mustJSON(map[string]any{"message": msg}))
	rec.Status = fl.Status
}

var keptHeaders = []string{"User-Agent", "Content-Type", "X-Orchestrator-Run", "X-Orchestrator-Fence", "Idempotency-Key"}

func (f *Fake) begin(r *http.Request, route string) *Request {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	rec := &Request{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Route: route,
		Header: http.Header{}, RunID: r.Header.Get("X-Orchestrator-Run"),
		Fence: r.Header.Get("X-Orchestrator-Fence"), Body: body, Start: time.Now(),
	}
	for _, h := range keptHeaders {
		if v := r.Header.Values(h); len(v) > 0 {
			rec.Header[h] = append([]string(nil), v...)
		}
	}
	if raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		rec.TokenID, _, _ = strings.Cut(strings.TrimSpace(raw), "|")
	}
	f.logMu.Lock()
	f.seq++
	rec.Seq = f.seq
	f.inFlight++
	f.logMu.Unlock()
	return rec
}

func (f *Fake) end(rec *Request) {
	rec.End = time.Now()
	f.logMu.Lock()
	f.reqs = append(f.reqs, *rec)
	f.inFlight--
	f.logMu.Unlock()
}

// decodeObject parses a JSON object body. strict is the application/env PATCH behaviour:
// Content-Type must be JSON and the body a non-empty object, else 400 "Invalid request.";
// otherwise an unparsable body reads as empty (Laravel merges nothing).
func decodeObject(c *reqCtx, strict bool) (map[string]any, *response) {
	bad := func(detail string) (map[string]any, *response) {
		resp := jsonResponse(http.StatusBadRequest, map[string]any{"message": "Invalid request.", "error": detail})
		return nil, &resp
	}
	if strict && !strings.Contains(c.r.Header.Get("Content-Type"), "application/json") {
		return bad("Content-Type must be application/json.")
	}
	if len(strings.TrimSpace(string(c.body))) == 0 {
		if strict {
			return bad("Empty JSON.")
		}
		return map[string]any{}, nil
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(c.body)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		if strict {
			return bad("Invalid JSON.")
		}
		return map[string]any{}, nil
	}
	if len(m) == 0 && strict {
		return bad("Empty JSON.")
	}
	for k, v := range m {
		m[k] = laravelInput(v)
	}
	return m, nil
}

// laravelSpace is what Laravel's TrimStrings middleware strips from both ends of every string
// of a request: PHP's \s under the u modifier (Unicode's White_Space), NUL, and the BOM, ZWSP
// and LRM it adds.
func laravelSpace(r rune) bool {
	return unicode.Is(unicode.White_Space, r) || r == 0 || r == '\uFEFF' || r == '\u200B' || r == '\u200E'
}

// laravelInput is a request value as Coolify's controllers see it, after the global
// middleware: TrimStrings trims every string, then ConvertEmptyStringsToNull turns an empty
// one into null, in nested objects and arrays too.
func laravelInput(v any) any {
	switch x := v.(type) {
	case string:
		if t := strings.TrimFunc(x, laravelSpace); t != "" {
			return t
		}
		return nil
	case map[string]any:
		for k, e := range x {
			x[k] = laravelInput(e)
		}
	case []any:
		for i, e := range x {
			x[i] = laravelInput(e)
		}
	}
	return v
}
