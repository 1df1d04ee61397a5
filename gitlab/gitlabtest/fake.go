// Package gitlabtest is a fake GitLab REST API (v4) for tests and the demo: project
// deployments and commit statuses, with GitLab's answers (401 "401 Unauthorized", 404
// "404 Project Not Found", 400 for a missing or invalid parameter and for a transition the
// deployment's or the commit status's state machine refuses, 403 for updating a deployment a
// CI job created, 429 "Retry later" with the RateLimit-* headers and Retry-After), fault
// knobs and inspectors of what it received.
//
// Its behaviour follows GitLab's source (lib/api/deployments.rb, app/models/deployment.rb,
// app/services/ci/create_commit_status_service.rb) and its API docs; the routes' parameters,
// statuses and answers are in testdata/openapi.yaml, written from those docs (GitLab's own
// OpenAPI file could not be read whole here), and TestFakeFollowsSpec checks the fake's
// traffic against it.
package gitlabtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/testutil"
)

// DefaultToken is the access token the fake accepts unless WithToken says otherwise.
const DefaultToken = "glpat-fake0123456789"

// DefaultJobToken is the CI job token the fake accepts.
const DefaultJobToken = "glcbt-fakejob0123456789"

// Option configures a [Fake].
type Option func(*Fake)

// WithToken sets the access token the fake accepts (PRIVATE-TOKEN or Authorization: Bearer).
func WithToken(tok string) Option { return func(f *Fake) { f.token = tok } }

// WithRateLimit sets the requests per minute the RateLimit-Limit header announces (default 2000).
func WithRateLimit(n int) Option { return func(f *Fake) { f.limit = n } }

// Fake is the fake GitLab API, an http.Handler. It is safe for concurrent use.
type Fake struct {
	token string
	limit int
	now   func() time.Time

	mu        sync.Mutex
	projects  map[string]*project // path → project
	nextID    int64
	failNext  []int
	limitTill time.Time
	latency   testutil.Latency
	log       []Request
}

type project struct {
	id          int64
	refs        map[string]string // branch or tag → sha
	tags        map[string]bool
	envs        map[string]int64 // environment name → id
	deployments []*Deployment
	statuses    map[string][]*CommitStatus // sha → statuses, oldest first
}

// Deployment is a deployment as the fake stores it.
type Deployment struct {
	ID, IID     int64
	Project     string
	Environment string
	SHA, Ref    string
	Tag         bool
	Status      string
	// CI says a CI job created it (its deployable is not null).
	CI        bool
	CreatedAt time.Time
	UpdatedAt time.Time
	// Statuses are the statuses it was created with and moved to, oldest first.
	Statuses []string
}

// CommitStatus is a commit status (an external job) as the fake stores it.
type CommitStatus struct {
	ID          int64
	SHA, Ref    string
	Name        string
	Status      string
	TargetURL   string
	Description string
	// States are the states it was moved through, oldest first.
	States []string
}

// Request is one request the fake answered.
type Request struct {
	Method, Path string // Path is escaped as sent
	Query        string
	Auth         string // "token", "job_token" or ""
	Status       int
}

// New returns a fake with no project; add them with [Fake.AddProject].
func New(opts ...Option) *Fake {
	f := &Fake{token: DefaultToken, limit: 2000, now: time.Now, projects: map[string]*project{}, nextID: 100}
	for _, o := range opts {
		o(f)
	}
	return f
}

// AddProject creates project path ("group/sub/project") whose branch (or tag, when tag)
// ref points at sha.
func (f *Fake) AddProject(path, ref, sha string, tag bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.projects[path]
	if p == nil {
		p = &project{id: f.id(), refs: map[string]string{}, tags: map[string]bool{}, envs: map[string]int64{},
			statuses: map[string][]*CommitStatus{}}
		f.projects[path] = p
	}
	p.refs[ref] = sha
	p.tags[ref] = tag
}

// AddCIDeployment records a deployment a CI job made (status running), which the API may
// not update; it returns its ID.
func (f *Fake) AddCIDeployment(path, environment, ref string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.projects[path]
	d := f.newDeployment(p, path, environment, p.refs[ref], ref, p.tags[ref], "running")
	d.CI = true
	return d.ID
}

// FailNext answers the next n requests with status, before anything is done.
func (f *Fake) FailNext(n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.failNext = append(f.failNext, status)
	}
}

// RateLimit answers every request for d with GitLab's throttle: 429 "Retry later" with
// Retry-After and RateLimit-Reset at the end of d.
func (f *Fake) RateLimit(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limitTill = f.now().Add(d)
}

// SetLatency delays every answer by d. Answers already waiting are released at once, so a
// test can hang the host and then let it go.
func (f *Fake) SetLatency(d time.Duration) { f.latency.Set(d) }

// Deployments returns copies of the deployments of project path, oldest first.
func (f *Fake) Deployments(path string) []Deployment {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.projects[path]
	if p == nil {
		return nil
	}
	out := make([]Deployment, len(p.deployments))
	for i, d := range p.deployments {
		out[i] = *d
		out[i].Statuses = slices.Clone(d.Statuses)
	}
	return out
}

// Statuses returns the statuses deployment id was created with and moved to, oldest first.
func (f *Fake) Statuses(id int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.projects {
		for _, d := range p.deployments {
			if d.ID == id {
				return slices.Clone(d.Statuses)
			}
		}
	}
	return nil
}

// CommitStatuses returns copies of the commit statuses of sha in project path, oldest first.
func (f *Fake) CommitStatuses(path, sha string) []CommitStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.projects[path]
	if p == nil {
		return nil
	}
	var out []CommitStatus
	for _, s := range p.statuses[sha] {
		c := *s
		c.States = slices.Clone(s.States)
		out = append(out, c)
	}
	return out
}

// Requests returns the requests answered so far, in order.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// ServeHTTP answers one request.
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !f.latency.Wait(r.Context().Done()) {
		return
	}
	rec := &recorder{ResponseWriter: w}
	auth := f.serve(rec, r)
	f.mu.Lock()
	f.log = append(f.log, Request{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Auth: auth, Status: rec.status})
	f.mu.Unlock()
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(s int) {
	r.status = s
	r.ResponseWriter.WriteHeader(s)
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if len(f.failNext) > 0 {
		status := f.failNext[0]
		f.failNext = f.failNext[1:]
		writeMessage(w, status, fmt.Sprintf("%d %s", status, http.StatusText(status)))
		return ""
	}
	if now.Before(f.limitTill) {
		f.throttle(w, now)
		return ""
	}
	f.rateHeaders(w, now)
	auth := f.authenticate(r)
	if auth == "" {
		writeMessage(w, http.StatusUnauthorized, "401 Unauthorized")
		return ""
	}
	// /api/v4/projects/:id/<rest>; :id is the project's URL-escaped path or its number.
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/api/v4/projects/")
	if !ok {
		writeMessage(w, http.StatusNotFound, "404 Not Found")
		return auth
	}
	segs := strings.Split(rest, "/")
	p, name := f.project(segs[0])
	if p == nil {
		writeMessage(w, http.StatusNotFound, "404 Project Not Found")
		return auth
	}
	switch {
	case len(segs) == 2 && segs[1] == "deployments" && r.Method == http.MethodGet:
		f.listDeployments(w, r, p)
	case len(segs) == 2 && segs[1] == "deployments" && r.Method == http.MethodPost:
		f.createDeployment(w, r, p, name)
	case len(segs) == 3 && segs[1] == "deployments" && (r.Method == http.MethodGet || r.Method == http.MethodPut):
		f.deployment(w, r, p, segs[2], now)
	case len(segs) == 3 && segs[1] == "statuses" && r.Method == http.MethodPost:
		f.commitStatus(w, r, p, segs[2])
	default:
		writeMessage(w, http.StatusNotFound, "404 Not Found")
	}
	return auth
}

func (f *Fake) authenticate(r *http.Request) string {
	switch {
	case r.Header.Get("PRIVATE-TOKEN") != "":
		if r.Header.Get("PRIVATE-TOKEN") == f.token {
			return "token"
		}
	case r.Header.Get("JOB-TOKEN") != "":
		if r.Header.Get("JOB-TOKEN") == DefaultJobToken {
			return "job_token"
		}
	case strings.HasPrefix(r.Header.Get("Authorization"), "Bearer "):
		if strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") == f.token {
			return "token"
		}
	}
	return ""
}

// project finds a project by its escaped path or its ID.
func (f *Fake) project(raw string) (*project, string) {
	name, err := url.PathUnescape(raw)
	if err != nil {
		return nil, ""
	}
	if p := f.projects[name]; p != nil {
		return p, name
	}
	for n, p := range f.projects {
		if strconv.FormatInt(p.id, 10) == name {
			return p, n
		}
	}
	return nil, ""
}

func (f *Fake) rateHeaders(w http.ResponseWriter, now time.Time) {
	h := w.Header()
	reset := now.Truncate(time.Minute).Add(time.Minute)
	h.Set("RateLimit-Limit", strconv.Itoa(f.limit))
	h.Set("RateLimit-Observed", "1")
	h.Set("RateLimit-Remaining", strconv.Itoa(f.limit-1))
	h.Set("RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	h.Set("RateLimit-ResetTime", reset.UTC().Format(http.TimeFormat))
}

// throttle answers as GitLab's Rack::Attack throttle does: 429, text/plain "Retry later".
func (f *Fake) throttle(w http.ResponseWriter, now time.Time) {
	h := w.Header()
	wait := f.limitTill.Sub(now)
	secs := int((wait + time.Second - 1) / time.Second)
	h.Set("RateLimit-Name", "throttle_authenticated_api")
	h.Set("RateLimit-Limit", strconv.Itoa(f.limit))
	h.Set("RateLimit-Observed", strconv.Itoa(f.limit+1))
	h.Set("RateLimit-Remaining", "0")
	h.Set("RateLimit-Reset", strconv.FormatInt(now.Add(time.Duration(secs)*time.Second).Unix(), 10))
	h.Set("RateLimit-ResetTime", now.Add(time.Duration(secs)*time.Second).UTC().Format(http.TimeFormat))
	h.Set("Retry-After", strconv.Itoa(secs))
	h.Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte("Retry later\n"))
}

var deploymentStatuses = []string{"created", "running", "success", "failed", "canceled", "skipped", "blocked"}

func (f *Fake) listDeployments(w http.ResponseWriter, r *http.Request, p *project) {
	q := r.URL.Query()
	if s := q.Get("status"); s != "" && !slices.Contains(deploymentStatuses, s) {
		writeError(w, http.StatusBadRequest, "status does not have a valid value")
		return
	}
	if o := q.Get("order_by"); o != "" && !slices.Contains([]string{"id", "iid", "created_at", "updated_at", "finished_at", "ref"}, o) {
		writeError(w, http.StatusBadRequest, "order_by does not have a valid value")
		return
	}
	list := slices.Clone(p.deployments)
	if q.Get("sort") == "desc" {
		slices.Reverse(list)
	}
	perPage, page := 20, 1
	if n, err := strconv.Atoi(q.Get("per_page")); err == nil && n > 0 {
		perPage = min(n, 100)
	}
	if n, err := strconv.Atoi(q.Get("page")); err == nil && n > 0 {
		page = n
	}
	out := []any{}
	skip := (page - 1) * perPage
	for _, d := range list {
		if (q.Has("environment") && q.Get("environment") != d.Environment) || (q.Get("status") != "" && q.Get("status") != d.Status) {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		if len(out) == perPage {
			break
		}
		out = append(out, deploymentJSON(p, d))
	}
	writeJSON(w, http.StatusOK, out)
}

// params reads a request's parameters, from a JSON body or a form, as Grape does.
func params(r *http.Request) (map[string]any, bool) {
	m := map[string]any{}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			return nil, false
		}
		return m, true
	}
	if err := r.ParseForm(); err != nil {
		return nil, false
	}
	for k := range r.PostForm {
		m[k] = r.PostForm.Get(k)
	}
	return m, true
}

func (f *Fake) createDeployment(w http.ResponseWriter, r *http.Request, p *project, name string) {
	m, ok := params(r)
	if !ok {
		writeError(w, http.StatusBadRequest, "400 Bad request")
		return
	}
	var missing []string
	for _, k := range []string{"environment", "sha", "ref", "tag", "status"} {
		if _, ok := m[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		writeError(w, http.StatusBadRequest, strings.Join(missing, ", ")+" is missing")
		return
	}
	env, _ := m["environment"].(string)
	sha, _ := m["sha"].(string)
	ref, _ := m["ref"].(string)
	status, _ := m["status"].(string)
	tag, ok := boolParam(m["tag"])
	if !ok {
		writeError(w, http.StatusBadRequest, "tag is invalid")
		return
	}
	if !slices.Contains([]string{"running", "success", "failed", "canceled"}, status) {
		writeError(w, http.StatusBadRequest, "status does not have a valid value")
		return
	}
	errs := map[string][]string{}
	if !slices.Contains(mapsValues(p.refs), sha) {
		errs["sha"] = []string{"The commit does not exist"}
	}
	if _, ok := p.refs[ref]; !ok {
		errs["ref"] = []string{"The branch or tag does not exist"}
	}
	if strings.ContainsAny(env, "${}") || env == "" {
		errs["environment"] = []string{"can contain only letters, digits, '-', '_', '/', '.', and ' ', but it cannot start or end with '/'"}
	}
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": errs})
		return
	}
	d := f.newDeployment(p, name, env, sha, ref, tag, status)
	writeJSON(w, http.StatusCreated, deploymentJSON(p, d))
}

func mapsValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func boolParam(v any) (bool, bool) {
	switch b := v.(type) {
	case bool:
		return b, true
	case string:
		switch b {
		case "true", "1":
			return true, true
		case "false", "0":
			return false, true
		}
	}
	return false, false
}

func (f *Fake) newDeployment(p *project, name, env, sha, ref string, tag bool, status string) *Deployment {
	if _, ok := p.envs[env]; !ok {
		p.envs[env] = f.id()
	}
	now := f.now()
	d := &Deployment{ID: f.id(), IID: int64(len(p.deployments) + 1), Project: name, Environment: env, SHA: sha, Ref: ref,
		Tag: tag, Status: status, CreatedAt: now, UpdatedAt: now, Statuses: []string{status}}
	p.deployments = append(p.deployments, d)
	return d
}

// transitions are app/models/deployment.rb's events: the statuses each status may be set
// from, for the statuses the API accepts.
func deploymentTransition(from, to string) (event string, ok bool) {
	switch to {
	case "running":
		return "run", from == "created" || from == "blocked"
	case "success":
		return "succeed", from != "success"
	case "failed":
		return "drop", from != "failed"
	case "canceled":
		return "cancel", from != "canceled"
	}
	return "", false
}

func (f *Fake) deployment(w http.ResponseWriter, r *http.Request, p *project, rawID string, now time.Time) {
	var d *Deployment
	for _, x := range p.deployments {
		if strconv.FormatInt(x.ID, 10) == rawID {
			d = x
		}
	}
	if d == nil {
		writeMessage(w, http.StatusNotFound, "404 Not found")
		return
	}
	if r.Method == http.MethodGet {
		writeJSON(w, http.StatusOK, deploymentJSON(p, d))
		return
	}
	m, ok := params(r)
	if !ok {
		writeError(w, http.StatusBadRequest, "400 Bad request")
		return
	}
	status, present := m["status"].(string)
	switch {
	case !present:
		writeError(w, http.StatusBadRequest, "status is missing")
		return
	case !slices.Contains([]string{"running", "success", "failed", "canceled"}, status):
		writeError(w, http.StatusBadRequest, "status does not have a valid value")
		return
	case d.CI:
		writeMessage(w, http.StatusForbidden, "403 Forbidden - Deployments created using GitLab CI can not be updated using the API")
		return
	}
	event, ok := deploymentTransition(d.Status, status)
	if !ok {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": map[string][]string{
			"status": {fmt.Sprintf("cannot transition via %q", event)},
		}})
		return
	}
	d.Status, d.UpdatedAt = status, now
	d.Statuses = append(d.Statuses, status)
	writeJSON(w, http.StatusOK, deploymentJSON(p, d))
}

// commitStatus follows Ci::CreateCommitStatusService: the newest pending or running status
// of the same name and ref is moved; otherwise a new one starts as created.
func (f *Fake) commitStatus(w http.ResponseWriter, r *http.Request, p *project, sha string) {
	m, ok := params(r)
	if !ok {
		writeError(w, http.StatusBadRequest, "400 Bad request")
		return
	}
	state, _ := m["state"].(string)
	if state == "" {
		writeError(w, http.StatusBadRequest, "state is missing")
		return
	}
	if !slices.Contains([]string{"pending", "running", "success", "failed", "canceled", "skipped"}, state) {
		writeError(w, http.StatusBadRequest, "state does not have a valid value")
		return
	}
	if !slices.Contains(mapsValues(p.refs), sha) {
		writeMessage(w, http.StatusNotFound, "404 Commit Not Found")
		return
	}
	ref, _ := m["ref"].(string)
	if ref == "" {
		for name, s := range p.refs {
			if s == sha {
				ref = name
			}
		}
	}
	name, _ := m["name"].(string)
	if name == "" {
		name, _ = m["context"].(string)
	}
	if name == "" {
		name = "default"
	}
	var st *CommitStatus
	for _, s := range p.statuses[sha] {
		if s.Name == name && s.Ref == ref && (s.Status == "pending" || s.Status == "running") {
			st = s
		}
	}
	fresh := st == nil
	if fresh {
		st = &CommitStatus{ID: f.id(), SHA: sha, Ref: ref, Name: name, Status: "created"}
	}
	if v, ok := m["target_url"].(string); ok {
		st.TargetURL = v
	}
	if v, ok := m["description"].(string); ok {
		st.Description = v
	}
	next, event, ok := commitTransition(st.Status, state)
	if !ok {
		writeMessage(w, http.StatusBadRequest, fmt.Sprintf("Cannot transition status via :%s from :%s (Reason(s): Status cannot transition via %q)", event, st.Status, event))
		return
	}
	st.Status = next
	st.States = append(st.States, next)
	if fresh {
		p.statuses[sha] = append(p.statuses[sha], st)
	}
	writeJSON(w, http.StatusCreated, commitStatusJSON(st, f.now()))
}

// commitTransition is CommitStatus's state machine for the API's states.
func commitTransition(from, to string) (next, event string, ok bool) {
	switch to {
	case "pending":
		return "pending", "enqueue", from == "created" || from == "skipped"
	case "running":
		if from == "created" || from == "skipped" {
			from = "pending" // job.enqueue, not raising
		}
		return "running", "run", from == "pending"
	case "success":
		return "success", "success", from == "created" || from == "pending" || from == "running"
	case "failed":
		return "failed", "drop", from == "created" || from == "pending" || from == "running"
	case "canceled":
		return "canceled", "cancel", from == "created" || from == "pending" || from == "running"
	case "skipped":
		return "skipped", "skip", from == "created" || from == "pending" || from == "running"
	}
	return "", "", false
}

func deploymentJSON(p *project, d *Deployment) map[string]any {
	var deployable any
	if d.CI {
		deployable = map[string]any{"id": d.ID + 100000, "status": "running", "stage": "deploy", "name": "deploy", "ref": d.Ref, "tag": d.Tag}
	}
	return map[string]any{
		"id": d.ID, "iid": d.IID, "ref": d.Ref, "sha": d.SHA, "status": d.Status,
		"created_at": d.CreatedAt.UTC().Format(time.RFC3339Nano), "updated_at": d.UpdatedAt.UTC().Format(time.RFC3339Nano),
		"user":        map[string]any{"id": 1, "name": "Orchestrator", "username": "orchestrator", "state": "active", "avatar_url": "", "web_url": "https://gitlab.example.com/orchestrator"},
		"environment": map[string]any{"id": p.envs[d.Environment], "name": d.Environment, "external_url": nil},
		"deployable":  deployable,
	}
}

func commitStatusJSON(s *CommitStatus, now time.Time) map[string]any {
	nullable := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	return map[string]any{
		"id": s.ID, "sha": s.SHA, "ref": s.Ref, "status": s.Status, "name": s.Name,
		"target_url": nullable(s.TargetURL), "description": nullable(s.Description),
		"created_at": now.UTC().Format(time.RFC3339Nano), "started_at": nil, "finished_at": nil,
		"allow_failure": false, "coverage": nil, "pipeline_id": s.ID + 5000,
		"author": map[string]any{"id": 1, "name": "Orchestrator", "username": "orchestrator", "state": "active", "avatar_url": "", "web_url": "https://gitlab.example.com/orchestrator"},
	}
}

func (f *Fake) id() int64 {
	f.nextID++
	return f.nextID
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeMessage answers {"message": msg}, GitLab's shape for most errors.
func writeMessage(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg})
}

// writeError answers {"error": msg}, Grape's shape for a missing or invalid parameter.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
