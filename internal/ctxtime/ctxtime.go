// Package ctxtime waits under a context: the timer-select that retry loops, pollers and the
// fakes' latencies all need, written once.
package ctxtime

import (
	"context"
	"time"
)

// Sleep pauses for d and returns nil, or returns ctx.Err() as soon as ctx ends (at once
// when it already has). A d of zero or less does not wait.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
