package github

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	gogithub "github.com/google/go-github/v89/github"

	"github.com/deploy-orchestrator/orchestrator/internal/hostclient"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// Sentinel errors. An *APIError matches the one of its status with errors.Is.
var (
	// ErrUnauthorized: 401, the token (or the App's JWT) was refused.
	ErrUnauthorized = errors.New("github: unauthorized")
	// ErrNotFound: 404, the repository, the deployment or the App installation does not
	// exist or the identity cannot see it.
	ErrNotFound = errors.New("github: not found")
	// ErrValidation: 422, GitHub refused a value (an unknown commit, a state not in its list).
	ErrValidation = errors.New("github: validation failed")
	// ErrRateLimited: a primary or secondary rate limit (403 or 429).
	ErrRateLimited = errors.New("github: rate limited")
	// ErrServer: 5xx.
	ErrServer = errors.New("github: server error")
)

// APIError is a non-2xx answer from GitHub, or go-github's refusal to send while a rate limit
// it saw has not reset. Message and Errors are the server's words; they never hold a token.
type APIError struct {
	Method     string // HTTP method
	Path       string // request path, without query
	StatusCode int
	Message    string
	// Errors are a 422's field errors ("field" or "resource" → "code: message").
	Errors map[string][]string
	// RetryAfter is how long GitHub asked to wait: retry-after, or until x-ratelimit-reset
	// when a primary rate limit is spent (0 if it said nothing).
	RetryAfter time.Duration
	// RateLimited says the answer is a primary or secondary rate limit (403 or 429).
	RateLimited bool
}

// Error reads like "POST /repos/o/r/deployments: 422 Validation Failed (ref: invalid: …)".
func (e *APIError) Error() string {
	return hostclient.ErrorText(System, e.Method, e.Path, e.StatusCode, e.Message, e.Errors, e.RetryAfter)
}

// Is matches the sentinel of the status class.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrValidation:
		return e.StatusCode == http.StatusUnprocessableEntity
	case ErrRateLimited:
		return e.RateLimited
	case ErrServer:
		return e.StatusCode >= 500
	}
	return false
}

// Retryable says whether the same call may succeed later, and how long to wait first (0:
// the caller's own backoff): yes for 5xx (but 501), 429 and the rate limits (403 or 429 with
// x-ratelimit-remaining: 0, or a secondary limit), waiting RetryAfter; no for the other 4xx
// (401, 404, 409, 422…), which answer the same until something else changes. A secondary
// limit or a 429 without retry-after waits a minute, as GitHub asks. A failure that
// is not an *APIError (no answer at all) is retryable too.
func (e *APIError) Retryable() (after time.Duration, ok bool) {
	switch {
	case e.RateLimited, e.StatusCode == http.StatusTooManyRequests:
		return e.RetryAfter, true
	case e.StatusCode >= 500 && e.StatusCode != http.StatusNotImplemented:
		return e.RetryAfter, true
	}
	return 0, false
}

// secondaryWait is how long to wait after a secondary rate limit that names no time: "at
// least one minute", GitHub's docs say.
const secondaryWait = time.Minute

// apiError turns go-github's error for a call into an *APIError, or returns it as it is (a
// transport failure, wrapped with method and path, its URL dropped).
func apiError(method, path string, err error) error {
	if err == nil {
		return nil
	}
	e := &APIError{Method: method, Path: path}
	var (
		rl   *gogithub.RateLimitError
		ab   *gogithub.AbuseRateLimitError
		er   *gogithub.ErrorResponse
		acc  *gogithub.AcceptedError
		hErr *ghinstallation.HTTPError
	)
	switch {
	case errors.As(err, &rl):
		e.StatusCode, e.Message, e.RateLimited = statusOf(rl.Response, http.StatusForbidden), rl.Message, true
		e.RetryAfter = max(time.Until(rl.Rate.Reset.Time), 0)
		if d, ok := retryAfter(rl.Response); ok {
			e.RetryAfter = d
		}
		return e
	case errors.As(err, &ab):
		e.StatusCode, e.Message, e.RateLimited = statusOf(ab.Response, http.StatusForbidden), ab.Message, true
		e.RetryAfter = secondaryWait
		if ab.RetryAfter != nil {
			e.RetryAfter = *ab.RetryAfter
		}
		return e
	case errors.As(err, &er):
		e.StatusCode, e.Message = statusOf(er.Response, 0), er.Message
		for _, fe := range er.Errors {
			key := cmpOr(fe.Field, fe.Resource, "error")
			e.Errors = mapAdd(e.Errors, key, strings.TrimSpace(fe.Code+": "+fe.Message))
		}
		if d, ok := retryAfter(er.Response); ok {
			e.RetryAfter = d
		}
		if e.StatusCode == http.StatusTooManyRequests {
			e.RateLimited = true
			if e.RetryAfter == 0 {
				e.RetryAfter = secondaryWait
			}
		}
		return e
	case errors.As(err, &acc):
		// 202: GitHub merged the default branch instead of creating a deployment (auto_merge,
		// which the client never asks for).
		e.StatusCode, e.Message = http.StatusAccepted, "deployment not created: "+strings.TrimSpace(string(acc.Raw))
		return e
	case errors.As(err, &hErr) && hErr.Response != nil:
		// The installation token exchange was answered with a non-2xx status.
		defer hErr.Response.Body.Close()
		e.Method, e.Path = http.MethodPost, hErr.Response.Request.URL.Path
		e.StatusCode = hErr.Response.StatusCode
		var body struct {
			Message string `json:"message"`
		}
		_ = decodeLimited(hErr.Response.Body, &body)
		e.Message = "installation token: " + cmpOr(body.Message, strings.ToLower(http.StatusText(e.StatusCode)))
		if d, ok := retryAfter(hErr.Response); ok {
			e.RetryAfter = d
		}
		e.RateLimited = e.StatusCode == http.StatusTooManyRequests ||
			(e.StatusCode == http.StatusForbidden && hErr.Response.Header.Get("X-Ratelimit-Remaining") == "0")
		return e
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the URL
	}
	return fmt.Errorf("github %s %s: %w", method, path, err)
}

func statusOf(resp *http.Response, def int) int {
	if resp == nil {
		return def
	}
	return resp.StatusCode
}

// retryAfter reads retry-after, or the wait until x-ratelimit-reset when x-ratelimit-remaining
// is 0.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp == nil {
		return 0, false
	}
	if d, ok := outbound.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		return d, true
	}
	if resp.Header.Get("X-Ratelimit-Remaining") == "0" {
		if s, err := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Reset"), 10, 64); err == nil {
			return max(time.Until(time.Unix(s, 0)), 0), true
		}
	}
	return 0, false
}

func mapAdd(m map[string][]string, k, v string) map[string][]string {
	if m == nil {
		m = map[string][]string{}
	}
	m[k] = append(m[k], v)
	return m
}

func cmpOr(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func decodeLimited(r io.Reader, v any) error {
	return jsonDecode(io.LimitReader(r, 1<<20), v)
}
