package panics_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/internal/panics"
)

func TestCallTurnsPanicIntoError(t *testing.T) {
	var nilMap map[string]int
	err := panics.Call(func() error {
		nilMap["x"] = 1 // a runtime error, like a nil dereference
		return nil
	})
	if !errors.Is(err, panics.ErrPanic) {
		t.Fatalf("got %v, want an error matching ErrPanic", err)
	}
	var pe *panics.Error
	if !errors.As(err, &pe) || !bytes.Contains(pe.Stack, []byte("TestCallTurnsPanicIntoError")) {
		t.Fatalf("stack does not name the panicking function: %v", err)
	}
	if strings.Contains(err.Error(), "goroutine") {
		t.Errorf("Error() carries the stack: %q", err)
	}
}

func TestCallPassesErrorsAndNil(t *testing.T) {
	want := errors.New("plain")
	if got := panics.Call(func() error { return want }); got != want {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := panics.Call(func() error { return nil }); got != nil {
		t.Errorf("got %v, want nil", got)
	}
}

func TestCatchInGoroutine(t *testing.T) {
	var wg sync.WaitGroup
	var err error
	wg.Go(func() {
		defer panics.Catch(&err)
		panic("boom")
	})
	wg.Wait()
	if err == nil || err.Error() != "panic: boom" {
		t.Fatalf("got %v, want panic: boom", err)
	}
}

func TestCatchRepanicsAbortHandler(t *testing.T) {
	defer func() {
		if p := recover(); p != http.ErrAbortHandler {
			t.Errorf("recovered %v, want http.ErrAbortHandler", p)
		}
	}()
	_ = panics.Call(func() error { panic(http.ErrAbortHandler) })
	t.Error("Call returned; want the panic to go on")
}

func TestLogWritesStackOnlyForPanics(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	panics.Log(context.Background(), log, "request panicked", errors.New("plain"))
	if buf.Len() != 0 {
		t.Fatalf("logged a plain error: %s", buf.String())
	}
	err := panics.Call(func() error { panic("boom") })
	panics.Log(context.Background(), log, "request panicked", err, slog.String("route", "/x"))
	for _, want := range []string{"request panicked", "panic: boom", "stack=", "route=/x"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q: %s", want, buf.String())
		}
	}
}
