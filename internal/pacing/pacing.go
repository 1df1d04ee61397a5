// Package pacing keeps the calls to an outside API under the request budget its server
// enforces, so they wait for the budget instead of running into 429 answers. Coolify throttles
// its API per user token (Laravel's throttle, API_RATE_LIMIT requests per minute, default 200);
// a [Pool] hands out one [Pacer] per instance and token, and every client of that instance and
// token waits on it.
//
// # Where the budget lives
//
// [NewLocalPool] keeps each budget in this process (a golang.org/x/time/rate bucket): every
// pipeline of one daemon on the embedded backend shares it. [NewRedisPool] keeps it in Redis (a
// token bucket updated by one Lua script, on Redis's clock): every daemon sharing that Redis
// shares it. The Redis key is a hash of the instance URL and the token, never the token.
//
// # Shape of the bucket
//
// Laravel's throttle counts requests in fixed windows that start at a window's first request.
// A token bucket refilling at r per window with room for b tokens lets through at most b + r
// requests in any window, wherever the window falls, so the bucket is sized to keep b + r
// under the limit with 1% to spare for requests that reach the server later than they left
// ([Budget.Shape]): b is a fortieth of the limit (at least 2), r the rest less 1%. With the
// default 200 per minute, b = 5 and r = 193.05 per minute; with 2000, b = 50 and r = 1930.5.
// The burst lets a caller that was held up (by its own work, not the budget) catch up on the
// tokens that accrued meanwhile, instead of losing them.
//
// # Priorities
//
// Calls of [outbound.PriorityHigh] (safety reads such as deployment status and re-reads,
// cancels, restores) may take any token. Calls of lower priority may only take a token while
// more than [Shape.Reserve] (at most 4) remain. Under a bulk of writes the bucket therefore
// hovers at the reserve and a priority call finds a token at once, up to Reserve of them in a
// row; after that, priority calls still take each new token before any normal call can (a
// normal call needs Reserve+1 tokens, a priority call one), so safety reads are never
// starved by writes. Normal calls are not starved by priority calls either unless those alone
// use the whole budget.
//
// Calls of [outbound.PriorityLow] (a plan's reads, set with [outbound.Background]) yield to
// every other call: while a call of higher priority waits on the same Pacer, they take
// nothing, and otherwise they take a token only from a full bucket (more than Burst − 1
// left; with the default budget that is the normal calls' threshold, the bucket being 5). A
// plan therefore never takes a token a run's call of this daemon is waiting for. Across
// daemons sharing a Redis bucket the yielding is not shared: another daemon's low calls
// compete with this one's normal calls at most as normal calls do, and never for the
// reserve.
//
// # When the server says the budget is spent
//
// The bucket keeps this process's or this fleet's calls under the limit, but the server
// counts every caller of the token (another tool, a second token of the same Coolify user).
// When it answers 429 for its throttle anyway, [Pacer.Hold] holds every call of the budget,
// priority calls included, until its Retry-After has passed: on Redis every daemon sharing
// the bucket waits, so the fleet sends one refused request per window instead of one per
// waiting call. internal/outbound calls it on such answers (outbound.Holder).
package pacing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// Budget is what the server allows: Limit requests per Window per token.
type Budget struct {
	Limit  int
	Window time.Duration
}

// DefaultCoolifyBudget is Coolify's default API_RATE_LIMIT: 200 requests per minute per user.
var DefaultCoolifyBudget = Budget{Limit: 200, Window: time.Minute}

// MinLimit is the smallest Limit a Budget may have (below it the bucket has no room).
const MinLimit = 10

// safety is the share of the budget's refill kept unused for late-arriving requests.
const safety = 0.01

// maxReserve caps the tokens kept for priority calls.
const maxReserve = 4

// Shape is the token bucket a Budget is paced with.
type Shape struct {
	// PerSecond is the refill rate: (Limit − Burst) per Window, less 1%.
	PerSecond float64
	// Burst is the bucket's size: Limit/40, at least 2.
	Burst int
	// Reserve is how many tokens only priority calls may take: Burst − 1, at most 4.
	Reserve int
}

// Validate reports a budget that cannot be paced.
func (b Budget) Validate() error {
	if b.Limit < MinLimit {
		return fmt.Errorf("rate limit %d: must be at least %d requests per window", b.Limit, MinLimit)
	}
	if b.Window <= 0 {
		return fmt.Errorf("rate limit window %v: must be positive", b.Window)
	}
	return nil
}

// Shape returns the bucket that keeps calls under b (see the package comment).
func (b Budget) Shape() Shape {
	burst := max(b.Limit/40, 2)
	return Shape{
		PerSecond: float64(b.Limit-burst) * (1 - safety) / b.Window.Seconds(),
		Burst:     burst,
		Reserve:   min(burst-1, maxReserve),
	}
}

// Wait is one call that waited for the budget.
type Wait struct {
	Priority outbound.Priority
	// Waited is how long the call waited (more than zero).
	Waited time.Duration
}

// bucket is where a budget's tokens are kept.
type bucket interface {
	// take takes one token if more than keep tokens are there and returns 0; otherwise it
	// takes nothing and returns how long until there would be.
	take(ctx context.Context, keep int) (time.Duration, error)
	// hold lets no token be taken for d from now (or until a later hold ends).
	hold(ctx context.Context, d time.Duration)
}

// Pacer paces the calls of one instance and token. It implements outbound.Limiter and is safe
// for concurrent use.
type Pacer struct {
	shape  Shape
	b      bucket
	onWait func(context.Context, Wait)

	mu sync.Mutex
	// ahead counts the calls above PriorityLow inside Wait; clear is closed when it drops
	// back to 0 (nil while it is 0).
	ahead int
	clear chan struct{}
}

// Wait returns when a call of priority p may be made, or with ctx's error (or the budget
// store's) when it cannot; it then reports the wait, if there was one, to the pool's OnWait.
func (p *Pacer) Wait(ctx context.Context, prio outbound.Priority) error {
	keep := p.shape.Reserve
	switch {
	case prio >= outbound.PriorityHigh:
		keep = 0
	case prio < outbound.PriorityNormal:
		keep = max(p.shape.Burst-1, p.shape.Reserve)
	}
	if prio >= outbound.PriorityNormal {
		p.enter()
		defer p.leave()
	}
	var start time.Time
	for {
		if prio < outbound.PriorityNormal {
			waited, err := p.yield(ctx)
			if err != nil {
				return err
			}
			if waited && start.IsZero() {
				start = time.Now()
			}
		}
		d, err := p.b.take(ctx, keep)
		if err != nil {
			return fmt.Errorf("pacing: %w", err)
		}
		if d <= 0 {
			break
		}
		if start.IsZero() {
			start = time.Now()
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
	if !start.IsZero() && p.onWait != nil {
		p.onWait(ctx, Wait{Priority: prio, Waited: time.Since(start)})
	}
	return nil
}

var _ outbound.Holder = (*Pacer)(nil)

// Hold makes every call of the budget wait d from now, whatever its priority: the server
// refused a call for its throttle and asked to wait d (see the package comment). A hold that
// ends later already stays.
func (p *Pacer) Hold(ctx context.Context, d time.Duration) {
	if d > 0 {
		p.b.hold(ctx, d)
	}
}

// enter and leave count a call above PriorityLow in and out of Wait.
func (p *Pacer) enter() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ahead == 0 {
		p.clear = make(chan struct{})
	}
	p.ahead++
}

func (p *Pacer) leave() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ahead--; p.ahead == 0 {
		close(p.clear)
		p.clear = nil
	}
}

// yield returns once no call above PriorityLow is in Wait (at once when none is), saying
// whether it had to wait, or with ctx's cause.
func (p *Pacer) yield(ctx context.Context) (waited bool, err error) {
	for {
		p.mu.Lock()
		clear := p.clear
		p.mu.Unlock()
		if clear == nil {
			return waited, nil
		}
		waited = true
		select {
		case <-ctx.Done():
			return waited, context.Cause(ctx)
		case <-clear:
		}
	}
}

// Options configure a Pool.
type Options struct {
	// OnWait is told about every call that waited for the budget, with the call's context
	// (which carries its run, see internal/trace). It must not block for long.
	OnWait func(ctx context.Context, w Wait)
	// Prefix is put before the Redis keys (default "orch:pace:").
	Prefix string
}

// Pool hands out the Pacer of each instance and token, one per pair for the pool's life.
type Pool struct {
	shape   Shape
	opts    Options
	newB    func(key string, s Shape) bucket
	mu      sync.Mutex
	pacers  map[string]*Pacer
	enabled bool
	// rdb, on a pool in Redis, also holds the boards (Board), one per instance and token.
	rdb    redis.UniversalClient
	boards map[string]*Board
}

// Off is a Pool whose pacers never wait (For returns nil: no limiter).
func Off() *Pool { return &Pool{} }

func newPool(b Budget, o Options, newB func(key string, s Shape) bucket) (*Pool, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &Pool{shape: b.Shape(), opts: o, newB: newB, pacers: map[string]*Pacer{}, enabled: true, boards: map[string]*Board{}}, nil
}

// For returns the Pacer of the instance at url used with token, or nil (no pacing) from Off
// or a nil Pool.
func (p *Pool) For(url, token string) *Pacer {
	if p == nil || !p.enabled {
		return nil
	}
	key := Key(url, token)
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc, ok := p.pacers[key]; ok {
		return pc
	}
	pc := &Pacer{shape: p.shape, b: p.newB(key, p.shape), onWait: p.opts.OnWait}
	p.pacers[key] = pc
	return pc
}

// Shape is the bucket every pacer of the pool uses.
func (p *Pool) Shape() Shape { return p.shape }

// Key names the budget of an instance and token: a hash, so the token appears nowhere.
func Key(url, token string) string {
	h := sha256.Sum256([]byte(strings.TrimRight(url, "/") + "\x00" + token))
	return hex.EncodeToString(h[:12])
}
