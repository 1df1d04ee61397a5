// Package client is a Go client of the orchestrator daemon's HTTP API (see
// docs/operations.md, "HTTP API"): ask for a run and follow its events, read, list and
// cancel runs, read the services view, list, freeze, unfreeze and force-release locks, and
// probe readiness. The orchestrator command's trigger, runs, locks, services and health are
// built on it, and so can any Go program be.
//
// Each request carries the token its route needs: the one given to New, or, when that is
// empty, the one WithTokens picks for the route's Access level. Reads are retried on a
// connection error or a 5xx (3 times, with backoff: WithRetries), and Follow reconnects to a dropped
// event stream. A call fails with an *APIError when the daemon answered it with an error, an
// *UnreachableError when no answer came, an *UnreadableError when the answer could not be
// read, and a *URLError when the daemon's URL is malformed.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Access is what a route requires of the token, as the API's route map names it.
type Access int

// Access levels. A read takes any token, the audit log the read or the admin token, a
// decision on a run (approve, reject) an approver's or the admin token.
const (
	Read Access = iota
	Trigger
	Admin
	Audit
	Approve
)

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	base      string
	token     string
	tokenFor  func(Access) string
	userAgent string
	http      *retryablehttp.Client
}

// Option configures a Client.
type Option func(*Client)

// WithTokens sets where the token of a request comes from when New was given none: fn
// returns the token for a route of that access level ("" sends none).
func WithTokens(fn func(Access) string) Option { return func(c *Client) { c.tokenFor = fn } }

// WithUserAgent sets the User-Agent header (default "orchestrator-client").
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithRetries sets how many times a request is sent again after a connection error or a 5xx
// answer (default 3; 0 sends each once, as a health probe wants).
func WithRetries(n int) Option { return func(c *Client) { c.http.RetryMax = n } }

// New returns a client of the daemon at baseURL (e.g. "http://127.0.0.1:8080") sending token
// on every request (when not empty). It makes no request; a malformed baseURL makes every
// call fail with a *URLError.
func New(baseURL, token string, opts ...Option) *Client {
	h := retryablehttp.NewClient()
	h.Logger = nil
	h.RetryMax = 3
	h.RetryWaitMin = 200 * time.Millisecond
	h.RetryWaitMax = 2 * time.Second
	h.ErrorHandler = retryablehttp.PassthroughErrorHandler // keep the last answer's message
	c := &Client{base: strings.TrimRight(baseURL, "/"), token: token, userAgent: "orchestrator-client", http: h}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL is the daemon's URL, as given to New without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

func (c *Client) tokenOf(level Access) string {
	if c.token != "" || c.tokenFor == nil {
		return c.token
	}
	return c.tokenFor(level)
}

func (c *Client) request(ctx context.Context, method, path string, level Access, body any) (*retryablehttp.Request, error) {
	var rd any
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = data
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, &URLError{Method: method, URL: c.base + path, Err: err}
	}
	if tok := c.tokenOf(level); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// call sends one request and decodes a 2xx answer into out (when not nil).
func (c *Client) call(ctx context.Context, method, path string, level Access, body any, hdr http.Header, out any) error {
	req, err := c.request(ctx, method, path, level, body)
	if err != nil {
		return err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.unreachable(method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return newAPIError(method, path, level, resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return &UnreadableError{Method: method, Path: path, Err: err}
	}
	return nil
}

// unreachable wraps a failure to get any answer from the daemon; a canceled ctx stays itself.
func (c *Client) unreachable(method, path string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return &UnreachableError{Method: method, URL: c.base + path, Err: err}
}

// newAPIError reads an error answer: the API's {"error": {"code", "message", "field"}}, or
// the body's text when it is not that.
func newAPIError(method, path string, level Access, resp *http.Response) *APIError {
	var e struct {
		Error struct {
			Code, Message, Field string
		} `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ae := &APIError{Method: method, Path: path, StatusCode: resp.StatusCode, Status: resp.Status, Access: level,
		Message: strings.TrimSpace(string(data))}
	if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
		ae.Code, ae.Message, ae.Field = e.Error.Code, e.Error.Message, e.Error.Field
	}
	return ae
}

func runPath(id string) string { return "/v1/runs/" + url.PathEscape(id) }

func lockPath(key, action string) string { return "/v1/locks/" + url.PathEscape(key) + "/" + action }
