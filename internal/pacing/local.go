package pacing

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// NewLocalPool returns a pool whose budgets live in this process: every pipeline of the daemon
// waits on the same bucket per instance and token. Errors: an invalid budget.
func NewLocalPool(b Budget, o Options) (*Pool, error) {
	return newPool(b, o, func(_ string, s Shape) bucket { return newLocalBucket(s) })
}

func newLocalBucket(s Shape) *localBucket {
	return &localBucket{lim: rate.NewLimiter(rate.Limit(s.PerSecond), s.Burst)}
}

// localBucket keeps the tokens in an x/time/rate limiter, used only for its bucket
// arithmetic (TokensAt, AllowN): the reserve needs "take only if more than keep are left",
// which its own Wait cannot express.
type localBucket struct {
	mu  sync.Mutex
	lim *rate.Limiter
	// until is when a hold ends (zero: none).
	until time.Time
}

func (b *localBucket) take(_ context.Context, keep int) (time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if now.Before(b.until) {
		return b.until.Sub(now), nil
	}
	tokens := b.lim.TokensAt(now)
	if tokens >= float64(keep+1) && b.lim.AllowN(now, 1) {
		return 0, nil
	}
	need := float64(keep+1) - tokens
	return max(time.Duration(need/float64(b.lim.Limit())*float64(time.Second)), time.Millisecond), nil
}

func (b *localBucket) hold(_ context.Context, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if until := time.Now().Add(d); until.After(b.until) {
		b.until = until
	}
}
