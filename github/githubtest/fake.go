// Package githubtest is a fake GitHub REST API for tests and the demo: the deployments, the
// deployment statuses, the commit statuses and the GitHub App installation token exchange,
// with GitHub's answers (201s, 401 "Bad credentials", 404 "Not Found", 422 "Validation
// Failed" with field errors, the x-ratelimit-* headers on every answer, primary and
// secondary rate limits), fault knobs and inspectors of what it received.
//
// It follows the routes' OpenAPI description (testdata/openapi.yaml, an excerpt of
// github/rest-api-description); TestFakeFollowsSpec checks its traffic against it. Like
// GitHub, it accepts deployment statuses in any order and any number of times.
package githubtest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/testutil"
)

// DefaultToken is the token the fake accepts unless WithToken says otherwise.
const DefaultToken = "ghp_faketoken0123456789"

// Option configures a [Fake].
type Option func(*Fake)

// WithToken sets the token the fake accepts.
func WithToken(tok string) Option { return func(f *Fake) { f.token = tok } }

// WithApp makes the fake a GitHub App's API too: it generates the App's RSA key (see
// [Fake.AppKeyPEM]) and exchanges a JWT signed with it for an installation token of
// installationID.
func WithApp(appID, installationID int64) Option {
	return func(f *Fake) {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		f.app = &app{id: appID, installation: installationID, key: key}
	}
}

// WithPrefix serves the API under prefix, as GitHub Enterprise Server does under "/api/v3".
func WithPrefix(prefix string) Option {
	return func(f *Fake) { f.prefix = strings.TrimRight(prefix, "/") }
}

// WithRateLimit sets the primary rate limit's size per hour (default 5000).
func WithRateLimit(n int) Option { return func(f *Fake) { f.limit = n } }

type app struct {
	id, installation int64
	key              *rsa.PrivateKey
}

// Fake is the fake GitHub API, an http.Handler. It is safe for concurrent use.
type Fake struct {
	token  string
	prefix string
	limit  int
	app    *app
	now    func() time.Time

	mu          sync.Mutex
	repos       map[string]*repo // "owner/name" → repo
	nextID      int64
	instTokens  map[string]time.Time // installation token → expiry
	exchanges   int
	tokenPerms  []map[string]string
	used        int
	resetAt     time.Time
	failNext    []int          // statuses to answer the next requests with
	failOn      map[string]int // path substring → status to answer the next request to it with
	primaryTill time.Time      // primary rate limit spent until
	secondTill  time.Time      // secondary rate limit until
	latency     testutil.Latency
	log         []Request
}

type repo struct {
	commits     map[string]bool
	deployments []*Deployment
	statuses    map[string][]CommitStatus // sha → statuses, oldest first
}

// Deployment is a deployment as the fake stores it.
type Deployment struct {
	ID                    int64
	Repo                  string
	SHA, Ref, Task        string
	Environment           string
	Description           string
	Payload               json.RawMessage
	AutoMerge             *bool
	RequiredContexts      []string // nil when the request left it out
	TransientEnvironment  bool
	ProductionEnvironment bool
	CreatedAt             time.Time
	// States are the states of its statuses, oldest first.
	States []string
	// Statuses are the statuses it received, oldest first.
	Statuses []DeploymentStatus
}

// DeploymentStatus is one deployment status the fake received.
type DeploymentStatus struct {
	ID             int64
	State          string
	Description    string
	LogURL         string
	EnvironmentURL string
	AutoInactive   *bool // nil when the request left it out (GitHub's default: true)
}

// CommitStatus is one commit status the fake received.
type CommitStatus struct {
	ID          int64
	State       string
	Context     string
	TargetURL   string
	Description string
}

// Request is one request the fake answered.
type Request struct {
	Method, Path string
	Query        string
	// Auth is "token", "installation", "jwt" or "" (none or refused).
	Auth   string
	Status int
}

// New returns a fake with no repository; add them with [Fake.AddRepo].
func New(opts ...Option) *Fake {
	f := &Fake{token: DefaultToken, limit: 5000, now: time.Now, repos: map[string]*repo{},
		instTokens: map[string]time.Time{}, nextID: 1000}
	for _, o := range opts {
		o(f)
	}
	return f
}

// AddRepo creates repository "owner/name" holding the commits given (full SHAs).
func (f *Fake) AddRepo(name string, commits ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.repos[name]
	if r == nil {
		r = &repo{commits: map[string]bool{}, statuses: map[string][]CommitStatus{}}
		f.repos[name] = r
	}
	for _, c := range commits {
		r.commits[c] = true
	}
}

// AppKeyPEM is the App's private key (PKCS#1 PEM), for the client; nil without WithApp.
func (f *Fake) AppKeyPEM() []byte {
	if f.app == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(f.app.key)})
}

// FailNext answers the next n requests with status (e.g. 502, 503), before anything is done.
func (f *Fake) FailNext(n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.failNext = append(f.failNext, status)
	}
}

// FailNextOn answers the next request whose path contains part with status, before anything
// is done (e.g. "/statuses/"+sha: a commit status, not a deployment status).
func (f *Fake) FailNextOn(part string, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOn == nil {
		f.failOn = map[string]int{}
	}
	f.failOn[part] = status
}

// ExhaustRateLimit spends the primary rate limit for d: requests are answered 403 with
// x-ratelimit-remaining: 0 and x-ratelimit-reset d from now.
func (f *Fake) ExhaustRateLimit(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.primaryTill = f.now().Add(d)
}

// SecondaryRateLimit answers requests for d with GitHub's secondary rate limit: 403 with
// retry-after (whole seconds, rounded up) and the secondary limits' documentation_url.
func (f *Fake) SecondaryRateLimit(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.secondTill = f.now().Add(d)
}

// SetLatency delays every answer by d. Answers already waiting are released at once, so a
// test can hang the host and then let it go.
func (f *Fake) SetLatency(d time.Duration) { f.latency.Set(d) }

// Deployments returns copies of the deployments of repository name, oldest first.
func (f *Fake) Deployments(name string) []Deployment {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.repos[name]
	if r == nil {
		return nil
	}
	out := make([]Deployment, len(r.deployments))
	for i, d := range r.deployments {
		out[i] = *d
		out[i].States = slices.Clone(d.States)
		out[i].Statuses = slices.Clone(d.Statuses)
	}
	return out
}

// States returns the states deployment id received, oldest first, nil for an unknown one.
func (f *Fake) States(id int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.repos {
		for _, d := range r.deployments {
			if d.ID == id {
				return slices.Clone(d.States)
			}
		}
	}
	return nil
}

// CommitStatuses returns the commit statuses sha of repository name received, oldest first.
func (f *Fake) CommitStatuses(name, sha string) []CommitStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.repos[name]; r != nil {
		return slices.Clone(r.statuses[sha])
	}
	return nil
}

// TokenExchanges is how many installation tokens the fake issued.
func (f *Fake) TokenExchanges() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exchanges
}

// Requests returns the requests answered so far, in order.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// docsURL is where GitHub's error answers point.
const docsURL = "https://docs.github.com/rest"

// ServeHTTP answers one request.
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !f.latency.Wait(r.Context().Done()) {
		return
	}
	rec := &recorder{ResponseWriter: w}
	auth := f.serve(rec, r)
	f.mu.Lock()
	f.log = append(f.log, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Auth: auth, Status: rec.status})
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

// serve routes the request and returns how it was authenticated.
func (f *Fake) serve(w http.ResponseWriter, r *http.Request) string {
	path, ok := strings.CutPrefix(r.URL.EscapedPath(), f.prefix)
	if !ok {
		writeError(w, http.StatusNotFound, "Not Found")
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if len(f.failNext) > 0 {
		status := f.failNext[0]
		f.failNext = f.failNext[1:]
		writeError(w, status, http.StatusText(status))
		return ""
	}
	for part, status := range f.failOn {
		if strings.Contains(path, part) {
			delete(f.failOn, part)
			writeError(w, status, http.StatusText(status))
			return ""
		}
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")

	// The App's token exchange, authenticated by a JWT.
	if len(segs) == 4 && segs[0] == "app" && segs[1] == "installations" && segs[3] == "access_tokens" {
		if r.Method != http.MethodPost {
			writeError(w, http.StatusNotFound, "Not Found")
			return ""
		}
		return f.exchange(w, r, segs[2], now)
	}

	auth := f.authenticate(r, now)
	if auth == "" {
		writeError(w, http.StatusUnauthorized, "Bad credentials")
		return ""
	}
	if !f.rateLimit(w, now) {
		return auth
	}
	if len(segs) < 4 || segs[0] != "repos" {
		writeError(w, http.StatusNotFound, "Not Found")
		return auth
	}
	name := segs[1] + "/" + segs[2]
	rp := f.repos[name]
	if rp == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return auth
	}
	switch {
	case len(segs) == 4 && segs[3] == "deployments" && r.Method == http.MethodGet:
		f.listDeployments(w, r, name, rp)
	case len(segs) == 4 && segs[3] == "deployments" && r.Method == http.MethodPost:
		f.createDeployment(w, r, name, rp, now)
	case len(segs) == 6 && segs[3] == "deployments" && segs[5] == "statuses" && r.Method == http.MethodPost:
		f.createDeploymentStatus(w, r, name, rp, segs[4], now)
	case len(segs) == 5 && segs[3] == "statuses" && r.Method == http.MethodPost:
		f.createCommitStatus(w, r, name, rp, segs[4], now)
	default:
		writeError(w, http.StatusNotFound, "Not Found")
	}
	return auth
}

// authenticate returns "token" or "installation" for an accepted Authorization header.
func (f *Fake) authenticate(r *http.Request, now time.Time) string {
	h := r.Header.Get("Authorization")
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || (!strings.EqualFold(scheme, "bearer") && !strings.EqualFold(scheme, "token")) {
		return ""
	}
	if f.token != "" && cred == f.token {
		return "token"
	}
	if exp, ok := f.instTokens[cred]; ok && now.Before(exp) {
		return "installation"
	}
	return ""
}

// rateLimit counts the request against the primary limit, sets the x-ratelimit-* headers,
// and answers a rate limit when one applies (false).
func (f *Fake) rateLimit(w http.ResponseWriter, now time.Time) bool {
	if now.After(f.resetAt) {
		f.resetAt, f.used = now.Add(time.Hour), 0
	}
	remaining := f.limit - f.used
	reset := f.resetAt
	if now.Before(f.primaryTill) {
		remaining, reset = 0, f.primaryTill
	}
	h := w.Header()
	h.Set("X-Ratelimit-Limit", strconv.Itoa(f.limit))
	h.Set("X-Ratelimit-Resource", "core")
	h.Set("X-Ratelimit-Reset", strconv.FormatInt(reset.Unix()+boolInt(reset.Nanosecond() > 0), 10))
	if remaining <= 0 {
		h.Set("X-Ratelimit-Remaining", "0")
		h.Set("X-Ratelimit-Used", strconv.Itoa(f.limit))
		writeJSON(w, http.StatusForbidden, map[string]string{
			"message":           "API rate limit exceeded for installation. If you reach out to GitHub Support for help, please include the request ID.",
			"documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
			"status":            "403",
		})
		return false
	}
	f.used++
	h.Set("X-Ratelimit-Remaining", strconv.Itoa(remaining-1))
	h.Set("X-Ratelimit-Used", strconv.Itoa(f.used))
	if now.Before(f.secondTill) {
		wait := f.secondTill.Sub(now)
		h.Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		writeJSON(w, http.StatusForbidden, map[string]string{
			"message":           "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
			"documentation_url": "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
			"status":            "403",
		})
		return false
	}
	return true
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (f *Fake) listDeployments(w http.ResponseWriter, r *http.Request, name string, rp *repo) {
	q := r.URL.Query()
	perPage := 30
	if n, err := strconv.Atoi(q.Get("per_page")); err == nil && n > 0 {
		perPage = min(n, 100)
	}
	out := []map[string]any{}
	for i := len(rp.deployments) - 1; i >= 0 && len(out) < perPage; i-- { // newest first
		d := rp.deployments[i]
		if (q.Has("sha") && q.Get("sha") != d.SHA) || (q.Has("environment") && q.Get("environment") != d.Environment) ||
			(q.Has("ref") && q.Get("ref") != d.Ref) || (q.Has("task") && q.Get("task") != d.Task) {
			continue
		}
		out = append(out, f.deploymentJSON(r, name, d))
	}
	writeJSON(w, http.StatusOK, out)
}

func (f *Fake) createDeployment(w http.ResponseWriter, r *http.Request, name string, rp *repo, now time.Time) {
	var body struct {
		Ref                   *string         `json:"ref"`
		Task                  *string         `json:"task"`
		AutoMerge             *bool           `json:"auto_merge"`
		RequiredContexts      *[]string       `json:"required_contexts"`
		Payload               json.RawMessage `json:"payload"`
		Environment           *string         `json:"environment"`
		Description           *string         `json:"description"`
		TransientEnvironment  *bool           `json:"transient_environment"`
		ProductionEnvironment *bool           `json:"production_environment"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	if body.Ref == nil || *body.Ref == "" {
		writeValidation(w, "Deployment", "ref", "missing_field", "")
		return
	}
	if !rp.commits[*body.Ref] {
		writeError(w, http.StatusUnprocessableEntity, "No ref found for: "+*body.Ref)
		return
	}
	d := &Deployment{ID: f.id(), Repo: name, SHA: *body.Ref, Ref: *body.Ref, Task: deref(body.Task, "deploy"),
		Environment: deref(body.Environment, "production"), Description: deref(body.Description, ""),
		Payload: body.Payload, AutoMerge: body.AutoMerge, CreatedAt: now}
	if len(d.Payload) == 0 || string(d.Payload) == "null" {
		d.Payload = json.RawMessage(`{}`)
	}
	if body.RequiredContexts != nil {
		d.RequiredContexts = append([]string{}, *body.RequiredContexts...)
	} else if len(rp.statuses[d.SHA]) > 0 {
		// GitHub checks every context of the commit when required_contexts is left out.
		for _, s := range latestStatuses(rp.statuses[d.SHA]) {
			if s.State != "success" {
				writeError(w, http.StatusConflict, "Conflict: Commit status checks failed for "+d.SHA+".")
				return
			}
		}
	}
	d.TransientEnvironment = body.TransientEnvironment != nil && *body.TransientEnvironment
	d.ProductionEnvironment = d.Environment == "production"
	if body.ProductionEnvironment != nil {
		d.ProductionEnvironment = *body.ProductionEnvironment
	}
	rp.deployments = append(rp.deployments, d)
	writeJSON(w, http.StatusCreated, f.deploymentJSON(r, name, d))
}

func latestStatuses(all []CommitStatus) map[string]CommitStatus {
	out := map[string]CommitStatus{}
	for _, s := range all {
		out[strings.ToLower(s.Context)] = s
	}
	return out
}

var deploymentStates = []string{"error", "failure", "inactive", "in_progress", "queued", "pending", "success"}

func (f *Fake) createDeploymentStatus(w http.ResponseWriter, r *http.Request, name string, rp *repo, rawID string, now time.Time) {
	id, err := strconv.ParseInt(rawID, 10, 64)
	var d *Deployment
	for _, x := range rp.deployments {
		if err == nil && x.ID == id {
			d = x
		}
	}
	if d == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	var body struct {
		State          string `json:"state"`
		TargetURL      string `json:"target_url"`
		LogURL         string `json:"log_url"`
		Description    string `json:"description"`
		Environment    string `json:"environment"`
		EnvironmentURL string `json:"environment_url"`
		AutoInactive   *bool  `json:"auto_inactive"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	switch {
	case body.State == "":
		writeValidation(w, "DeploymentStatus", "state", "missing_field", "")
		return
	case !slices.Contains(deploymentStates, body.State):
		writeValidation(w, "DeploymentStatus", "state", "custom", "state is not included in the list")
		return
	case len([]rune(body.Description)) > 140:
		writeValidation(w, "DeploymentStatus", "description", "custom", "description is too long (maximum is 140 characters)")
		return
	}
	st := DeploymentStatus{ID: f.id(), State: body.State, Description: body.Description,
		LogURL: cmpOr(body.LogURL, body.TargetURL), EnvironmentURL: body.EnvironmentURL, AutoInactive: body.AutoInactive}
	d.Statuses = append(d.Statuses, st)
	d.States = append(d.States, body.State)
	if body.Environment != "" {
		d.Environment = body.Environment
	}
	if body.State == "success" && (body.AutoInactive == nil || *body.AutoInactive) {
		// GitHub's default: the earlier successful deployments of the environment that are
		// neither transient nor production become inactive.
		for _, o := range rp.deployments {
			if o != d && o.Environment == d.Environment && !o.TransientEnvironment && !o.ProductionEnvironment &&
				len(o.States) > 0 && o.States[len(o.States)-1] == "success" {
				o.States = append(o.States, "inactive")
				o.Statuses = append(o.Statuses, DeploymentStatus{ID: f.id(), State: "inactive"})
			}
		}
	}
	base := f.apiBase(r)
	writeJSON(w, http.StatusCreated, map[string]any{
		"url":                      fmt.Sprintf("%s/repos/%s/deployments/%d/statuses/%d", base, name, d.ID, st.ID),
		"id":                       st.ID,
		"node_id":                  fmt.Sprintf("DES_%d", st.ID),
		"state":                    st.State,
		"creator":                  creator(),
		"description":              st.Description,
		"environment":              d.Environment,
		"target_url":               st.LogURL,
		"log_url":                  st.LogURL,
		"environment_url":          st.EnvironmentURL,
		"created_at":               now.UTC().Format(time.RFC3339),
		"updated_at":               now.UTC().Format(time.RFC3339),
		"deployment_url":           fmt.Sprintf("%s/repos/%s/deployments/%d", base, name, d.ID),
		"repository_url":           fmt.Sprintf("%s/repos/%s", base, name),
		"performed_via_github_app": nil,
	})
}

var commitStates = []string{"error", "failure", "pending", "success"}

func (f *Fake) createCommitStatus(w http.ResponseWriter, r *http.Request, name string, rp *repo, sha string, now time.Time) {
	var body struct {
		State       string  `json:"state"`
		TargetURL   *string `json:"target_url"`
		Description *string `json:"description"`
		Context     *string `json:"context"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	switch {
	case !rp.commits[sha]:
		writeError(w, http.StatusUnprocessableEntity, "No commit found for SHA: "+sha)
		return
	case !slices.Contains(commitStates, body.State):
		writeValidation(w, "Status", "state", "custom", "state is not included in the list")
		return
	case body.Description != nil && len([]rune(*body.Description)) > 140:
		writeValidation(w, "Status", "description", "custom", "description is too long (maximum is 140 characters)")
		return
	}
	st := CommitStatus{ID: f.id(), State: body.State, Context: deref(body.Context, "default"),
		TargetURL: deref(body.TargetURL, ""), Description: deref(body.Description, "")}
	rp.statuses[sha] = append(rp.statuses[sha], st)
	writeJSON(w, http.StatusCreated, map[string]any{
		"url":         fmt.Sprintf("%s/repos/%s/statuses/%s", f.apiBase(r), name, sha),
		"avatar_url":  nil,
		"id":          st.ID,
		"node_id":     fmt.Sprintf("SC_%d", st.ID),
		"state":       st.State,
		"description": nullable(body.Description),
		"target_url":  nullable(body.TargetURL),
		"context":     st.Context,
		"created_at":  now.UTC().Format(time.RFC3339),
		"updated_at":  now.UTC().Format(time.RFC3339),
		"creator":     creator(),
	})
}

func (f *Fake) deploymentJSON(r *http.Request, name string, d *Deployment) map[string]any {
	base := f.apiBase(r)
	return map[string]any{
		"url":                      fmt.Sprintf("%s/repos/%s/deployments/%d", base, name, d.ID),
		"id":                       d.ID,
		"node_id":                  fmt.Sprintf("DE_%d", d.ID),
		"sha":                      d.SHA,
		"ref":                      d.Ref,
		"task":                     d.Task,
		"payload":                  d.Payload,
		"original_environment":     d.Environment,
		"environment":              d.Environment,
		"description":              d.Description,
		"creator":                  creator(),
		"created_at":               d.CreatedAt.UTC().Format(time.RFC3339),
		"updated_at":               d.CreatedAt.UTC().Format(time.RFC3339),
		"statuses_url":             fmt.Sprintf("%s/repos/%s/deployments/%d/statuses", base, name, d.ID),
		"repository_url":           fmt.Sprintf("%s/repos/%s", base, name),
		"transient_environment":    d.TransientEnvironment,
		"production_environment":   d.ProductionEnvironment,
		"performed_via_github_app": nil,
	}
}

func (f *Fake) apiBase(r *http.Request) string { return "http://" + r.Host + f.prefix }

func (f *Fake) id() int64 {
	f.nextID++
	return f.nextID
}

// creator is the user every object is created by (a simple-user).
func creator() map[string]any {
	return map[string]any{
		"login": "orchestrator-bot", "id": 1, "node_id": "U_1", "avatar_url": "https://avatars.example/u/1",
		"gravatar_id": "", "url": "https://api.github.com/users/orchestrator-bot", "html_url": "https://github.com/orchestrator-bot",
		"followers_url": "https://api.github.com/users/orchestrator-bot/followers", "following_url": "https://api.github.com/users/orchestrator-bot/following{/other_user}",
		"gists_url": "https://api.github.com/users/orchestrator-bot/gists{/gist_id}", "starred_url": "https://api.github.com/users/orchestrator-bot/starred{/owner}{/repo}",
		"subscriptions_url": "https://api.github.com/users/orchestrator-bot/subscriptions", "organizations_url": "https://api.github.com/users/orchestrator-bot/orgs",
		"repos_url": "https://api.github.com/users/orchestrator-bot/repos", "events_url": "https://api.github.com/users/orchestrator-bot/events{/privacy}",
		"received_events_url": "https://api.github.com/users/orchestrator-bot/received_events", "type": "Bot", "site_admin": false,
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers GitHub's basic-error.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg, "documentation_url": docsURL, "status": strconv.Itoa(status)})
}

// writeValidation answers GitHub's 422 validation-error with one field error.
func writeValidation(w http.ResponseWriter, resource, field, code, msg string) {
	e := map[string]any{"resource": resource, "field": field, "code": code}
	if msg != "" {
		e["message"] = msg
	}
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{
		"message": "Validation Failed", "errors": []any{e}, "documentation_url": docsURL, "status": "422",
	})
}

func deref(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

func nullable(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
