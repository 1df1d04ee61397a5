package coolify

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// Sentinel errors. An *APIError matches the one for its status with errors.Is; the others are
// returned (wrapped) by the methods whose docs name them.
var (
	// ErrBadRequest: 400 (e.g. "Deployment cannot be cancelled. Current status: finished").
	ErrBadRequest = errors.New("bad request")
	// ErrUnauthorized: 401, the token is unknown, expired or has no team.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: 403, the token lacks an ability (see [APIError.MissingPermission]), the API is
	// disabled, or the caller's IP is not allowed.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: 404, the resource does not exist or belongs to another team.
	ErrNotFound = errors.New("not found")
	// ErrConflict: 409, e.g. creating an env var whose key already exists in that scope.
	ErrConflict = errors.New("conflict")
	// ErrValidation: 422, the server rejected a field (see [APIError.Errors]).
	ErrValidation = errors.New("validation failed")
	// ErrRateLimited: 429 after the retry budget, or with a Retry-After beyond it (see
	// [APIError.RetryAfter]); also the deploy queue limit.
	ErrRateLimited = errors.New("rate limited")
	// ErrServer: 5xx after the retry budget (or at once for a non-idempotent request).
	ErrServer = errors.New("server error")
	// ErrUnavailable: no answer at all (connection refused or reset, timeout) after the budget.
	ErrUnavailable = errors.New("coolify unreachable")
	// ErrBadBaseURL: the base URL given to [New] could not be parsed.
	ErrBadBaseURL = errors.New("malformed coolify base url")

	// ErrInvalidTag: an image tag that Coolify would reject; nothing was sent.
	ErrInvalidTag = errors.New("invalid image tag")
	// ErrInvalidEnv: an env var Coolify would reject (bad key, comment too long); nothing was sent.
	ErrInvalidEnv = errors.New("invalid env var")
	// ErrValueHidden: an env var whose value was hidden when it was read was passed to a write;
	// writing it would wipe the value, so nothing was sent.
	ErrValueHidden = errors.New("env var value unknown (hidden when read)")
	// ErrDeployDeduplicated: Coolify dropped the deploy request, answering 200 without storing a
	// deployment: the application already has a queued or running deployment (same commit, no
	// force), or (on /start) the queue was full. Nothing new was queued.
	ErrDeployDeduplicated = errors.New("deploy dropped: a deployment is already queued or running")
	// ErrUnexpectedResponse: a 2xx answer without what it must carry (e.g. no deployment uuid).
	ErrUnexpectedResponse = errors.New("unexpected response")
	// ErrDeploymentFailed: the deployment ended "failed".
	ErrDeploymentFailed = errors.New("deployment failed")
	// ErrDeploymentCancelled: the deployment ended "cancelled-by-user".
	ErrDeploymentCancelled = errors.New("deployment cancelled")
	// ErrDeploymentTimeout: the deployment did not end within the wait's deadline.
	ErrDeploymentTimeout = errors.New("deployment did not finish in time")
)

// APIError is a non-2xx answer from Coolify. Message and Errors are the server's own words
// ("message" and the lenient "errors" map of a 422); they never contain env var values.
type APIError struct {
	Method     string // HTTP method
	Path       string // request path (e.g. /api/v1/applications/abc/envs), without query
	StatusCode int    // HTTP status code
	// Message is the body's "message" (plus its "error" detail when present).
	Message string
	// Errors are the field errors of a 422, each field with one or more messages.
	Errors map[string][]string
	// RetryAfter is the server's Retry-After on a 429/503 (0 if none).
	RetryAfter time.Duration
}

// Error reads like `PATCH /api/v1/applications/x: 422 Validation failed. (docker_registry_image_tag: ...)`.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d", e.Method, e.Path, e.StatusCode)
	if e.Message != "" {
		b.WriteString(" ")
		b.WriteString(e.Message)
	} else {
		b.WriteString(" ")
		b.WriteString(strings.ToLower(http.StatusText(e.StatusCode)))
	}
	if len(e.Errors) > 0 {
		keys := make([]string, 0, len(e.Errors))
		for k := range e.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+": "+strings.Join(e.Errors[k], "; "))
		}
		b.WriteString(" (")
		b.WriteString(strings.Join(parts, ", "))
		b.WriteString(")")
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Is matches the sentinel error of the status class.
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
	case ErrConflict:
		return e.StatusCode == http.StatusConflict
	case ErrValidation:
		return e.StatusCode == http.StatusUnprocessableEntity
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests
	case ErrServer:
		return e.StatusCode >= 500
	}
	return false
}

// MissingPermission is the ability a 403 says the token lacks ("deploy" from "Missing required
// permissions: deploy"), or "" when the server did not say.
func (e *APIError) MissingPermission() string {
	if e.StatusCode != http.StatusForbidden {
		return ""
	}
	const prefix = "Missing required permissions:"
	if i := strings.Index(e.Message, prefix); i >= 0 {
		rest := strings.TrimSpace(e.Message[i+len(prefix):])
		rest = strings.TrimSuffix(rest, ".")
		if j := strings.IndexAny(rest, " ("); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	return ""
}

// decodeBody fills Message and Errors from a JSON error body, leniently: "errors" values may be
// arrays of strings or plain strings; a non-JSON body leaves the status text.
func (e *APIError) decodeBody(data []byte) {
	var body struct {
		Message json.RawMessage            `json:"message"`
		Error   json.RawMessage            `json:"error"`
		Errors  map[string]json.RawMessage `json:"errors"`
	}
	if json.Unmarshal(data, &body) != nil {
		return
	}
	e.Message = flatten(body.Message)
	if detail := flatten(body.Error); detail != "" && detail != e.Message {
		if e.Message == "" {
			e.Message = detail
		} else {
			e.Message += " (" + detail + ")"
		}
	}
	for field, raw := range body.Errors {
		if msgs := flattenList(raw); len(msgs) > 0 {
			if e.Errors == nil {
				e.Errors = map[string][]string{}
			}
			e.Errors[field] = msgs
		}
	}
}

func flatten(raw json.RawMessage) string {
	return strings.Join(flattenList(raw), "; ")
}

// flattenList turns a JSON string, array of strings, or anything else into messages.
func flattenList(raw json.RawMessage) []string {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		var out []string
		for _, item := range list {
			out = append(out, flattenList(item)...)
		}
		return out
	}
	return []string{string(raw)}
}

// NotApplied reports whether err proves that Coolify did not act on the write that returned it:
// the client refused before sending ([ErrInvalidTag], [ErrInvalidEnv], [ErrValueHidden],
// [ErrBadBaseURL]), or the server answered with a 4xx status, which it sends before changing
// anything. The exception is a 422 from the bulk env route, which comes after the items before the
// invalid one were saved. A 5xx, a dropped connection or a timeout are ambiguous (the change
// may have been made): NotApplied is false for them, as for nil, and for a 4xx that answered a
// retry of an attempt that failed so (the error then matches outbound.ErrMaybeApplied).
func NotApplied(err error) bool {
	if err == nil || errors.Is(err, outbound.ErrMaybeApplied) {
		return false
	}
	if errors.Is(err, ErrInvalidTag) || errors.Is(err, ErrInvalidEnv) || errors.Is(err, ErrValueHidden) || errors.Is(err, ErrBadBaseURL) {
		return true
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.StatusCode < 400 || ae.StatusCode >= 500 {
		return false
	}
	return !(ae.StatusCode == http.StatusUnprocessableEntity && strings.HasSuffix(ae.Path, "/envs/bulk"))
}
