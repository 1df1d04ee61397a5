package gitlab

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	gogitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/deploy-orchestrator/orchestrator/internal/hostclient"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// Sentinel errors. An *APIError matches the one of its status with errors.Is.
var (
	// ErrBadRequest: 400, a missing or invalid parameter, or a transition GitLab's state
	// machine refuses.
	ErrBadRequest = errors.New("gitlab: bad request")
	// ErrUnauthorized: 401, the token was refused.
	ErrUnauthorized = errors.New("gitlab: unauthorized")
	// ErrForbidden: 403, the token may not do this (or the deployment was created by CI).
	ErrForbidden = errors.New("gitlab: forbidden")
	// ErrNotFound: 404, the project, commit or deployment does not exist or is not visible.
	ErrNotFound = errors.New("gitlab: not found")
	// ErrRateLimited: 429.
	ErrRateLimited = errors.New("gitlab: rate limited")
	// ErrServer: 5xx.
	ErrServer = errors.New("gitlab: server error")
)

// APIError is a non-2xx answer from GitLab. Message and Errors are the server's words; they
// never hold the token.
type APIError struct {
	Method     string // HTTP method
	Path       string // request path (the project escaped), without query
	StatusCode int
	Message    string
	// Errors are a validation error's fields ("status" → "cannot transition via \"run\"").
	Errors map[string][]string
	// RetryAfter is how long GitLab asked to wait (Retry-After, else RateLimit-Reset); 0 if
	// it said nothing.
	RetryAfter time.Duration
}

// Error reads like "gitlab PUT /api/v4/projects/g%2Fp/deployments/7: 400 (status: cannot transition via \"run\")".
func (e *APIError) Error() string {
	return hostclient.ErrorText(System, e.Method, e.Path, e.StatusCode, e.Message, e.Errors, e.RetryAfter)
}

// Is matches the sentinel of the status class.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.StatusCode == http.StatusBadRequest
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	case ErrForbidden:
		return e.StatusCode == http.StatusForbidden
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests
	case ErrServer:
		return e.StatusCode >= 500
	}
	return false
}

// Retryable says whether the same call may succeed later, and how long to wait first (0:
// the caller's own backoff): yes for 429 and 5xx (but 501), waiting RetryAfter; no for the
// other 4xx. A failure that is not an *APIError (no answer at all) is retryable too.
func (e *APIError) Retryable() (after time.Duration, ok bool) {
	if e.StatusCode == http.StatusTooManyRequests || (e.StatusCode >= 500 && e.StatusCode != http.StatusNotImplemented) {
		return e.RetryAfter, true
	}
	return 0, false
}

// apiError turns client-go's answer into an *APIError, or wraps a transport failure with
// method and path (its URL, which may carry a query, dropped).
func apiError(method, path string, resp *gogitlab.Response, err error) error {
	if err == nil {
		return nil
	}
	if resp == nil || resp.Response == nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("gitlab %s %s: %w", method, path, err)
	}
	e := &APIError{Method: method, Path: path, StatusCode: resp.StatusCode}
	var er *gogitlab.ErrorResponse
	if errors.As(err, &er) && len(er.Body) > 0 {
		e.decodeBody(er.Body)
	}
	if d, ok := outbound.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		e.RetryAfter = d
	} else if s, perr := strconv.ParseInt(resp.Header.Get("RateLimit-Reset"), 10, 64); perr == nil && e.StatusCode == http.StatusTooManyRequests {
		e.RetryAfter = max(time.Until(time.Unix(s, 0)), 0)
	}
	return e
}

// decodeBody reads GitLab's error bodies: {"message": "..."}, {"message": {"field":
// ["..."]}} and {"error": "..."}.
func (e *APIError) decodeBody(data []byte) {
	var body struct {
		Message json.RawMessage `json:"message"`
		Error   string          `json:"error"`
	}
	if json.Unmarshal(data, &body) != nil {
		return
	}
	var s string
	var fields map[string][]string
	switch {
	case json.Unmarshal(body.Message, &s) == nil:
		e.Message = s
	case json.Unmarshal(body.Message, &fields) == nil && len(fields) > 0:
		e.Errors = fields
	}
	if e.Message == "" && body.Error != "" {
		e.Message = body.Error
	}
}
