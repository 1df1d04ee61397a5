// Package github reports a run's deployment to GitHub: a deployment, its statuses and,
// optionally, a commit status, through GitHub's REST API (github.com or GitHub Enterprise
// Server), authenticated with a token or as a GitHub App installation.
//
// It makes one HTTP attempt per request and does not retry: the caller (the daemon's outbox)
// does, asking [APIError.Retryable] how long to wait. An error that is not an *APIError (a
// connection refused or reset, a timeout, a token exchange that got no answer) is retryable
// too. Both methods are safe to call again after any failure: [Client.CreateDeployment] finds
// the deployment an earlier attempt created, by the run ID in its payload, and
// [Client.SetDeploymentState] posts a status, which GitHub accepts in any order and any
// number of times.
//
// The server's traps, handled here:
//
//   - A deployment is refused with 409 when a commit status of the commit is not success,
//     unless required_contexts is an empty list: the client always sends [].
//   - auto_merge defaults to true and merges the default branch into the ref: the client
//     always sends false, and deploys the commit SHA, never a branch.
//   - auto_inactive defaults to true and marks older deployments of the environment
//     inactive behind the caller's back: the client sends false; the caller marks a replaced
//     deployment inactive itself with [orchestrator.HostInactive].
//   - go-github builds paths with fmt.Sprintf("repos/%v/%v/…") without escaping: every value
//     is checked with [orchestrator.ValidHostDeployment] first (path segments of
//     [A-Za-z0-9_.-], never "." or ".."), and the IDs are numbers.
//   - A rate limit answers 403 or 429: primary (x-ratelimit-remaining: 0, wait until
//     x-ratelimit-reset) and secondary (retry-after). After a primary limit go-github refuses
//     further calls until the reset without sending them; they come back as the same
//     retryable *APIError.
//   - Status descriptions are cut at GitHub's 140 characters (a longer one is refused, 422).
//
// Tokens (the configured one, the App's JWT and its installation tokens) never appear in
// errors or logs.
//
// The fake server for tests and the demo is github/githubtest.
package github

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/bradleyfalzon/ghinstallation/v2"
	gh88 "github.com/google/go-github/v88/github" // ghinstallation's types
	gogithub "github.com/google/go-github/v89/github"

	"github.com/deploy-orchestrator/orchestrator/internal/hostclient"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// System is the name this client reports to a [MetricsFunc] and in logs.
const System = "github"

// DefaultBaseURL is github.com's API. GitHub Enterprise Server's is "https://HOST/api/v3/".
const DefaultBaseURL = "https://api.github.com/"

// MaxDescription is GitHub's limit on a deployment status or commit status description.
const MaxDescription = 140

// MetricsFunc is told about every HTTP attempt (token exchanges included), as system "github".
type MetricsFunc = outbound.MetricsFunc

// Auth is how the client authenticates: [Token] or [App].
type Auth interface {
	// transport wraps next with the authentication; apiBase is the API base URL.
	transport(next http.RoundTripper, apiBase string) (http.RoundTripper, error)
}

// Token authenticates with a personal access token, an OAuth token or an installation token
// obtained elsewhere, sent as "Authorization: Bearer <token>".
func Token(token string) Auth { return tokenAuth(token) }

type tokenAuth string

func (t tokenAuth) transport(next http.RoundTripper, _ string) (http.RoundTripper, error) {
	if t == "" {
		return nil, errors.New("empty token")
	}
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+string(t))
		return next.RoundTrip(r)
	}), nil
}

// App authenticates as a GitHub App installation: a JWT signed with the App's private key
// (PEM, PKCS#1 or PKCS#8 RSA) is exchanged for an installation token
// (POST /app/installations/{installation_id}/access_tokens) limited to deployments:write,
// statuses:write and metadata:read, which is cached and renewed a minute before it expires.
func App(appID, installationID int64, privateKeyPEM []byte) Auth {
	return appAuth{appID: appID, installationID: installationID, key: privateKeyPEM}
}

type appAuth struct {
	appID, installationID int64
	key                   []byte
}

func (a appAuth) transport(next http.RoundTripper, apiBase string) (http.RoundTripper, error) {
	if a.appID <= 0 || a.installationID <= 0 {
		return nil, errors.New("app ID and installation ID must be positive")
	}
	tr, err := ghinstallation.New(next, a.appID, a.installationID, a.key)
	if err != nil {
		// The library's message names the key's problem, never the key.
		return nil, fmt.Errorf("github app private key: %w", err)
	}
	tr.BaseURL = strings.TrimSuffix(apiBase, "/")
	// The token gets only what the client needs (least privilege), and the request a body
	// (without options the library sends JSON null).
	tr.InstallationTokenOptions = &gh88.InstallationTokenOptions{Permissions: &gh88.InstallationPermissions{
		Deployments: gh88.Ptr("write"), Statuses: gh88.Ptr("write"), Metadata: gh88.Ptr("read"),
	}}
	return tr, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Option configures a [Client].
type Option func(*options)

type options struct {
	httpc   *http.Client
	logger  *slog.Logger
	version string
	metrics MetricsFunc
}

// WithHTTPClient sends through hc (its Transport and Timeout are used; redirects are followed
// on the API's host only). Default: a pooled client with a 30 s timeout.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.httpc = hc } }

// WithLogger sets the logger for debug records of requests (never a header or a body).
// Default (and nil): discard.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithVersion sets the version in the `User-Agent: orchestrator/<version>` header. Default "dev".
func WithVersion(v string) Option { return func(o *options) { o.version = v } }

// WithMetrics registers fn to be told about every HTTP attempt.
func WithMetrics(fn MetricsFunc) Option { return func(o *options) { o.metrics = fn } }

// Client talks to one GitHub API with one identity. It is safe for concurrent use.
type Client struct {
	gh       *gogithub.Client
	base     string // API base URL, with a trailing slash
	basePath string // its path ("/" or "/api/v3/")
	logger   *slog.Logger
}

// New returns a client for the GitHub API at baseURL ("" for [DefaultBaseURL]; GitHub
// Enterprise Server: "https://HOST/api/v3/") authenticating with auth. It fails for a
// malformed base URL, an empty token, or an App key that is not an RSA private key. New does
// not contact the server.
func New(baseURL string, auth Auth, opts ...Option) (*Client, error) {
	o := options{logger: slog.New(slog.DiscardHandler), version: "dev"}
	for _, opt := range opts {
		opt(&o)
	}
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	u, err := hostclient.BaseURL(System, baseURL)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	base := u.String()
	hc := hostclient.HTTPClient(o.httpc, System, o.version, o.metrics, routeOf)
	if auth == nil {
		return nil, errors.New("github: no auth")
	}
	authed, err := auth.transport(hc.Transport, base)
	if err != nil {
		return nil, fmt.Errorf("github auth: %w", err)
	}
	hc.Transport = authed
	gh, err := gogithub.NewClient(gogithub.WithHTTPClient(hc), gogithub.WithURLs(&base, &base),
		gogithub.WithUserAgent(hostclient.UserAgent(o.version)))
	if err != nil {
		return nil, fmt.Errorf("github client: %w", err)
	}
	return &Client{gh: gh, base: base, basePath: u.Path, logger: o.logger}, nil
}

// BaseURL is the API base the client sends to, with a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// routeOf turns a request path into its route template, so metric labels stay bounded.
func routeOf(_, path string) string {
	switch {
	case strings.HasSuffix(path, "/access_tokens"):
		return "/app/installations/{installation_id}/access_tokens"
	case strings.Contains(path, "/statuses/"):
		return "/repos/{owner}/{repo}/statuses/{sha}"
	case strings.HasSuffix(path, "/statuses"):
		return "/repos/{owner}/{repo}/deployments/{deployment_id}/statuses"
	case strings.HasSuffix(path, "/deployments"):
		return "/repos/{owner}/{repo}/deployments"
	}
	return "other"
}

// debug logs one request's outcome.
func (c *Client) debug(ctx context.Context, method, route string, status int) {
	c.logger.LogAttrs(ctx, slog.LevelDebug, "github request",
		slog.String(logkey.Method, method), slog.String(logkey.Route, route), slog.Int(logkey.Status, status))
}
