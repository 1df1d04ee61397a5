// Package panics turns a panic in a goroutine the daemon starts for a request or a run into an
// error that fails that request or run, with the stack kept for the log, so that one bad input
// or one bug never takes the whole process (and every other run) down with it.
//
// Every goroutine started for a request or a run either runs its body through Call or defers
// Catch itself; the one that waits for it returns the error, and the layer that logs errors logs
// the stack with Log.
package panics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
)

// ErrPanic is matched (errors.Is) by every *Error.
var ErrPanic = errors.New("panic")

// Error is a recovered panic. Its message is the panic's value; Stack is kept for the log and
// never sent to a client.
type Error struct {
	Value any
	Stack []byte
}

func (e *Error) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Is makes errors.Is(err, ErrPanic) true.
func (e *Error) Is(target error) bool { return target == ErrPanic }

// Unwrap returns the panic's value when it was an error (a runtime.Error, say).
func (e *Error) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Catch, deferred directly (defer panics.Catch(&err)), turns a panic of the deferring function
// into an *Error stored in *errp. It re-panics http.ErrAbortHandler, which net/http uses to
// abort a response on purpose.
func Catch(errp *error) {
	p := recover()
	if p == nil {
		return
	}
	if p == http.ErrAbortHandler { //nolint:errorlint // identity is what net/http checks too
		panic(p)
	}
	*errp = &Error{Value: p, Stack: debug.Stack()}
}

// Call runs fn and returns its error, or an *Error when fn panics.
func Call(fn func() error) (err error) {
	defer Catch(&err)
	return fn()
}

// Log writes an error record for a recovered panic with its stack (key "stack"), plus attrs. It
// does nothing when err holds no *Error, so a caller may call it on every error it logs.
func Log(ctx context.Context, log *slog.Logger, msg string, err error, attrs ...slog.Attr) {
	var pe *Error
	if log == nil || !errors.As(err, &pe) {
		return
	}
	attrs = append(attrs, slog.String(logkey.Error, pe.Error()), slog.String(logkey.Stack, string(pe.Stack)))
	log.LogAttrs(ctx, slog.LevelError, msg, attrs...)
}
