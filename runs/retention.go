package runs

import (
	"context"
	"fmt"
	"time"
)

// Retention says how much history a store keeps. A run that has not ended is always kept.
type Retention struct {
	// MaxAge: an ended run created more than MaxAge ago is deleted (0: no age limit).
	MaxAge time.Duration
	// MaxRuns: an ended run older than the MaxRuns newest runs (ended or not) is deleted
	// (0: no count limit).
	MaxRuns int
}

// Pruner deletes the history a Retention no longer keeps. Both stores implement it.
type Pruner interface {
	// Prune deletes the ended runs r no longer keeps, each with its events and its
	// idempotency key (so the key may start a new run), and the webhook delivery records
	// whose TTL has passed. It never deletes a run that has not ended, and works in small
	// batches so other writers are not held up. Several daemons may prune one backend at
	// once. It returns how many runs it deleted.
	//
	// With the runs go their reports (ReportStore) that have nothing pending; a pending
	// report stays until it is delivered, and goes at a later Prune. A latest-report pointer
	// goes when the report it names is gone.
	//
	// Errors: ErrInvalid (a negative MaxAge or MaxRuns); ErrUnavailable.
	Prune(ctx context.Context, r Retention) (deleted int, err error)
}

// PruneEvery prunes p under r at once and then every interval until ctx ends, handing each
// outcome to report (how many runs went, and the error). It returns when ctx ends; the
// caller runs it in a goroutine it waits for.
func PruneEvery(ctx context.Context, p Pruner, r Retention, interval time.Duration, report func(deleted int, err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := p.Prune(ctx, r)
		if ctx.Err() != nil {
			return
		}
		report(n, err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PruneBefore returns the sort key below which a driver's Prune deletes ended runs under r:
// the later of the age cutoff (created before now - r.MaxAge) and nthNewest, the sort key of
// the r.MaxRuns-th newest run ("" when the store holds fewer). "" means nothing is old
// enough. Errors: ErrInvalid for a negative limit.
func PruneBefore(r Retention, now time.Time, nthNewest string) (string, error) {
	if r.MaxAge < 0 || r.MaxRuns < 0 {
		return "", fmt.Errorf("prune: negative max age %s or max runs %d: %w", r.MaxAge, r.MaxRuns, ErrInvalid)
	}
	before := ""
	if r.MaxAge > 0 {
		before = SortKey(now.Add(-r.MaxAge), "")
	}
	if r.MaxRuns > 0 && nthNewest > before {
		before = nthNewest
	}
	return before, nil
}

// PruneBatch is how many runs a driver's Prune deletes per write, so a write lock is never
// held long.
const PruneBatch = 200
