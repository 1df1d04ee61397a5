package orchestrator

import (
	"errors"
	"fmt"
	"strings"
)

// The errors of the front doors: what the engine returns (wrapped) for a request it refuses,
// and what package api turns into status codes in its one error function.
var (
	// ErrUnknownPipeline: no pipeline of that name is loaded (404).
	ErrUnknownPipeline = errors.New("unknown pipeline")
	// ErrInvalid: the request is malformed (400). A *FieldError or FieldErrors matches it and
	// names the field. A FieldErrors whose every error is Refused is a refusal instead (422).
	ErrInvalid = errors.New("invalid request")
	// ErrShuttingDown: the daemon takes no new runs because it is stopping (503).
	ErrShuttingDown = errors.New("daemon is shutting down")
	// ErrNotOwner: the request conflicts with who executes the run: a cancel of a run that
	// another daemon instance executes (409).
	ErrNotOwner = errors.New("run is executed by another daemon instance")
	// ErrSecondPerson: the action needs another person's confirmation, and the one asking is
	// the person who asked first (403).
	ErrSecondPerson = errors.New("a second person must confirm")
	// ErrNotAwaiting: a decision (approve, reject) for a run that waits for none (409).
	ErrNotAwaiting = errors.New("run waits for no decision")
	// ErrDecisionChanged: an approval of something the run no longer asks about: its plan
	// changed since the approver saw it (409).
	ErrDecisionChanged = errors.New("what the run asks about changed")
)

// UnknownPipeline is the error for a pipeline name that is not loaded: it matches
// ErrUnknownPipeline and lists the known names, so the caller sees what to ask for
// (`pipeline "prd": unknown pipeline (known: demo, prod)`).
func UnknownPipeline(name string, known []string) error {
	list := "none is loaded"
	if len(known) > 0 {
		list = "known: " + strings.Join(known, ", ")
	}
	return fmt.Errorf("pipeline %q: %w (%s)", name, ErrUnknownPipeline, list)
}

// DecisionVote is one person's answer to the question a run waits on (approve or reject),
// naming the digest of what they saw.
type DecisionVote struct {
	By      string
	Approve bool
	Digest  string
	Reason  string
}

// FieldError says which field of a request is wrong and why. It matches ErrInvalid. Field is
// set where the problem is found (Trigger.Validate, config's Resolve for a ${trigger.…}
// reference the trigger can't fill), never recovered from the message.
type FieldError struct {
	// Field is the JSON field path ("image_tag", "params.region"), the query parameter, the
	// path parameter ("name") or the header ("Idempotency-Key").
	Field string
	// Reason is what is wrong, for humans, never quoting a secret or the value.
	Reason string
	// Refused says the value is well formed, but the pipeline's rules refuse what it would do
	// (a trigger value that would reach Coolify as a shared-variable reference, a build too
	// far ahead of the pipeline's newest): the front doors answer 422 when every problem of a
	// request is one (FieldErrors.Refused), 400 otherwise.
	Refused bool
}

// Fieldf returns a *FieldError for field with a formatted reason.
func Fieldf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Refusedf returns a *FieldError for field with a formatted reason, Refused.
func Refusedf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Refused: true}
}

func (e *FieldError) Error() string {
	if e.Refused {
		return fmt.Sprintf("refused %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// Is makes a *FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// FieldErrors is every problem of one request, each naming its field, reported in one answer
// (a trigger with a bad image tag and a bad app_version hears of both). It matches ErrInvalid.
type FieldErrors []*FieldError

func (es FieldErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Is makes FieldErrors match ErrInvalid.
func (es FieldErrors) Is(target error) bool { return target == ErrInvalid }

// Refused reports whether es holds refusals only (FieldError.Refused): the request is well
// formed and refused by the pipeline's rules (422), not malformed (400).
func (es FieldErrors) Refused() bool {
	for _, e := range es {
		if !e.Refused {
			return false
		}
	}
	return len(es) > 0
}

// Err returns es as an error, or nil when there are none.
func (es FieldErrors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// AsFieldErrors returns err's problems as FieldErrors: every one of a FieldErrors (or of an
// error that converts to them with errors.As, such as config.Problems), the one of a
// *FieldError; nil for other errors.
func AsFieldErrors(err error) FieldErrors {
	var (
		es FieldErrors
		fe *FieldError
	)
	switch {
	case errors.As(err, &es):
		return es
	case errors.As(err, &fe):
		return FieldErrors{fe}
	}
	return nil
}
