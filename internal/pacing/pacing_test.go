package pacing_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/pacing"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
)

const (
	url   = "https://coolify.example.com"
	token = "7|secret-token-value"
)

// backends returns a pool constructor per backend; the Redis ones share one server, as
// daemons sharing a Redis do.
func backends(t *testing.T) map[string]func(b pacing.Budget, o pacing.Options) *pacing.Pool {
	srv := redistest.Start(t)
	return map[string]func(pacing.Budget, pacing.Options) *pacing.Pool{
		"local": func(b pacing.Budget, o pacing.Options) *pacing.Pool {
			p, err := pacing.NewLocalPool(b, o)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		"redis": func(b pacing.Budget, o pacing.Options) *pacing.Pool {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { rdb.Close() })
			p, err := pacing.NewRedisPool(rdb, b, o)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	}
}

// maxInWindow is the most of the sorted times that fall in any interval of length w.
func maxInWindow(times []time.Time, w time.Duration) int {
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	most, lo := 0, 0
	for hi := range times {
		for times[hi].Sub(times[lo]) >= w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

// run makes n calls through each pacer from 4 goroutines per pacer and returns when each
// call was let through.
func run(t *testing.T, pacers []*pacing.Pacer, n int) []time.Time {
	var mu sync.Mutex
	var times []time.Time
	var wg sync.WaitGroup
	for _, p := range pacers {
		var left atomic.Int64
		left.Store(int64(n))
		for range 4 {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					if err := p.Wait(t.Context(), outbound.PriorityNormal); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					times = append(times, time.Now())
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	return times
}

// No window of the budget's length lets more than its limit through, from one pool or from
// two pools (daemons) sharing one Redis; the local backend shares within its pool.
func TestPacingStaysUnderBudget(t *testing.T) {
	budget := pacing.Budget{Limit: 20, Window: 200 * time.Millisecond}
	for name, newPool := range backends(t) {
		t.Run(name, func(t *testing.T) {
			a := newPool(budget, pacing.Options{Prefix: "t1:"})
			pacers := []*pacing.Pacer{a.For(url, token), a.For(url+"/", token)}
			if name == "redis" {
				pacers = append(pacers, newPool(budget, pacing.Options{Prefix: "t1:"}).For(url, token))
			}
			times := run(t, pacers, 25)
			if got := maxInWindow(times, budget.Window); got > budget.Limit {
				t.Fatalf("%d calls in one %v window, budget %d", got, budget.Window, budget.Limit)
			}
		})
	}
}

// Another token (or instance) has its own budget: it is not slowed by a busy one.
func TestBudgetsArePerInstanceAndToken(t *testing.T) {
	budget := pacing.Budget{Limit: 10, Window: time.Hour}
	for name, newPool := range backends(t) {
		t.Run(name, func(t *testing.T) {
			var waits atomic.Int64
			p := newPool(budget, pacing.Options{Prefix: "t2:", OnWait: func(context.Context, pacing.Wait) { waits.Add(1) }})
			// Empty the busy bucket (Limit 10 gives a burst of 2).
			for range 2 {
				if err := p.For(url, token).Wait(t.Context(), outbound.PriorityHigh); err != nil {
					t.Fatal(err)
				}
			}
			for _, other := range []*pacing.Pacer{p.For(url, "8|other-token"), p.For("https://other.example.com", token)} {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				err := other.Wait(ctx, outbound.PriorityNormal)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			if waits.Load() != 0 {
				t.Errorf("%d calls of other budgets waited", waits.Load())
			}
			// The busy budget itself is empty for an hour: a call waits until its context ends.
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			if err := p.For(url, token).Wait(ctx, outbound.PriorityHigh); err == nil {
				t.Error("a call on the emptied budget was let through")
			}
		})
	}
}

// Under a saturating bulk of normal calls the bucket keeps its reserve, so priority calls
// (safety reads) find a token at once, Reserve of them in a row, without waiting.
func TestPriorityCallsAreNotStarved(t *testing.T) {
	budget := pacing.Budget{Limit: 400, Window: 2 * time.Second}
	for name, newPool := range backends(t) {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var waited []pacing.Wait
			p := newPool(budget, pacing.Options{Prefix: "t3:", OnWait: func(_ context.Context, w pacing.Wait) {
				mu.Lock()
				waited = append(waited, w)
				mu.Unlock()
			}})
			pc := p.For(url, token)
			reserve := p.Shape().Reserve
			if reserve < 2 {
				t.Fatalf("reserve %d: budget too small for this test", reserve)
			}
			ctx, stop := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			var bulk atomic.Int64
			for range 16 {
				wg.Go(func() {
					for pc.Wait(ctx, outbound.PriorityNormal) == nil {
						bulk.Add(1)
					}
				})
			}
			// Wait until the bulk has drained the burst and waits on the refill.
			for bulk.Load() < int64(p.Shape().Burst)+20 {
				time.Sleep(time.Millisecond)
			}
			for range reserve {
				if err := pc.Wait(t.Context(), outbound.PriorityHigh); err != nil {
					t.Fatal(err)
				}
			}
			stop()
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			for _, w := range waited {
				if w.Priority == outbound.PriorityHigh {
					t.Errorf("a priority call waited %v under a bulk of normal calls", w.Waited)
				}
			}
			if len(waited) == 0 {
				t.Error("no normal call waited: the bulk did not saturate the budget")
			}
		})
	}
}

// The Redis key names neither the instance nor the token.
func TestRedisKeyHidesTheToken(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	p, err := pacing.NewRedisPool(rdb, pacing.DefaultCoolifyBudget, pacing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.For(url, token).Wait(t.Context(), outbound.PriorityNormal); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || !strings.HasPrefix(keys[0], pacing.DefaultPrefix) {
		t.Fatalf("keys %v, want one under %s", keys, pacing.DefaultPrefix)
	}
	if strings.Contains(keys[0], "secret") || strings.Contains(keys[0], "coolify.example") {
		t.Errorf("key %q shows the token or the instance", keys[0])
	}
	if ttl := rdb.PTTL(t.Context(), keys[0]).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("key TTL %v, want it to expire once the bucket would be full again", ttl)
	}
}

func TestBudgetShapeAndValidation(t *testing.T) {
	s := pacing.DefaultCoolifyBudget.Shape()
	if s.Burst != 5 || s.Reserve != 4 {
		t.Errorf("default shape %+v, want burst 5, reserve 4", s)
	}
	if s := (pacing.Budget{Limit: 2000, Window: time.Minute}).Shape(); s.Burst != 50 || s.Reserve != 4 {
		t.Errorf("2000/min shape %+v, want burst 50, reserve 4", s)
	}
	// Any window holds at most Burst + PerSecond·Window tokens: that must stay under the limit.
	for _, b := range []pacing.Budget{pacing.DefaultCoolifyBudget, {Limit: 10, Window: time.Second}, {Limit: 2000, Window: time.Minute}} {
		s := b.Shape()
		if most := float64(s.Burst) + s.PerSecond*b.Window.Seconds(); most > float64(b.Limit) {
			t.Errorf("budget %+v: shape %+v lets %.1f through per window", b, s, most)
		}
	}
	for _, b := range []pacing.Budget{{Limit: 9, Window: time.Minute}, {Limit: 200}} {
		if err := b.Validate(); err == nil {
			t.Errorf("budget %+v accepted", b)
		}
		if _, err := pacing.NewLocalPool(b, pacing.Options{}); err == nil {
			t.Errorf("NewLocalPool(%+v) accepted", b)
		}
	}
	if pacing.Off().For(url, token) != nil {
		t.Error("Off().For returned a pacer")
	}
}

// While Redis is down a pacer falls back to a bucket in the process: calls are still made,
// and still paced.
func TestRedisDownFallsBackToLocalBucket(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	p, err := pacing.NewRedisPool(rdb, pacing.Budget{Limit: 10, Window: time.Hour}, pacing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pc := p.For(url, token)
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for range 2 {
		if err := pc.Wait(ctx, outbound.PriorityHigh); err != nil {
			t.Fatalf("with Redis down: %v", err)
		}
	}
	ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := pc.Wait(ctx, outbound.PriorityHigh); err == nil {
		t.Error("with Redis down the third call of a budget with a burst of 2 was not paced")
	}
}

// A Redis that stalls (answers nothing) does not hold calls up: the pacer gives up on it
// after RedisTimeout and uses its local bucket, as a lease holder that must cancel a
// deployment in a Redis stall needs.
func TestRedisStalledFallsBackAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	p, err := pacing.NewRedisPool(rdb, pacing.DefaultCoolifyBudget, pacing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pc := p.For(url, token)
	if err := pc.Wait(t.Context(), outbound.PriorityHigh); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	// go-redis alone would wait its 3 s read timeout; the budget here is well under that.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	for range 3 {
		if err := pc.Wait(ctx, outbound.PriorityHigh); err != nil {
			t.Fatalf("with Redis stalled: %v", err)
		}
	}
}

// A hold makes every call of the budget wait until it ends, priority calls and, on Redis,
// other daemons' calls included; a shorter hold after it does not shorten it.
func TestHoldWaitsEveryCallOfTheBudget(t *testing.T) {
	const hold = 400 * time.Millisecond
	for name, newPool := range backends(t) {
		t.Run(name, func(t *testing.T) {
			budget := pacing.Budget{Limit: 600, Window: time.Minute}
			a := newPool(budget, pacing.Options{Prefix: "hold:"}).For(url, token)
			b := a
			if name == "redis" {
				b = newPool(budget, pacing.Options{Prefix: "hold:"}).For(url, token) // another daemon
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			a.Hold(ctx, hold)
			a.Hold(ctx, time.Millisecond)
			if err := b.Wait(ctx, outbound.PriorityHigh); err != nil {
				t.Fatal(err)
			}
			if waited := time.Since(start); waited < hold {
				t.Errorf("a priority call went through %v after a hold of %v", waited, hold)
			}
		})
	}
}
