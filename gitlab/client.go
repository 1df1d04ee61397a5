// Package gitlab reports a run's deployment to GitLab: a deployment of an environment and,
// optionally, a commit status, through GitLab's REST API (v4), authenticated with a personal,
// project or group access token (PRIVATE-TOKEN) or a CI job token (JOB-TOKEN).
//
// It makes one HTTP attempt per request and does not retry (client-go's retries and its
// adaptive rate limiter are turned off): the caller (the daemon's outbox) does, asking
// [APIError.Retryable] how long to wait. An error that is not an *APIError (no answer at all)
// is retryable too. Both methods are safe to call again after any failure.
//
// The server's traps, handled here:
//
//   - The API creates and updates a deployment only as running, success, failed or canceled:
//     "created" (queued) cannot be sent. [Client.CreateDeployment] creates it running;
//     queued then changes nothing on the deployment (only the commit status says pending).
//   - GitLab refuses a transition its state machine has not (running→running,
//     success→running, success→success…) with 400. Setting the state a deployment already
//     has is what a retry after a lost answer does, so a 400 is followed by a read of the
//     deployment, and the call succeeds when it already shows the state asked for. The same
//     holds for a commit status: "Cannot transition status via :run from :running" means
//     the status is already running.
//   - GitLab has no inactive deployment state: inactive makes no call (GitLab itself shows
//     an older deployment as replaced once a newer one of the environment succeeds).
//   - Deployments carry no payload or description where a run ID could live: a deployment
//     is found again by commit, ref and environment among the unfinished (created or
//     running) deployments GitLab created through the API (no CI job), newest first.
//   - Deployments created by a CI job cannot be updated through the API (403).
//   - The project is addressed by its URL-escaped path ("group%2Fsub%2Fproject", dots
//     escaped too); client-go escapes every path value, and every value is checked with
//     [orchestrator.ValidHostDeployment] first.
//   - Rate limits answer 429 with Retry-After and RateLimit-Reset.
//
// The token never appears in errors or logs. The fake server for tests and the demo is
// gitlab/gitlabtest.
package gitlab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	gogitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/deploy-orchestrator/orchestrator/internal/hostclient"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// System is the name this client reports to a [MetricsFunc] and in logs.
const System = "gitlab"

// MaxDescription is the longest commit status description GitLab stores (characters).
const MaxDescription = 255

// MetricsFunc is told about every HTTP attempt, as system "gitlab".
type MetricsFunc = outbound.MetricsFunc

// Auth is how the client authenticates: [Token] or [JobToken].
type Auth interface {
	client(baseURL string, opts ...gogitlab.ClientOptionFunc) (*gogitlab.Client, error)
}

// Token authenticates with a personal, project or group access token (PRIVATE-TOKEN).
func Token(token string) Auth { return tokenAuth(token) }

type tokenAuth string

func (t tokenAuth) client(base string, opts ...gogitlab.ClientOptionFunc) (*gogitlab.Client, error) {
	if t == "" {
		return nil, errors.New("empty token")
	}
	return gogitlab.NewClient(string(t), append(opts, gogitlab.WithBaseURL(base))...)
}

// JobToken authenticates with a CI job token (JOB-TOKEN), for an orchestrator driven from a
// pipeline; the project must allow the job token to reach the deployments API.
func JobToken(token string) Auth { return jobAuth(token) }

type jobAuth string

func (t jobAuth) client(base string, opts ...gogitlab.ClientOptionFunc) (*gogitlab.Client, error) {
	if t == "" {
		return nil, errors.New("empty job token")
	}
	return gogitlab.NewJobClient(string(t), append(opts, gogitlab.WithBaseURL(base))...)
}

// Option configures a [Client].
type Option func(*options)

type options struct {
	httpc   *http.Client
	logger  *slog.Logger
	version string
	metrics MetricsFunc
}

// WithHTTPClient sends through hc (its Transport and Timeout are used; redirects are followed
// on the instance's host only). Default: a pooled client with a 30 s timeout.
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

// Client talks to one GitLab instance with one token. It is safe for concurrent use.
type Client struct {
	gl     *gogitlab.Client
	base   string // instance URL + /api/v4/
	logger *slog.Logger
}

// New returns a client for the GitLab instance at baseURL (e.g. "https://gitlab.example.com";
// the client appends "/api/v4") authenticating with auth. It fails for a malformed base URL
// or an empty token. New does not contact the server.
func New(baseURL string, auth Auth, opts ...Option) (*Client, error) {
	o := options{logger: slog.New(slog.DiscardHandler), version: "dev"}
	for _, opt := range opts {
		opt(&o)
	}
	u, err := hostclient.BaseURL(System, baseURL)
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/api/v4") + "/api/v4/"
	base := u.String()
	hc := hostclient.HTTPClient(o.httpc, System, o.version, o.metrics, routeOf)
	if auth == nil {
		return nil, errors.New("gitlab: no auth")
	}
	gl, err := auth.client(base,
		gogitlab.WithHTTPClient(hc),
		gogitlab.WithoutRetries(),
		gogitlab.WithCustomLimiter(noLimit{}),
		gogitlab.WithUserAgent(hostclient.UserAgent(o.version)),
		gogitlab.WithURLWarningLogger(o.logger),
	)
	if err != nil {
		return nil, fmt.Errorf("gitlab client: %w", err)
	}
	return &Client{gl: gl, base: base, logger: o.logger}, nil
}

// BaseURL is the API base the client sends to ("<instance>/api/v4/").
func (c *Client) BaseURL() string { return c.base }

// noLimit turns client-go's adaptive limiter off: pacing is the caller's.
type noLimit struct{}

func (noLimit) Wait(context.Context) error { return nil }

// routeOf turns a request path into its route template, so metric labels stay bounded.
func routeOf(_, path string) string {
	switch {
	case strings.Contains(path, "/statuses/"):
		return "/projects/:id/statuses/:sha"
	case strings.HasSuffix(path, "/deployments"):
		return "/projects/:id/deployments"
	case strings.Contains(path, "/deployments/"):
		return "/projects/:id/deployments/:deployment_id"
	}
	return "other"
}

func (c *Client) debug(ctx context.Context, method, route string, status int) {
	c.logger.LogAttrs(ctx, slog.LevelDebug, "gitlab request",
		slog.String(logkey.Method, method), slog.String(logkey.Route, route), slog.Int(logkey.Status, status))
}
