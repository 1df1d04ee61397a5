// Package infisical is a client for the parts of the Infisical API that Phase 1 needs: log in
// as a machine identity (universal auth) and list the secrets of one folder of a project
// environment, with secret references expanded and imported secrets merged, or read them one
// by name when Infisical refuses the list. Source adapts it to secrets.Source.
//
// The client runs on internal/outbound, the retry policy of every outside client: it retries
// transport errors, 5xx and 429 (waiting the seconds named in the 429 message, since Infisical
// sends no Retry-After header), and fails fast on other 4xx with a typed *APIError. Its calls
// are reads, and a login only issues another token, so all of them are idempotent. It logs in lazily, keeps the access token until
// shortly before it expires, and logs in again once when a request is refused with 401 or 403
// "TokenError".
//
// Secret values, the client secret and access tokens are never logged and never appear in an
// error or in String output; values are handed back in secrets.Values, which redacts itself,
// and are not kept by the client after a call returns.
//
// The server's behaviour it relies on is described in docs/outside-systems.md, "Infisical";
// secrets/infisical/infisicaltest is the fake server the tests and the demo run against.
package infisical

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// Routes used. The list route is v3 "raw", the one the official Go SDK calls; it is served by
// Infisical Cloud and by self-hosted releases old and new (v4 /api/v4/secrets is the newer
// equivalent with projectId instead of workspaceId).
const (
	loginPath = "/api/v1/auth/universal-auth/login"
	listPath  = "/api/v3/secrets/raw"
	// getRoute is the route of one secret by name, below listPath (a template: metrics and
	// logs name the route, not the key).
	getRoute = listPath + "/{secretName}"
)

// RetryPolicy bounds the retries of one call (internal/outbound's policy, as in the coolify
// and mobile clients).
type RetryPolicy = outbound.Policy

// MetricsFunc is told about every HTTP attempt the client makes, as system [System].
type MetricsFunc = outbound.MetricsFunc

// DefaultRetryPolicy is used unless [WithRetry] says otherwise. A 429 asking for a wait longer
// than MaxRetryAfter ends the call with the 429.
var DefaultRetryPolicy = RetryPolicy{
	MaxRetries:    4,
	MinWait:       500 * time.Millisecond,
	MaxWait:       15 * time.Second,
	MaxRetryAfter: time.Minute,
}

// Bounds on what the client reads from the server.
const (
	maxErrorBody = 64 << 10
	maxListBody  = 32 << 20
	maxPeek      = 4 << 10
)

// System is the name this client reports to metrics.
const System = "infisical"

// Option configures a [Client].
type Option func(*Client)

// WithHTTPClient makes the client send through hc; a pooled client with sane timeouts when
// not given.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.httpc = hc } }

// WithRetry sets the retry budget of every call.
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// WithLogger sets the logger for debug and info records (never a value or credential).
// Default (and nil): discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *Client) {
		if l != nil {
			c.log = l
		}
	}
}

// WithVersion sets the version in the `User-Agent: orchestrator/<version>` header. Default "dev".
func WithVersion(v string) Option { return func(c *Client) { c.version = v } }

// WithMetrics reports every HTTP attempt to fn (default: none).
func WithMetrics(fn MetricsFunc) Option { return func(c *Client) { c.metrics = fn } }

// WithClock sets the clock used for token expiry (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(c *Client) {
		if now != nil {
			c.now = now
		}
	}
}

// Client talks to one Infisical host as one machine identity. It is safe for concurrent use;
// concurrent calls share one access token and one login.
type Client struct {
	base         *url.URL
	clientID     string
	clientSecret string
	log          *slog.Logger
	out          *outbound.Client
	now          func() time.Time
	httpc        *http.Client // options, read once by New
	retry        RetryPolicy
	version      string
	metrics      MetricsFunc

	loginTurn chan struct{} // one login at a time; acquire with a select on ctx

	mu      sync.Mutex
	token   string
	renewAt time.Time // log in again from this instant; zero when the token has no expiry
}

// New returns a Client for the Infisical host at baseURL (e.g. https://us.infisical.com or a
// self-hosted URL), logging in as the machine identity clientID with its universal-auth
// clientSecret. It makes no request: the first call logs in. It returns an error when baseURL
// is not an absolute http(s) URL or clientID or clientSecret is empty.
func New(baseURL, clientID, clientSecret string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("infisical: base url %q: want an absolute http or https url", baseURL)
	}
	if clientID == "" || clientSecret == "" {
		return nil, errors.New("infisical: client id and client secret are required")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""

	c := &Client{
		base:         u,
		clientID:     clientID,
		clientSecret: clientSecret,
		log:          slog.New(slog.DiscardHandler),
		now:          time.Now,
		retry:        DefaultRetryPolicy,
		loginTurn:    make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(c)
	}
	c.out = outbound.New(outbound.Options{System: System, HTTPClient: c.httpc, Policy: c.retry,
		Version: c.version, Logger: c.log, Metrics: c.metrics,
		RetryAfter: retryAfterFromMessage})
	return c, nil
}

// String shows the host and the client id; never the secret or a token.
func (c *Client) String() string {
	return fmt.Sprintf("infisical.Client{%s, identity %s}", c.base, c.clientID)
}

// GoString is String.
func (c *Client) GoString() string { return c.String() }

// Format prints String for every verb.
func (c *Client) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, c.String()) }

// Scope names one folder of secrets: a project, an environment slug and a folder path.
type Scope struct {
	ProjectID   string `json:"project_id"`
	Environment string `json:"environment"`
	// Path is the folder, "/" when empty.
	Path string `json:"path"`
}

func (s Scope) path() string { return cmp.Or(s.Path, "/") }

// String is `infisical project "p" environment "prod" path "/"`.
func (s Scope) String() string {
	return fmt.Sprintf("infisical project %q environment %q path %q", s.ProjectID, s.Environment, s.path())
}

// Listing is the merged content of one folder.
type Listing struct {
	// Values holds every secret whose value is readable. When a key is both the folder's
	// own and imported, the folder's own secret wins; when several imports carry it, the
	// import listed last wins (the order the Infisical CLI merges them in).
	Values secrets.Values
	// Hidden lists, sorted, the keys whose value Infisical hid (secretValueHidden): the
	// identity may see them but not read them. Infisical hides only the folder's own secrets:
	// it leaves an imported secret the identity may not read out of the answer, so such a key
	// is absent, or another import's readable copy is in Values.
	Hidden []string
	// Unresolved maps the keys whose value still holds a secret reference after Infisical
	// expanded references to the names of those references (the text between ${ and }, never
	// any other part of the value). Their values are not in Values: Infisical leaves a
	// reference it cannot resolve (a missing secret, folder or environment, a cycle, a chain
	// deeper than 10) in the value as written, so the value is not the secret's.
	Unresolved map[string][]string
}

// ListSecrets lists the secrets of scope in one request, with references (${KEY},
// ${env.folder.KEY}) expanded by the server and imported folders merged (see Listing for
// which side wins). Infisical leaves a reference it cannot resolve in the value as written
// and does not report it; the client finds such values by the reference syntax and lists
// them in Listing.Unresolved instead of Values.
//
// It returns an error wrapping *APIError for a non-2xx answer (errors.Is ErrNotFound for an
// unknown or out-of-scope project, environment or folder; ErrUnauthorized when the identity
// could not log in; ErrRateLimited when 429 outlasted every retry), ctx's error when ctx ends,
// or a transport error after the retries.
func (c *Client) ListSecrets(ctx context.Context, scope Scope) (Listing, error) {
	if scope.ProjectID == "" || scope.Environment == "" {
		return Listing{}, fmt.Errorf("list secrets of %s: project id and environment are required", scope)
	}
	q := scope.query()
	q.Set("recursive", "false")
	var out listResponse
	if err := c.authed(ctx, http.MethodGet, listPath, listPath, q, &out); err != nil {
		return Listing{}, fmt.Errorf("list secrets of %s: %w", scope, err)
	}
	l := out.merge()
	c.log.LogAttrs(ctx, slog.LevelDebug, "infisical secrets listed",
		slog.String(logkey.Project, scope.ProjectID), slog.String(logkey.Environment, scope.Environment),
		slog.String(logkey.SecretPath, scope.path()), slog.Int(logkey.Count, l.Values.Len()+len(l.Hidden)+len(l.Unresolved)),
		slog.Int(logkey.Imports, len(out.Imports)))
	return l, nil
}

// query is the query of the list and the single-secret routes for scope: values asked for,
// references expanded, imports included.
func (s Scope) query() url.Values {
	return url.Values{
		"workspaceId":            {s.ProjectID},
		"environment":            {s.Environment},
		"secretPath":             {s.path()},
		"expandSecretReferences": {"true"},
		"include_imports":        {"true"}, // snake_case: includeImports is silently ignored
		"viewSecretValue":        {"true"},
	}
}

// getSecret reads one secret of scope by name, as the server resolves it for the folder: the
// folder's own secret, else the last import that has it, with references expanded. It
// returns an error wrapping *APIError for a non-2xx answer: ErrNotFound when neither the
// folder nor its imports have the key, ErrForbidden when the identity may not read its value
// (error "ForbiddenReadSecretError", see readRefused) or a secret it references.
func (c *Client) getSecret(ctx context.Context, scope Scope, key string) (rawSecret, error) {
	q := scope.query()
	q.Set("type", "shared")
	var out struct {
		Secret rawSecret `json:"secret"`
	}
	if err := c.authed(ctx, http.MethodGet, getRoute, listPath+"/"+url.PathEscape(key), q, &out); err != nil {
		return rawSecret{}, fmt.Errorf("read secret %s of %s: %w", key, scope, err)
	}
	return out.Secret, nil
}

type rawSecret struct {
	SecretKey         string `json:"secretKey"`
	SecretValue       string `json:"secretValue"`
	SecretValueHidden bool   `json:"secretValueHidden"`
}

type listResponse struct {
	Secrets []rawSecret `json:"secrets"`
	Imports []struct {
		SecretPath  string      `json:"secretPath"`
		Environment string      `json:"environment"`
		Secrets     []rawSecret `json:"secrets"`
	} `json:"imports"`
}

// referenceRe is Infisical's secret reference syntax (INTERPOLATION_PATTERN_STRING in the
// server's secret-reference-fns.ts): ${KEY}, ${env.KEY}, ${env.a.b.KEY}, ${@project.env.KEY}.
// The server expands only text of this form; ${VAR:-x} or ${a b} it never touches.
var referenceRe = regexp.MustCompile(`\$\{([a-zA-Z0-9_.@-]+)\}`)

// references returns the names of the secret references in v (the text between ${ and },
// each once, in order of appearance): after the server expanded references, those it could
// not resolve.
func references(v string) []string {
	var names []string
	for _, m := range referenceRe.FindAllStringSubmatch(v, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

// merge applies the precedence documented on Listing: own secrets first, then imports from
// the last to the first; the first occurrence of a key wins. The server was asked to expand
// references (ListSecrets always does), so a readable value still holding one goes to
// Unresolved instead of Values.
func (r *listResponse) merge() Listing {
	vals := make(map[string]string, len(r.Secrets))
	seen := make(map[string]bool, len(r.Secrets))
	var hidden []string
	var unresolved map[string][]string
	take := func(s rawSecret) {
		if seen[s.SecretKey] {
			return
		}
		seen[s.SecretKey] = true
		if s.SecretValueHidden {
			hidden = append(hidden, s.SecretKey)
			return
		}
		if refs := references(s.SecretValue); len(refs) > 0 {
			if unresolved == nil {
				unresolved = make(map[string][]string)
			}
			unresolved[s.SecretKey] = refs
			return
		}
		vals[s.SecretKey] = s.SecretValue
	}
	for _, s := range r.Secrets {
		take(s)
	}
	for i := len(r.Imports) - 1; i >= 0; i-- {
		for _, s := range r.Imports[i].Secrets {
			take(s)
		}
	}
	slices.Sort(hidden)
	return Listing{Values: secrets.NewValues(vals), Hidden: hidden, Unresolved: unresolved}
}

// authed makes a request with the access token, logging in first when there is none or it
// is about to expire, and once more when the server refuses the token.
func (c *Client) authed(ctx context.Context, method, route, path string, q url.Values, out any) error {
	for attempt := 0; ; attempt++ {
		tok, err := c.accessToken(ctx)
		if err != nil {
			return err
		}
		err = c.do(ctx, method, route, path, q, nil, tok, out)
		var apiErr *APIError
		if attempt == 0 && errors.As(err, &apiErr) && apiErr.tokenRejected() {
			c.log.LogAttrs(ctx, slog.LevelInfo, "infisical token refused, logging in again",
				slog.Int(logkey.Status, apiErr.StatusCode), slog.String(logkey.Error, apiErr.Code))
			c.dropToken(tok)
			continue
		}
		return err
	}
}

// accessToken returns a token valid for a while yet, logging in when needed. Concurrent
// callers wait for a single login.
func (c *Client) accessToken(ctx context.Context) (string, error) {
	if tok, ok := c.cachedToken(); ok {
		return tok, nil
	}
	select {
	case c.loginTurn <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-c.loginTurn }()
	if tok, ok := c.cachedToken(); ok { // someone else logged in meanwhile
		return tok, nil
	}
	return c.login(ctx)
}

func (c *Client) cachedToken() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token == "" || (!c.renewAt.IsZero() && !c.now().Before(c.renewAt)) {
		return "", false
	}
	return c.token, true
}

func (c *Client) dropToken(tok string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token == tok {
		c.token, c.renewAt = "", time.Time{}
	}
}

// refreshMargin is how long before expiry a token is replaced: a tenth of its life, at most a
// minute.
func refreshMargin(ttl time.Duration) time.Duration { return min(ttl/10, time.Minute) }

type loginRequest struct {
	ClientID     string `json:"clientId"`
	ClientSecret string `json:"clientSecret"`
}

type loginResponse struct {
	AccessToken string `json:"accessToken"`
	ExpiresIn   int64  `json:"expiresIn"`
	TokenType   string `json:"tokenType"`
}

// login exchanges the client id and secret for an access token (universal auth).
func (c *Client) login(ctx context.Context) (string, error) {
	start := c.now()
	var out loginResponse
	err := c.do(ctx, http.MethodPost, loginPath, loginPath, nil, loginRequest{ClientID: c.clientID, ClientSecret: c.clientSecret}, "", &out)
	if err != nil {
		return "", fmt.Errorf("log in as identity %q: %w", c.clientID, err)
	}
	if out.AccessToken == "" {
		return "", fmt.Errorf("log in as identity %q: infisical answered without an access token", c.clientID)
	}
	ttl := time.Duration(out.ExpiresIn) * time.Second
	c.mu.Lock()
	c.token, c.renewAt = out.AccessToken, time.Time{}
	if ttl > 0 {
		c.renewAt = start.Add(ttl - refreshMargin(ttl))
	}
	c.mu.Unlock()
	c.log.LogAttrs(ctx, slog.LevelInfo, "infisical login",
		slog.String(logkey.Identity, c.clientID), slog.Duration(logkey.ExpiresIn, ttl))
	return out.AccessToken, nil
}

// do sends one request to path (escaped; retried by retryablehttp) and decodes a 2xx JSON
// answer into out, or returns an *APIError for any other status. route is path's template,
// for metrics.
func (c *Client) do(ctx context.Context, method, route, path string, q url.Values, in any, token string, out any) error {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + path // path is escaped: a key may hold any character
	u.Path, _ = url.PathUnescape(u.RawPath)
	u.RawQuery = q.Encode()
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("infisical: %s %s: encode request: %w", method, path, err)
		}
		body = b
	}
	req := outbound.Request{Method: method, URL: u.String(), Route: route, Body: body,
		Header: http.Header{"Accept": {"application/json"}}, Kind: outbound.Idempotent}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}

	resp, err := c.out.Do(ctx, req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("infisical: %s %s: %w", method, path, ctxErr)
		}
		c.log.LogAttrs(ctx, slog.LevelInfo, "infisical request failed",
			slog.String(logkey.Method, method), slog.String(logkey.Path, path), slog.String(logkey.Error, err.Error()))
		return fmt.Errorf("infisical: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return decodeAPIError(method, path, resp.StatusCode, b, func(s string) string { return c.scrub(s, token) })
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxListBody)).Decode(out); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("infisical: %s %s: %w", method, path, ctxErr)
		}
		return fmt.Errorf("infisical: %s %s: decode response: %w", method, path, err)
	}
	return nil
}

// scrub removes the client secret and tokens from text the server sent back, in case a
// message echoes them.
func (c *Client) scrub(s, token string) string {
	c.mu.Lock()
	current := c.token
	c.mu.Unlock()
	for _, secret := range []string{c.clientSecret, token, current} {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "[redacted]")
		}
	}
	return s
}

// retryInRe finds the wait in Infisical's 429 message "Rate limit exceeded. Please try again
// in N seconds".
var retryInRe = regexp.MustCompile(`(?i)try again in (\d+) seconds?`)

// retryAfterFromMessage reads the wait of a 429 that has no Retry-After header from
// Infisical's message ("Rate limit exceeded. Please try again in N seconds"). The body stays
// readable for the error built if retries run out.
func retryAfterFromMessage(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests || resp.Body == nil {
		return 0, false
	}
	peek, _ := io.ReadAll(io.LimitReader(resp.Body, maxPeek))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(peek), resp.Body), resp.Body}
	m := retryInRe.FindSubmatch(peek)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}
