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
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
)

// Headers that tie a request to the run and the lease it was made under (coolify.WithTrace;
// Step.Run sets the trace itself, with the fence of the mobile lease).
const (
	HeaderRun   = trace.HeaderRun
	HeaderFence = trace.HeaderFence
)

// DefaultRetryPolicy is used unless WithRetry says otherwise.
var DefaultRetryPolicy = RetryPolicy{
	MaxRetries:    4,
	MinWait:       250 * time.Millisecond,
	MaxWait:       5 * time.Second,
	MaxRetryAfter: 2 * time.Minute,
}

// RetryPolicy bounds the retries of one call: at most MaxRetries further attempts after a 429,
// a 5xx or a transport error, waiting a jittered backoff between MinWait and MaxWait, or the
// server's Retry-After up to MaxRetryAfter (a longer one ends the call with that answer).
// The policy itself (what is retried after what) is internal/outbound's.
type RetryPolicy = outbound.Policy

// MetricsFunc is told about every HTTP attempt the client makes, as system "flagsmith".
type MetricsFunc = outbound.MetricsFunc

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
	Method     string
	Path       string
	StatusCode int
	// Code is DRF's error code when the body carries one (e.g. "direct_feature_state_write_not_allowed").
	Code    string
	Message string
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("flagsmith %s %s: %d %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Is reports whether the error matches one of the package's sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrLegacyWrite:
		return e.StatusCode == http.StatusBadRequest &&
			(e.Code == codeDirectWriteNotAllowed || strings.Contains(e.Message, "uses v2 feature versioning"))
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests
	case ErrServer:
		return e.StatusCode >= 500
	}
	return false
}

const codeDirectWriteNotAllowed = "direct_feature_state_write_not_allowed"

// Client talks to Flagsmith's Admin API with an organisation API key. Its requests go through
// internal/outbound: 429 (after Retry-After), 5xx and transport errors are retried within a
// budget, except for the one creating call, PublishVersion, which is never sent twice (see
// there); other 4xx fail at once with an *APIError; every request carries the User-Agent and
// the traceability headers of coolify.WithTrace. A Client is safe for concurrent use.
type Client struct {
	base    string
	apiKey  string
	version string
	logger  *slog.Logger
	hc      *http.Client
	policy  outbound.Policy
	metrics outbound.MetricsFunc
	out     *outbound.Client
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the underlying HTTP client (default: a pooled client with a 30s timeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithLogger sets the logger for retries (default: discard). The API key is never logged.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.logger = l } }

// WithVersion sets the version in the User-Agent header ("orchestrator/<version>").
func WithVersion(v string) Option { return func(c *Client) { c.version = v } }

// WithRetry sets the retry budget of every call (default DefaultRetryPolicy).
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.policy = p } }

// WithMetrics reports every HTTP attempt to fn, as system "flagsmith".
func WithMetrics(fn MetricsFunc) Option { return func(c *Client) { c.metrics = fn } }

// System is the name this client reports to metrics.
const System = "flagsmith"

// New returns a client for the Flagsmith instance at baseURL (e.g.
// "https://api.flagsmith.com"), authenticating with the organisation API key apiKey. It makes
// no request.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		base:   strings.TrimRight(baseURL, "/"),
		apiKey: apiKey,
		logger: slog.New(slog.DiscardHandler),
		policy: DefaultRetryPolicy,
	}
	for _, o := range opts {
		o(c)
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	c.out = outbound.New(outbound.Options{System: System, HTTPClient: c.hc, Policy: c.policy,
		Version: c.version, Logger: c.logger, Metrics: c.metrics})
	return c
}

// String describes the client without its API key.
func (c *Client) String() string { return "flagsmith client for " + c.base }

// GoString keeps the API key out of %#v.
func (c *Client) GoString() string { return "mobile.Client{" + c.base + "}" }

// do sends one API call and decodes a 2xx JSON answer into out (when not nil). path is the
// API path with its trailing slash; query may be nil. route is path's template, for metrics.
// A POST is a creating call: after an ambiguous failure it returns an error matching
// outbound.ErrOutcomeUnknown.
func (c *Client) do(ctx context.Context, method, route, path string, query url.Values, body, out any) error {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req := outbound.Request{Method: method, URL: u, Route: route,
		Header: http.Header{"Authorization": {"Api-Key " + c.apiKey}, "Accept": {"application/json"}}}
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("flagsmith %s %s: encode request: %w", method, path, err)
		}
		req.Body = raw
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.out.Do(ctx, req)
	if err != nil {
		// Transport errors name no URL and never the API key.
		return fmt.Errorf("flagsmith %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("flagsmith %s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.out.Settle(req, resp, newAPIError(method, path, resp.StatusCode, data))
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
// or {"field": <messages>}, where DRF gives a field's messages as a list, a plain string
// (ValidationError({"environment": "..."})) or, for nested serializers, objects and lists of
// them; anything else (an HTML page from a proxy) is cut short.
func newAPIError(method, path string, status int, body []byte) *APIError {
	e := &APIError{Method: method, Path: path, StatusCode: status}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) == nil && obj != nil {
		var s string
		if raw, ok := obj["detail"]; ok && json.Unmarshal(raw, &s) == nil {
			e.Message = s
		}
		if raw, ok := obj["code"]; ok && json.Unmarshal(raw, &s) == nil {
			e.Code = s
		}
		if e.Message == "" {
			var parts []string
			for k, raw := range obj {
				var v any
				if json.Unmarshal(raw, &v) == nil {
					parts = append(parts, k+": "+drfMessages(v))
				}
			}
			slices.Sort(parts)
			e.Message = strings.Join(parts, "; ")
		}
	} else {
		e.Message = strings.TrimSpace(string(bytes.ToValidUTF8(body, nil)))
	}
	if len(e.Message) > 300 {
		e.Message = e.Message[:300] + "…"
	}
	return e
}

// drfMessages flattens the messages of one field of a DRF error body.
func drfMessages(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var out []string
		for _, e := range x {
			if m := drfMessages(e); m != "" {
				out = append(out, m)
			}
		}
		return strings.Join(out, " ")
	case map[string]any:
		var out []string
		for k, e := range x {
			if m := drfMessages(e); m != "" {
				out = append(out, k+": "+m)
			}
		}
		if len(out) == 0 {
			return ""
		}
		slices.Sort(out)
		return "{" + strings.Join(out, "; ") + "}"
	}
	return ""
}
