package sqlitelock_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
)

// BenchmarkAcquireRelease measures an uncontended acquire+release through a Locker.
func BenchmarkAcquireRelease(b *testing.B) {
	d, err := sqlitelock.Open(filepath.Join(b.TempDir(), "locks.db"))
	if err != nil {
		b.Fatal(err)
	}
	l := locks.New(d, locks.Options{})
	defer l.Close()
	ctx := b.Context()
	i := 0
	for b.Loop() {
		i++
		le, err := l.Acquire(ctx, locks.Request{Key: fmt.Sprintf("bench:k%d", i%64), Holder: fmt.Sprintf("b#%d/x", i), TTL: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := le.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandoff measures the gap from a release to the next grant when 8 waiters queue
// on one key, each holding it 2ms (reported as handoff-p50-us and handoff-max-us).
func BenchmarkHandoff(b *testing.B) {
	d, err := sqlitelock.Open(filepath.Join(b.TempDir(), "locks.db"))
	if err != nil {
		b.Fatal(err)
	}
	l := locks.New(d, locks.Options{})
	defer l.Close()
	ctx := b.Context()
	var gaps []time.Duration
	for b.Loop() {
		const waiters = 8
		first, err := l.Acquire(ctx, locks.Request{Key: "bench:handoff", Holder: "b#0/first", TTL: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		type grant struct{ at, releasedAt time.Time }
		grants := make(chan grant, waiters)
		for w := range waiters {
			go func() {
				le, err := l.Acquire(ctx, locks.Request{Key: "bench:handoff", Holder: fmt.Sprintf("b#%d/w", w+1), TTL: time.Minute})
				if err != nil {
					b.Error(err)
					grants <- grant{}
					return
				}
				at := time.Now()
				time.Sleep(2 * time.Millisecond)
				rel := time.Now()
				if err := le.Release(ctx); err != nil {
					b.Error(err)
				}
				grants <- grant{at, rel}
			}()
		}
		for {
			info, err := l.Get(ctx, "bench:handoff")
			if err == nil && info.Waiters == waiters {
				break
			}
			time.Sleep(time.Millisecond)
		}
		rel := time.Now()
		if err := first.Release(ctx); err != nil {
			b.Fatal(err)
		}
		var gs []grant
		for range waiters {
			gs = append(gs, <-grants)
		}
		slices.SortFunc(gs, func(x, y grant) int { return x.at.Compare(y.at) })
		prev := rel
		for _, g := range gs {
			gaps = append(gaps, g.at.Sub(prev))
			prev = g.releasedAt
		}
	}
	slices.Sort(gaps)
	b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds()), "handoff-p50-us")
	b.ReportMetric(float64(gaps[len(gaps)-1].Microseconds()), "handoff-max-us")
}
