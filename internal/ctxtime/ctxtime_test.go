package ctxtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
)

func TestSleep(t *testing.T) {
	if err := ctxtime.Sleep(t.Context(), time.Millisecond); err != nil {
		t.Errorf("a sleep that ran out: %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	// An hour's sleep under an ended context returns its error; were it to wait, the test
	// would time out.
	if err := ctxtime.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("a sleep under a canceled context: %v, want context.Canceled", err)
	}
	if err := ctxtime.Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("no sleep under a canceled context: %v, want context.Canceled", err)
	}
	if err := ctxtime.Sleep(t.Context(), -time.Second); err != nil {
		t.Errorf("a negative sleep: %v, want nil", err)
	}
}
