// Package coolify is a client for the Coolify REST API (`<instance>/api/v1`), limited to what
// the deploy phases need: read applications and services, list and write their environment
// variables, set an application's image tag, trigger, watch and cancel deployments, restart.
//
// It was written against Coolify 4.3.x (the 4.3.11 development tip; behaviour of older
// releases is noted where it differs) and follows the server's code where it disagrees with
// the published OpenAPI spec. The token it is given needs the abilities
//
//   - read: every GET (applications, services, env vars, deployments);
//   - write: env var create/update/delete and the application PATCH that sets the image tag;
//   - deploy: POST /deploy, deployment cancel, application and service restart;
//   - read:sensitive: to read env var values back (without it values come back hidden, see
//     [EnvVar.ValueHidden]); it only takes effect when the token's user is a team admin/owner.
//
// or root. Abilities do not imply each other: a token with write but without read cannot read.
//
// The server's traps are handled here, not by callers: the env PATCH that wipes an omitted
// value and resets omitted flags ([Client.UpsertEnvs] always sends the value and every flag),
// preview twins in env listings ([Client.ListEnvs] drops them), and the deploy that is silently
// dropped while the application already has a queued or running deployment ([Client.Deploy]
// returns [ErrDeployDeduplicated] instead of a deployment that does not exist).
//
// Every request carries `User-Agent: orchestrator/<version>`; requests made under a context from
// [WithTrace] also carry `X-Orchestrator-Run` and `X-Orchestrator-Fence`, so Coolify's access log
// or a proxy can tell which run and which lease made each change.
//
// A client given a limiter ([WithLimiter], e.g. an internal/pacing Pacer shared by every client
// of one instance and token) waits for it before each attempt, so a budget such as Coolify's
// throttle of 200 requests per minute per user is met instead of answered with 429s. Reads
// (GET: deployment status, the snapshots and re-reads around every write) and deployment
// cancels wait with priority ([Urgent]); writes, deploys and restarts with normal priority. A
// caller raises any call to priority with [Urgent] (the engine does for restores).
//
// Failures are *[APIError] values (method, path, status, the server's message and field errors)
// that match the sentinel errors of this package with errors.Is. Requests go through
// internal/outbound, which holds the retry policy of every outside client: 429 and 503 are
// retried after their Retry-After (seconds or HTTP date), other 5xx answers and connection
// errors with jittered exponential backoff, all within a budget ([WithRetry]); other 4xx answers
// fail at once. A POST (create env, deploy, restart, start, cancel) is not idempotent: it is
// retried only when the failure shows Coolify did not act (429, 503, connection refused); after
// an ambiguous failure (another 5xx, a connection lost after sending) its error also matches
// outbound.ErrOutcomeUnknown, and the caller must read the state to learn what happened. Env var
// values never appear in errors or logs.
package coolify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
)

// System is the name this client reports to a [MetricsFunc].
const System = "coolify"

// Headers every request made under [WithTrace] carries.
const (
	HeaderRun   = trace.HeaderRun
	HeaderFence = trace.HeaderFence
)

// MetricsFunc is told about every HTTP attempt the client makes (retries included): the system
// ("coolify"), the method, the route template (e.g. "/applications/{uuid}/envs", so label
// cardinality stays bounded), the response status (0 when no response arrived) and the time the
// attempt took. It must be safe for concurrent use and must not block.
type MetricsFunc = outbound.MetricsFunc

// RetryPolicy bounds the retries of one call. A call makes at most 1+MaxRetries attempts. Between
// attempts it waits a jittered exponential backoff from MinWait doubling up to MaxWait, or, after
// a 429 or 503, the server's Retry-After. A Retry-After longer than MaxRetryAfter ends the call at
// once with the 429/503 error (its RetryAfter field tells the caller how long the server asked
// for). The policy itself (what is retried after what) is internal/outbound's.
type RetryPolicy = outbound.Policy

// DefaultRetryPolicy is used unless [WithRetry] says otherwise.
var DefaultRetryPolicy = RetryPolicy{
	MaxRetries:    4,
	MinWait:       250 * time.Millisecond,
	MaxWait:       5 * time.Second,
	MaxRetryAfter: 60 * time.Second,
}

// DefaultPollInterval is the shortest tick of [Client.WaitDeployment] unless
// [WithPollInterval] says otherwise.
const DefaultPollInterval = 2 * time.Second

// Client talks to one Coolify instance with one API token. It is safe for concurrent use.
type Client struct {
	base    *url.URL // instance URL + /api/v1, no trailing slash
	token   string
	out     *outbound.Client
	httpc   *http.Client
	limiter outbound.Limiter
	logger  *slog.Logger
	version string
	metrics MetricsFunc
	retry   RetryPolicy
	poll    time.Duration
	// abilities caches the answer of Abilities.
	abilities abilityCache
	// board shares the look at the active deployments; watch keeps what the waits learn.
	board Board
	watch watch
	// purposes is told the purpose of every attempt (WithPurposeMetrics).
	purposes func(Purpose)
	// appIDs maps an application's uuid to its numeric id, as its deployments show it (see
	// ActiveDeployments). An id never changes.
	appIDs sync.Map
}

// Option configures a [Client].
type Option func(*Client)

// WithHTTPClient makes the client send through hc (its Transport and Timeout are used; the
// client wraps the transport to measure attempts). Default: a pooled client with a 30 s timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.httpc = hc } }

// WithRetry sets the retry budget of every call.
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// WithLogger sets the logger for debug records of attempts and retries. Default (and nil):
// discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *Client) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithVersion sets the version in the `User-Agent: orchestrator/<version>` header. Default "dev".
func WithVersion(v string) Option {
	return func(c *Client) { c.version = v }
}

// WithLimiter paces the client's attempts (default: none). The limiter is asked with the
// call's priority: high for reads, cancels and calls under [Urgent], normal for the others.
func WithLimiter(l outbound.Limiter) Option { return func(c *Client) { c.limiter = l } }

// WithMetrics registers fn to be told about every HTTP attempt.
func WithMetrics(fn MetricsFunc) Option { return func(c *Client) { c.metrics = fn } }

// WithPollInterval sets the shortest tick of [Client.WaitDeployment] (see [Board]).
// Default (and for d <= 0): [DefaultPollInterval].
func WithPollInterval(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.poll = d
		}
	}
}

// New returns a client for the Coolify instance at baseURL (e.g. "https://coolify.example.com";
// the client appends "/api/v1") authenticating with token (the whole "<id>|<secret>" string).
// New does not contact the server. A malformed baseURL makes every call fail.
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		token:   token,
		logger:  slog.New(slog.DiscardHandler),
		version: "dev",
		retry:   DefaultRetryPolicy,
		poll:    DefaultPollInterval,
	}
	for _, o := range opts {
		o(c)
	}
	if c.board == nil {
		c.board = &LocalBoard{}
	}
	if c.limiter != nil || c.purposes != nil {
		c.limiter = measuredLimiter{l: c.limiter, purposes: c.purposes}
	}
	if u, err := url.Parse(strings.TrimRight(baseURL, "/")); err == nil && u.Scheme != "" && u.Host != "" {
		u.Path = strings.TrimRight(u.Path, "/") + "/api/v1"
		u.RawQuery, u.Fragment = "", ""
		c.base = u
	}
	c.out = outbound.New(outbound.Options{System: System, HTTPClient: c.httpc, Policy: c.retry,
		Version: c.version, Logger: c.logger, Metrics: c.metrics, Limiter: c.limiter, Throttled: throttled})
	return c
}

// BaseURL is the API base the client sends to ("<instance>/api/v1"), or "" when the URL given to
// New was malformed.
func (c *Client) BaseURL() string {
	if c.base == nil {
		return ""
	}
	return c.base.String()
}

// WithTrace returns a context under which every request carries `X-Orchestrator-Run: runID` and
// `X-Orchestrator-Fence: fence` (the fence of the lease the run acts under; 0 omits the header).
// The same context traces Flagsmith requests too (internal/trace).
func WithTrace(ctx context.Context, runID string, fence int64) context.Context {
	return trace.With(ctx, runID, fence)
}

// Urgent returns a context under which every call waits on the client's limiter with high
// priority, as reads and cancels always do: for calls that put things back (restores) or that
// a lease holder needs before it can let go.
func Urgent(ctx context.Context) context.Context {
	return outbound.WithPriority(ctx, outbound.PriorityHigh)
}

// TraceFrom returns the run ID and fence attached by [WithTrace], and whether there were any.
func TraceFrom(ctx context.Context) (runID string, fence int64, ok bool) { return trace.From(ctx) }

// call describes one API call.
type call struct {
	method string
	route  string // template for metrics and logs, e.g. "/applications/{uuid}"
	path   string // escaped path below /api/v1
	query  url.Values
	body   any // JSON-encoded when non-nil
	noAuth bool
	// urgent makes the call wait on the limiter with high priority (GETs always do).
	urgent bool
}

// do performs the call and decodes a 2xx JSON body into out (when out is non-nil). Non-2xx
// answers become *APIError; transport failures are returned wrapped with method and path.
func (c *Client) do(ctx context.Context, k call, out any) error {
	if c.base == nil {
		return fmt.Errorf("%s %s: %w", k.method, k.path, ErrBadBaseURL)
	}
	u := *c.base
	u.RawPath = c.base.Path + k.path // k.path is escaped
	if p, err := url.PathUnescape(u.RawPath); err == nil {
		u.Path = p
	}
	if len(k.query) > 0 {
		u.RawQuery = k.query.Encode()
	}
	fullPath := u.Path
	req := outbound.Request{Method: k.method, URL: u.String(), Route: k.route,
		Header: http.Header{"Accept": {"application/json"}}}
	if k.body != nil {
		b, err := json.Marshal(k.body)
		if err != nil {
			return fmt.Errorf("%s %s: encode body: %w", k.method, fullPath, err)
		}
		req.Body = b
		req.Header.Set("Content-Type", "application/json")
	}
	if !k.noAuth {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}

	if (k.urgent || k.method == http.MethodGet) && outbound.PriorityFrom(ctx) < outbound.PriorityHigh {
		ctx = Urgent(ctx)
	}
	resp, err := c.out.Do(ctx, req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("%s %s: %w", k.method, fullPath, ctxErr)
		}
		c.logger.LogAttrs(ctx, slog.LevelDebug, "coolify request failed",
			slog.String(logkey.Method, k.method), slog.String(logkey.Route, k.route),
			slog.String(logkey.Error, err.Error()))
		return fmt.Errorf("%s %s: %w: %w", k.method, fullPath, ErrUnavailable, err)
	}
	defer resp.Body.Close()
	attrs := []slog.Attr{
		slog.String(logkey.Method, k.method), slog.String(logkey.Route, k.route),
		slog.String(logkey.Path, fullPath), slog.Int(logkey.Status, resp.StatusCode),
	}
	if runID, fence, traced := trace.From(ctx); traced {
		attrs = append(attrs, slog.String(logkey.RunID, runID), slog.Int64(logkey.Fence, fence))
	}
	c.logger.LogAttrs(ctx, slog.LevelDebug, "coolify request", attrs...)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.out.Settle(req, resp, c.apiError(k.method, fullPath, resp))
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%s %s: read response: %w: %w", k.method, fullPath, ErrUnavailable, err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode %d response: %w", k.method, fullPath, resp.StatusCode, err)
	}
	return nil
}

const maxBody = 32 << 20

// throttled says whether a 429 is Laravel's throttle ("Too Many Attempts.": the token's
// user spent API_RATE_LIMIT for this minute), which holds the client's pacer until its
// Retry-After, rather than POST /deploy's full deploy queue, which refuses deploys only. It
// reads the message and puts the body back.
func throttled(resp *http.Response) bool {
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(data), resp.Body), resp.Body}
	if err != nil {
		return false
	}
	var e APIError
	e.decodeBody(data)
	return !strings.Contains(strings.ToLower(e.Message), queueFullMessage)
}

// queueFullMessage is in the message of the 429 POST /deploy answers when the server's
// deploy queue is full (deployment_queue_limit rows queued).
const queueFullMessage = "queue is full"

func (c *Client) apiError(method, path string, resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := &APIError{Method: method, Path: path, StatusCode: resp.StatusCode}
	if d, ok := outbound.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		e.RetryAfter = d
	}
	e.decodeBody(data)
	return e
}
