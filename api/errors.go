package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/panics"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// toHTTP maps the front-door errors of package orchestrator (ErrUnknownPipeline 404,
// ErrShuttingDown 503, ErrNotOwner 409, ErrInvalid 400: a *FieldError or FieldErrors names the
// first field and lists every one, e.g. what Trigger.Validate and config's Pipeline.Resolve
// return; 422 "refused" when each of them is a refusal, FieldError.Refused), runs.ErrNotFound (404), runs.ErrEnded (409: cancel of a run that already ended),
// runs.ErrInvalid (400), and the locks sentinels: ErrNotFound (404), *HeldError with ErrStale
// or ErrHeld (409, naming the current holder), ErrInvalid (400); ErrUnavailable of either
// backend becomes 503; secrets.ErrMissing 422 and another secrets.ErrSource (a secrets
// manager unreachable or refusing) 502, with the message, which names the source and keys
// only; a recovered panic (panics.ErrPanic) 500 with its stack logged.

// fieldErr returns a *orchestrator.FieldError.
func fieldErr(field, format string, args ...any) error {
	return orchestrator.Fieldf(field, format, args...)
}

// httpError is an error that already knows its answer: status, code and message.
type httpError struct {
	status     int
	code       string
	message    string
	field      string
	retryAfter int // seconds; 0 means no Retry-After header
	// refusal, when set, marks a refusal the daemon means to make to protect itself (a cap
	// reached), whatever its status: it is logged with this message at WARN, at most once
	// per client per minute, never as a failure.
	refusal string
}

func (e *httpError) Error() string { return e.message }

func newHTTPError(status int, code, format string, args ...any) *httpError {
	return &httpError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON body of every error answer: {"error":{"code","message","field"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Problems lists every field problem of the request, the first being Field, when there
	// is more than one.
	Problems []fieldProblem `json:"problems,omitempty"`
	// Current is the lease in the way of a lock operation, when there is one (never its token).
	Current *locks.Info `json:"current,omitempty"`
}

type fieldProblem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// invalidDetail is the 400 answer to a request with one or more field problems (and, with
// its code changed, the 422 of refusals).
func invalidDetail(es orchestrator.FieldErrors) errorDetail {
	d := errorDetail{Code: "invalid", Message: es.Error(), Field: es[0].Field}
	if len(es) > 1 {
		for _, e := range es {
			d.Problems = append(d.Problems, fieldProblem{Field: e.Field, Message: e.Reason})
		}
	}
	return d
}

// toHTTP is the one place that turns an error into a status code and a JSON error body.
func toHTTP(err error) (int, errorDetail, int) {
	var (
		he *httpError
		le *locks.HeldError
	)
	fes := orchestrator.AsFieldErrors(err)
	switch {
	case errors.As(err, &he):
		return he.status, errorDetail{Code: he.code, Message: he.message, Field: he.field}, he.retryAfter
	case len(fes) > 0 && fes.Refused():
		d := invalidDetail(fes)
		d.Code = "refused"
		return http.StatusUnprocessableEntity, d, 0
	case len(fes) > 0:
		return http.StatusBadRequest, invalidDetail(fes), 0
	case errors.Is(err, orchestrator.ErrUnknownPipeline):
		return http.StatusNotFound, errorDetail{Code: "unknown_pipeline", Message: err.Error(), Field: "name"}, 0
	case errors.Is(err, orchestrator.ErrShuttingDown):
		return http.StatusServiceUnavailable, errorDetail{Code: "shutting_down", Message: err.Error()}, 5
	case errors.Is(err, runs.ErrNotFound):
		return http.StatusNotFound, errorDetail{Code: "run_not_found", Message: err.Error(), Field: "id"}, 0
	case errors.Is(err, runs.ErrEnded):
		return http.StatusConflict, errorDetail{Code: "run_ended", Message: err.Error()}, 0
	case errors.Is(err, orchestrator.ErrNotOwner):
		return http.StatusConflict, errorDetail{Code: "conflict", Message: err.Error()}, 0
	case errors.Is(err, orchestrator.ErrSecondPerson):
		return http.StatusForbidden, errorDetail{Code: "second_person_required", Message: err.Error()}, 0
	case errors.Is(err, orchestrator.ErrNotAwaiting):
		return http.StatusConflict, errorDetail{Code: "not_awaiting", Message: err.Error()}, 0
	case errors.Is(err, orchestrator.ErrDecisionChanged):
		return http.StatusConflict, errorDetail{Code: "plan_changed", Message: err.Error()}, 0
	case errors.As(err, &le) && (errors.Is(err, locks.ErrStale) || errors.Is(err, locks.ErrHeld)):
		cur := le.Current
		code := "lock_held"
		if errors.Is(err, locks.ErrStale) {
			code = "lock_changed"
		}
		return http.StatusConflict, errorDetail{Code: code, Message: err.Error(), Current: &cur}, 0
	case errors.Is(err, locks.ErrNotFound):
		return http.StatusNotFound, errorDetail{Code: "lock_not_found", Message: err.Error(), Field: "key"}, 0
	case errors.Is(err, runs.ErrInvalid), errors.Is(err, locks.ErrInvalid), errors.Is(err, orchestrator.ErrInvalid):
		return http.StatusBadRequest, errorDetail{Code: "invalid", Message: err.Error()}, 0
	case errors.Is(err, runs.ErrUnavailable), errors.Is(err, locks.ErrUnavailable):
		return http.StatusServiceUnavailable, errorDetail{Code: "unavailable", Message: "a backend is unavailable; try again"}, 5
	case errors.Is(err, panics.ErrPanic):
		return http.StatusInternalServerError, errorDetail{Code: "internal", Message: "internal error (a panic); the daemon's log has the stack"}, 0
	case errors.Is(err, secrets.ErrMissing):
		// Errors of package secrets name sources and keys, never a value.
		return http.StatusUnprocessableEntity, errorDetail{Code: "secret_missing", Message: err.Error()}, 0
	case errors.Is(err, secrets.ErrSource):
		return http.StatusBadGateway, errorDetail{Code: "secrets_unavailable", Message: err.Error()}, 0
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, errorDetail{Code: "timeout", Message: "the request timed out; try again"}, 1
	}
	return http.StatusInternalServerError, errorDetail{Code: "internal", Message: "internal error; the daemon's log has the details"}, 0
}

// writeError answers err as JSON.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, detail, retryAfter := s.noteError(r, err)
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	encode(w, status, errorBody{Error: detail})
}

// noteError is toHTTP for an answer about to be written (as JSON by writeError, as a page by
// pageError). Errors that are the server's fault are logged here, once, with the request ID;
// the client's mistakes are not logged beyond the access log; refusals (httpError.refusal)
// at WARN, at most once per client per minute.
func (s *server) noteError(r *http.Request, err error) (status int, detail errorDetail, retryAfter int) {
	status, detail, retryAfter = toHTTP(err)
	var he *httpError
	switch {
	case errors.As(err, &he) && he.refusal != "":
		if s.refusals.ok(he.refusal + " " + clientKey(r)) {
			s.log.WarnContext(r.Context(), he.refusal,
				slog.String(logkey.RequestID, requestID(r.Context())),
				slog.String(logkey.Route, routePattern(r)),
				slog.String(logkey.Remote, clientIP(r)),
				slog.Int(logkey.Status, status),
				slog.String(logkey.Reason, he.message),
				slog.String(logkey.Note, "logged at most once a minute per client"))
		}
	case errors.Is(err, panics.ErrPanic):
		s.logPanic(r, "request panicked", err)
	case status >= 500:
		s.log.ErrorContext(r.Context(), "request failed",
			slog.String(logkey.RequestID, requestID(r.Context())),
			slog.String(logkey.Route, routePattern(r)),
			slog.Int(logkey.Status, status),
			slog.String(logkey.Error, err.Error()))
	}
	return status, detail, retryAfter
}
