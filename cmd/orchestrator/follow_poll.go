package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// errStreamRefused: the daemon answered 503 to an event stream (too many streams open, in
// all or for this client). The run goes on; trigger then polls it instead of failing.
var errStreamRefused = errors.New("event stream refused")

// streamRefusedPoll is how often a run is polled when its event stream was refused.
const streamRefusedPoll = 2 * time.Second

// pollRun reads run id with get every interval until the run has ended (or ctx ends). A
// failed read is retried, up to 10 in a row.
func pollRun(ctx context.Context, get func(context.Context, string) (*runs.Run, error), id string, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	failures := 0
	for {
		r, err := get(ctx, id)
		switch {
		case err == nil && r.Status.Terminal():
			return nil
		case err == nil:
			failures = 0
		default:
			if failures++; failures > 10 {
				return fmt.Errorf("poll run %s: %w", id, err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
