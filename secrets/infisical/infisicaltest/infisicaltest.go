// Package infisicaltest is a fake Infisical server for tests and the demo, in the style of
// net/http/httptest: an http.Handler with in-memory state (machine identities, projects,
// environments, folders of secrets, secret imports), built with NewHandler and usable without
// a *testing.T, and NewServer, which starts it on a loopback port for the length of a test.
//
// It serves the routes the client uses, with the real server's shapes and quirks (see
// docs/outside-systems.md, "Infisical"):
//
//   - POST /api/v1/auth/universal-auth/login: {clientId, clientSecret} → {accessToken,
//     expiresIn, accessTokenMaxTTL, tokenType}; wrong credentials → 401 "Invalid credentials";
//     a body missing fields → 422 ValidationFailure whose message is an array of issues.
//   - GET /api/v3/secrets/raw (workspaceId) and GET /api/v4/secrets (projectId): the secrets of
//     a folder. References (${KEY}, ${env.KEY}, ${env.folder.KEY}) are expanded only with
//     expandSecretReferences=true; as in Infisical, a reference that cannot be resolved stays
//     in the value as written, and a cycle leaves a reference in it too. Imported folders are
//     returned in imports[] only with include_imports=true (the camelCase includeImports is
//     ignored, as by the real server).
//     Values the identity may not read come back as "<hidden-by-infisical>" with
//     secretValueHidden=true, all of them with viewSecretValue=false; with viewSecretValue
//     true (the default) an imported secret whose value the identity may not read is left out
//     of imports[], as by the real server. A secret of the folder that references a secret whose value the
//     identity may not read makes the whole list a 403 ForbiddenError "Failed to expand one or
//     more secret references" with one detail per such secret; an imported one keeps its raw,
//     unexpanded value (the server drops that refusal for imports).
//     With WithListRefusingUnreadable, a list asking for values of a folder holding a secret the
//     identity may not read is refused whole instead (403 ForbiddenError "You do not have
//     permission to read secret values"), as newer releases do.
//   - GET /api/v3/secrets/raw/{secretName} (workspaceId, environment, secretPath, type,
//     expandSecretReferences, include_imports, viewSecretValue): {secret: S}, the folder's own
//     secret or else the last import that has it, expanded like the list (an imported secret
//     keeps a reference it may not expand). A secret whose value the identity may not read →
//     403 ForbiddenReadSecretError; a reference in the folder's own secret to one it may not
//     read → 403 ForbiddenError naming both; no such secret → 404 NotFound "Secret with name
//     'K' not found"; unknown folder → 404 NotFound.
//   - Errors use the body {reqId, statusCode, message, error}: no bearer → 401
//     UnauthorizedError; expired token → 403 TokenError "Your token has expired. Please
//     re-authenticate."; unknown token → 403 TokenError; missing project or environment → 400;
//     unknown project, environment or folder → 404 NotFound.
//
// Knobs inject what the real server does under load: RateLimitNext (429 "Rate limit exceeded.
// Please try again in N seconds", no Retry-After header), FailNext (5xx), SetLatency, and
// ExpireTokens. Requests returns what was called, without credentials or tokens.
package infisicaltest

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// HiddenValue is what the server sends in place of a value the identity may not read.
const HiddenValue = "<hidden-by-infisical>"

// DefaultTokenTTL is an Identity's access token lifetime when it names none (Infisical's
// default is 30 days).
const DefaultTokenTTL = 30 * 24 * time.Hour

// Identity is a machine identity with universal-auth credentials.
type Identity struct {
	ClientID     string
	ClientSecret string
	// TokenTTL is the access token lifetime (expiresIn); DefaultTokenTTL when zero.
	TokenTTL time.Duration
	// HideValues denies the identity read-value permission on every secret: the listed
	// folder's values come back hidden and imported secrets are left out.
	HideValues bool
	// HiddenKeys denies it on these keys only (a permission condition on secret name).
	HiddenKeys []string
	// HiddenFolders denies it on the secrets of these folders (a permission condition on
	// environment and secret path).
	HiddenFolders []Folder
}

// Folder names one folder of secrets.
type Folder struct {
	ProjectID   string
	Environment string
	// Path is the folder path, "/" when empty.
	Path string
}

func (f Folder) norm() Folder {
	f.Path = cleanPath(f.Path)
	return f
}

func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	return path.Clean("/" + p)
}

// Request is one call the server received. It holds no credentials, tokens or values.
type Request struct {
	Method string
	Path   string
	// Query is the raw query string (project, environment, folder and flags only).
	Query string
	// ClientID is the identity that made the call: the one logging in, or the token's owner;
	// "" when unauthenticated.
	ClientID string
	// Status is the status the server answered.
	Status int
	// UserAgent is the request's User-Agent header.
	UserAgent string
}

// Option configures a Handler at construction.
type Option func(*Handler)

// WithIdentity adds a machine identity.
func WithIdentity(id Identity) Option { return func(h *Handler) { h.addIdentity(id) } }

// WithSecrets sets secrets of a folder (creating the project, environment and folder). New
// keys are listed in sorted order, after the folder's existing ones.
func WithSecrets(f Folder, kv map[string]string) Option {
	return func(h *Handler) {
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			h.setSecret(f, k, kv[k])
		}
	}
}

// WithImport makes into import the secrets of from (appended after into's other imports).
func WithImport(into, from Folder) Option { return func(h *Handler) { h.addImport(into, from) } }

// WithClock sets the server's clock for token issue and expiry; time.Now by default.
func WithClock(now func() time.Time) Option { return func(h *Handler) { h.now = now } }

// WithLatency delays every answer by d (or until the request's context ends).
func WithLatency(d time.Duration) Option { return func(h *Handler) { h.latency = d } }

// WithListRefusingUnreadable makes the list routes answer as Infisical releases that check
// read-value permission on every listed secret (getSecrets' throwOnMissingReadValuePermission,
// on by default there): a list asking for values (viewSecretValue=true) of a folder holding a
// secret the identity may see but not read is refused whole, 403 ForbiddenError "You do not
// have permission to read secret values". Without it such a secret comes back hidden, as
// docs/outside-systems.md, "Hidden values and refused lists", describes.
func WithListRefusingUnreadable() Option { return func(h *Handler) { h.refuseUnreadable = true } }

// Handler is the fake server as an http.Handler. All methods are safe for concurrent use.
type Handler struct {
	mux *http.ServeMux

	mu         sync.Mutex
	now        func() time.Time
	identities map[string]*Identity // by client id
	tokens     map[string]token
	folders    map[Folder]*folder
	envs       map[[2]string]bool // {project, environment} that exist
	latency    time.Duration
	rateLimit  struct{ n, seconds int }
	failNext   struct{ n, status int }
	requests   []Request
	onRequest  func(Request)
	reqSeq     int
	// refuseUnreadable: see WithListRefusingUnreadable.
	refuseUnreadable bool
}

type token struct {
	clientID string
	expires  time.Time
}

type folder struct {
	id      string
	secrets map[string]*secret
	order   []string // keys in insertion order, for stable answers
	imports []Folder
}

type secret struct {
	id        string
	version   int
	value     string
	createdAt time.Time
	updatedAt time.Time
}

// NewHandler returns a fake server with the given state.
func NewHandler(opts ...Option) *Handler {
	h := &Handler{
		now:        time.Now,
		identities: make(map[string]*Identity),
		tokens:     make(map[string]token),
		folders:    make(map[Folder]*folder),
		envs:       make(map[[2]string]bool),
	}
	for _, o := range opts {
		o(h)
	}
	h.mux = http.NewServeMux()
	h.routes()
	return h
}

// Server is a Handler listening on a loopback port.
type Server struct {
	*Handler
	// URL is the base URL to give the client, e.g. http://127.0.0.1:41234.
	URL string
	srv *httptest.Server
}

// NewServer starts a fake server for the length of the test.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	h := NewHandler(opts...)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &Server{Handler: h, URL: srv.URL, srv: srv}
}

// Close stops the server; NewServer's cleanup does it too.
func (s *Server) Close() { s.srv.Close() }

func (h *Handler) addIdentity(id Identity) {
	if id.TokenTTL == 0 {
		id.TokenTTL = DefaultTokenTTL
	}
	id.HiddenKeys = slices.Clone(id.HiddenKeys)
	id.HiddenFolders = slices.Clone(id.HiddenFolders)
	for i, f := range id.HiddenFolders {
		id.HiddenFolders[i] = f.norm()
	}
	h.identities[id.ClientID] = &id
}

// SetSecret creates or updates one secret (and its project, environment and folder).
func (h *Handler) SetSecret(f Folder, key, value string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setSecret(f, key, value)
}

func (h *Handler) setSecret(f Folder, key, value string) {
	fo := h.folder(f)
	now := h.now()
	if s, ok := fo.secrets[key]; ok {
		s.value, s.version, s.updatedAt = value, s.version+1, now
		return
	}
	fo.secrets[key] = &secret{id: newID(), version: 1, value: value, createdAt: now, updatedAt: now}
	fo.order = append(fo.order, key)
}

// DeleteSecret removes one secret; it is a no-op when absent.
func (h *Handler) DeleteSecret(f Folder, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fo, ok := h.folders[f.norm()]
	if !ok {
		return
	}
	delete(fo.secrets, key)
	fo.order = slices.DeleteFunc(fo.order, func(k string) bool { return k == key })
}

// AddImport makes into import the secrets of from, after into's other imports.
func (h *Handler) AddImport(into, from Folder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addImport(into, from)
}

func (h *Handler) addImport(into, from Folder) {
	h.folder(from)
	fo := h.folder(into)
	fo.imports = append(fo.imports, from.norm())
}

// folder returns f, creating it and its parents, environment and project. Callers hold mu.
func (h *Handler) folder(f Folder) *folder {
	f = f.norm()
	h.envs[[2]string{f.ProjectID, f.Environment}] = true
	for p := f.Path; ; p = path.Dir(p) {
		pf := Folder{ProjectID: f.ProjectID, Environment: f.Environment, Path: p}
		if _, ok := h.folders[pf]; !ok {
			h.folders[pf] = &folder{id: newID(), secrets: make(map[string]*secret)}
		}
		if p == "/" {
			break
		}
	}
	return h.folders[f]
}

// ExpireTokens makes every access token issued so far expired: the next call with one gets
// 403 TokenError "Your token has expired".
func (h *Handler) ExpireTokens() {
	h.mu.Lock()
	defer h.mu.Unlock()
	past := h.now().Add(-time.Second)
	for k, t := range h.tokens {
		t.expires = past
		h.tokens[k] = t
	}
}

// RateLimitNext answers the next n requests with 429 and the message "Rate limit exceeded.
// Please try again in <seconds> seconds", without a Retry-After header, as Infisical does.
func (h *Handler) RateLimitNext(n, seconds int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rateLimit.n, h.rateLimit.seconds = n, seconds
}

// FailNext answers the next n requests with status (500 InternalServerError, 502, 503 or 504
// GatewayTimeoutError).
func (h *Handler) FailNext(n, status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failNext.n, h.failNext.status = n, status
}

// SetLatency delays every later answer by d (or until the request's context ends).
func (h *Handler) SetLatency(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.latency = d
}

// OnRequest registers fn to be called as each request arrives, before any latency, with the
// request's method, path and query (Status and ClientID are not known yet). Tests use it to
// act while a request is in flight.
func (h *Handler) OnRequest(fn func(Request)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onRequest = fn
}

// Requests returns the calls received so far, in order.
func (h *Handler) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests)
}

// Count returns how many received calls had this method and path.
func (h *Handler) Count(method, path string) int {
	n := 0
	for _, r := range h.Requests() {
		if r.Method == method && r.Path == path {
			n++
		}
	}
	return n
}

// ResetRequests forgets the calls received so far.
func (h *Handler) ResetRequests() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests = nil
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// apiError is Infisical's error body; a ForbiddenRequestError adds details.
type apiError struct {
	ReqID      string `json:"reqId"`
	StatusCode int    `json:"statusCode"`
	Message    any    `json:"message"`
	Error      string `json:"error"`
	Details    any    `json:"details,omitempty"`
}

// errorNames are the "error" values Infisical sends per status.
var errorNames = map[int]string{
	400: "BadRequest",
	401: "UnauthorizedError",
	403: "PermissionDenied",
	404: "NotFound",
	422: "ValidationFailure",
	429: "RateLimitExceeded",
	500: "InternalServerError",
	502: "BadGateway",
	503: "ServiceUnavailable",
	504: "GatewayTimeoutError",
}

// refRe is Infisical's reference syntax (INTERPOLATION_PATTERN_STRING in the server's
// secret-reference-fns.ts): ${KEY}, ${env.KEY}, ${env.a.b.KEY}, and ${@project.env.KEY} across
// projects. Other ${...} text (${VAR:-x}, ${a b}) is not a reference and is never touched.
var refRe = regexp.MustCompile(`\$\{([a-zA-Z0-9_.@-]+)\}`)

// maxRefDepth bounds how deep a chain of references is followed, and how many further passes
// expand the references that expanding formed (Infisical's MAX_SECRET_REFERENCE_DEPTH).
const maxRefDepth = 10

// refKind is what a reference names.
type refKind int

const (
	refLocal        refKind = iota // ${KEY}: a key of the referencing secret's folder
	refNested                      // ${env.a.b.KEY}: a key of folder /a/b of environment env
	refCrossProject                // ${@project.env.KEY}: another project, which the fake has not
)

// splitRef splits the text between ${ and }.
func splitRef(ref string) (env, folderPath, key string, kind refKind) {
	parts := strings.Split(ref, ".")
	switch {
	case strings.HasPrefix(parts[0], "@"):
		return "", "", "", refCrossProject
	case len(parts) == 1:
		return "", "", parts[0], refLocal
	}
	return parts[0], cleanPath(strings.Join(parts[1:len(parts)-1], "/")), parts[len(parts)-1], refNested
}

// refIDs returns the set of references in v.
func refIDs(v string) map[string]bool {
	out := map[string]bool{}
	for _, m := range refRe.FindAllString(v, -1) {
		out[m] = true
	}
	return out
}
