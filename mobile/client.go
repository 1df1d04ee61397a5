// Package mobile updates mobile remote config held in Flagsmith: a client for the parts of
// Flagsmith's Admin API the orchestrator needs, and the read-modify-write step that changes
// fields of a JSON document stored as a feature value (for example the feature
// "version_state", with per-platform min_version and latest_version) under the lock
// "mobile:flagsmith:<feature>".
//
// Flagsmith has no compare-and-set, so the step serializes the orchestrator's own writers
// with the lock, re-reads just before writing and starts over when the value moved, and
// reads back after writing. Environments with feature versioning v2 are written by creating
// and publishing a version; the others by updating the feature state. The value keeps its
// JSON type on every write (a JSON document stays a string value).
//
// The fake server for tests and the demo is mobile/flagsmithtest.
package mobile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/deploy-orchestrator/orchestrator/internal/trace"
)

// Headers that tie a request to the run and the lease it was made under (see WithTrace).
const (
	HeaderRun   = trace.HeaderRun
	HeaderFence = trace.HeaderFence
)

// slog attribute keys.
const (
	logKeyMethod  = "method"
	logKeyPath    = "path"
	logKeyStatus  = "status"
	logKeyAttempt = "attempt"
	logKeyWait    = "wait"
	logKeyRunID   = "run_id"
	logKeyFence   = "fence"
	logKeyLockKey = "lock_key"
	logKeyFeature = "feature"
	logKeyEnv     = "environment"
	logKeyReason  = "reason"
	logKeyChanged = "changed"
)

// Defaults of the retry budget for 429 and 5xx answers.
const (
	DefaultRetryMax      = 4
	DefaultRetryWaitMin  = 250 * time.Millisecond
	DefaultRetryWaitMax  = 5 * time.Second
	DefaultRetryAfterMax = 2 * time.Minute
)

// Sentinel errors. API errors match them through *APIError.Is.
var (
	// ErrNotFound: the environment, feature or feature state does not exist (HTTP 404, or
	// no exact match in a listing).
	ErrNotFound = errors.New("flagsmith: not found")
	// ErrUnauthorized: the organisation API key was refused (HTTP 401 or 403).
	ErrUnauthorized = errors.New("flagsmith: api key refused")
	// ErrLegacyWrite: a v2-versioned environment refused a direct feature state write
	// (HTTP 400, code direct_feature_state_write_not_allowed).
	ErrLegacyWrite = errors.New("flagsmith: direct feature state write not allowed on a v2-versioned environment")
	// ErrRateLimited: HTTP 429 after the retry budget was spent.
	ErrRateLimited = errors.New("flagsmith: rate limited")
	// ErrServer: HTTP 5xx after the retry budget was spent.
	ErrServer = errors.New("flagsmith: server error")
)

// APIError is a non-2xx answer from Flagsmith. It keeps the request's method and path
// (without query) and the server's message (the DRF "detail", or "field: message" pairs for
// validation errors). It matches ErrNotFound, ErrUnauthorized, ErrLegacyWrite,
// ErrRateLimited and ErrServer by status.
type APIError struct {
	Method string
	Path   string
	Status int
	// Code is DRF's error code when the body carries one (e.g. "direct_feature_state_write_not_allowed").
	Code   string
	Detail string
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("flagsmith %s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Is reports whether the error matches one of the package's sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
	case ErrLegacyWrite:
		return e.Status == http.StatusBadRequest &&
			(e.Code == codeDirectWriteNotAllowed || strings.Contains(e.Detail, "uses v2 feature versioning"))
	case ErrRateLimited:
		return e.Status == http.StatusTooManyRequests
	case ErrServer:
		return e.Status >= 500
	}
	return false
}

const codeDirectWriteNotAllowed = "direct_feature_state_write_not_allowed"

// Client talks to Flagsmith's Admin API with an organisation API key. It retries 429 (after
// Retry-After) and 5xx within a budget, fails at once on other 4xx with an *APIError, and
// sends the traceability headers of WithTrace. A Client is safe for concurrent use.
type Client struct {
	base          string
	apiKey        string
	userAgent     string
	logger        *slog.Logger
	hc            *http.Client
	retryMax      int
	retryWaitMin  time.Duration
	retryWaitMax  time.Duration
	retryAfterMax time.Duration
	rc            *retryablehttp.Client
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the underlying HTTP client (default: a pooled client with a 30s timeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithLogger sets the logger for retries (default: discard). The API key is never logged.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.logger = l } }

// WithVersion sets the version in the User-Agent header ("orchestrator/<version>").
func WithVersion(v string) Option { return func(c *Client) { c.userAgent = "orchestrator/" + v } }

// WithRetry sets the retry budget for 429 and 5xx answers and transport errors: at most
// retries further attempts, waiting between min and max (exponential with jitter) when the server
// gives no Retry-After.
func WithRetry(retries int, waitMin, waitMax time.Duration) Option {
	return func(c *Client) { c.retryMax, c.retryWaitMin, c.retryWaitMax = retries, waitMin, waitMax }
}

// WithRetryAfterMax caps how long one Retry-After is honored (default DefaultRetryAfterMax).
func WithRetryAfterMax(d time.Duration) Option { return func(c *Client) { c.retryAfterMax = d } }

// NewClient returns a client for the Flagsmith instance at baseURL (e.g.
// "https://api.flagsmith.com"), authenticating with the organisation API key apiKey.
func NewClient(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		base:          strings.TrimRight(baseURL, "/"),
		apiKey:        apiKey,
		userAgent:     "orchestrator/dev",
		logger:        slog.New(slog.DiscardHandler),
		retryMax:      DefaultRetryMax,
		retryWaitMin:  DefaultRetryWaitMin,
		retryWaitMax:  DefaultRetryWaitMax,
		retryAfterMax: DefaultRetryAfterMax,
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Timeout: 30 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	c.rc = &retryablehttp.Client{
		HTTPClient:   c.hc,
		Logger:       nil,
		RetryWaitMin: c.retryWaitMin,
		RetryWaitMax: c.retryWaitMax,
		RetryMax:     c.retryMax,
		CheckRetry:   retryablehttp.DefaultRetryPolicy,
		Backoff:      c.backoff,
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
		RequestLogHook: func(_ retryablehttp.Logger, r *http.Request, attempt int) {
			if attempt > 0 {
				c.logger.LogAttrs(r.Context(), slog.LevelWarn, "flagsmith request retried",
					slog.String(logKeyMethod, r.Method), slog.String(logKeyPath, r.URL.Path),
					slog.Int(logKeyAttempt, attempt+1))
			}
		},
	}
	return c
}

// String describes the client without its API key.
func (c *Client) String() string { return "flagsmith client for " + c.base }

// GoString keeps the API key out of %#v.
func (c *Client) GoString() string { return "mobile.Client{" + c.base + "}" }

// backoff honors Retry-After on 429 and 503 (capped by retryAfterMax) and otherwise waits
// exponentially between min and max with full jitter in the upper half.
func (c *Client) backoff(waitMin, waitMax time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return min(d, c.retryAfterMax)
		}
	}
	d := waitMin << min(attempt, 30)
	if d <= 0 || d > waitMax {
		d = waitMax
	}
	return d/2 + rand.N(d/2+1)
}

// parseRetryAfter reads a Retry-After header in seconds or as an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d, true
		}
		return 0, true
	}
	return 0, false
}

// WithTrace returns a context whose Flagsmith requests carry X-Orchestrator-Run: runID and
// X-Orchestrator-Fence: fence (each only when set), so a write can be traced to the run and
// the lease it was made under. It is the same trace as coolify.WithTrace (internal/trace).
// Step.Run sets it itself, with the fence of the mobile lease.
func WithTrace(ctx context.Context, runID string, fence int64) context.Context {
	return trace.With(ctx, runID, fence)
}

// do sends one API call and decodes a 2xx JSON answer into out (when not nil). path is the
// API path with its trailing slash; query may be nil.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return fmt.Errorf("flagsmith %s %s: encode request: %w", method, path, err)
		}
	}
	var rb any
	if raw != nil {
		rb = raw
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, u, rb)
	if err != nil {
		return fmt.Errorf("flagsmith %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Api-Key "+c.apiKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	trace.SetHeaders(ctx, req.Header)
	resp, err := c.rc.Do(req)
	if err != nil {
		// Transport errors from net/http name the URL, which never holds the API key.
		if cerr := context.Cause(ctx); cerr != nil && ctx.Err() != nil {
			return fmt.Errorf("flagsmith %s %s: %w", method, path, cerr)
		}
		return fmt.Errorf("flagsmith %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("flagsmith %s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return newAPIError(method, path, resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("flagsmith %s %s: decode response: %w", method, path, err)
	}
	return nil
}

// newAPIError builds an *APIError from a DRF error body: {"detail": "...", "code": "..."}
// or {"field": ["message", ...]}; anything else (an HTML page from a proxy) is cut short.
func newAPIError(method, path string, status int, body []byte) *APIError {
	e := &APIError{Method: method, Path: path, Status: status}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) == nil && obj != nil {
		var s string
		if raw, ok := obj["detail"]; ok && json.Unmarshal(raw, &s) == nil {
			e.Detail = s
		}
		if raw, ok := obj["code"]; ok && json.Unmarshal(raw, &s) == nil {
			e.Code = s
		}
		if e.Detail == "" {
			var parts []string
			for k, raw := range obj {
				var msgs []string
				if json.Unmarshal(raw, &msgs) == nil {
					parts = append(parts, k+": "+strings.Join(msgs, " "))
				}
			}
			slices.Sort(parts)
			e.Detail = strings.Join(parts, "; ")
		}
	} else {
		e.Detail = strings.TrimSpace(string(bytes.ToValidUTF8(body, nil)))
	}
	if len(e.Detail) > 300 {
		e.Detail = e.Detail[:300] + "…"
	}
	return e
}
