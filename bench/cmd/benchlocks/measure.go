package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// settle is how long waiters get to start waiting (connect, subscribe, first attempt)
// before a phase's clock starts.
const settle = 200 * time.Millisecond

type result struct {
	uncontendedP50         time.Duration
	handoffP50, handoffP99 time.Duration
	chainMaxWait           time.Duration
	idleCmds               float64
}

// subject is one implementation with its clients: one for the uncontended phase, and a
// first holder plus the waiters for the others.
type subject struct {
	impl
	single  client
	clients []client // clients[0] starts each round by holding the key

	uncontended, gaps, chains []time.Duration
}

func (s *subject) close() {
	if s.single != nil {
		_ = s.single.close()
	}
	for _, c := range s.clients {
		if c != nil {
			_ = c.close()
		}
	}
}

// measureAll runs every phase for every implementation, taking turns, and returns the
// results in the order of impls.
func measureAll(ctx context.Context, impls []impl, srv *redisServer, cfg config, stderr io.Writer) ([]result, error) {
	subjects := make([]*subject, len(impls))
	defer func() {
		for _, s := range subjects {
			if s != nil {
				s.close()
			}
		}
	}()
	for i, im := range impls {
		s := &subject{impl: im}
		if !im.diagnostic {
			s.clients = make([]client, cfg.waiters+1)
		}
		subjects[i] = s
		var err error
		if s.single, err = im.newClient(); err != nil {
			return nil, fmt.Errorf("%s: new client: %w", im.name, err)
		}
		for j := range s.clients {
			if s.clients[j], err = im.newClient(); err != nil {
				return nil, fmt.Errorf("%s: new client: %w", im.name, err)
			}
		}
	}

	const warmup = 100
	// Turns in a new random order each round: whoever runs right after an implementation
	// that leaves work behind (the SQLite drivers wake their pollers after a write) is not
	// always the same one.
	rng := rand.New(rand.NewPCG(1, 2))
	for from := 0; from < warmup+cfg.n; from += cfg.interleave {
		for _, i := range rng.Perm(len(subjects)) {
			s := subjects[i]
			got, err := uncontended(ctx, s, from, min(from+cfg.interleave, warmup+cfg.n))
			if err != nil {
				return nil, fmt.Errorf("%s: uncontended: %w", s.name, err)
			}
			if from >= warmup {
				s.uncontended = append(s.uncontended, got...)
			}
		}
	}

	for r := range cfg.rounds {
		for _, s := range subjects {
			if s.diagnostic {
				continue
			}
			g, chain, err := handoffRound(ctx, s.clients, fmt.Sprintf("bench:%s:handoff:%d", s.name, r), cfg.hold)
			if err != nil {
				return nil, fmt.Errorf("%s: handoff round %d: %w", s.name, r, err)
			}
			s.gaps = append(s.gaps, g...)
			s.chains = append(s.chains, chain)
		}
	}

	results := make([]result, len(subjects))
	for i, s := range subjects {
		if s.diagnostic {
			results[i] = result{uncontendedP50: percentile(s.uncontended, 50)}
			fmt.Fprintf(stderr, "# %s (diagnostic): uncontended n=%d p50=%s p90=%s\n", s.name, len(s.uncontended),
				results[i].uncontendedP50.Round(time.Microsecond), percentile(s.uncontended, 90).Round(time.Microsecond))
			continue
		}
		res := result{
			uncontendedP50: percentile(s.uncontended, 50),
			handoffP50:     percentile(s.gaps, 50),
			handoffP99:     percentile(s.gaps, 99),
			chainMaxWait:   percentile(s.chains, 50),
		}
		if s.redis {
			var err error
			if res.idleCmds, err = idle(ctx, s.clients, srv, "bench:"+s.name+":idle", cfg.idle, stderr); err != nil {
				return nil, fmt.Errorf("%s: idle: %w", s.name, err)
			}
		}
		fmt.Fprintf(stderr, "# %s: uncontended n=%d p90=%s; handoff gaps n=%d p90=%s max=%s; longest wait per round over %d rounds: median %s, worst %s\n",
			s.name, len(s.uncontended), percentile(s.uncontended, 90).Round(time.Microsecond),
			len(s.gaps), percentile(s.gaps, 90).Round(time.Microsecond), slices.Max(s.gaps).Round(time.Microsecond),
			len(s.chains), res.chainMaxWait.Round(time.Millisecond), slices.Max(s.chains).Round(time.Millisecond))
		results[i] = res
	}
	return results, nil
}

// uncontended times acquire+release of distinct keys, numbered from to to, by one client.
func uncontended(ctx context.Context, s *subject, from, to int) ([]time.Duration, error) {
	samples := make([]time.Duration, 0, to-from)
	for i := from; i < to; i++ {
		key := fmt.Sprintf("bench:%s:uncontended:%d", s.name, i)
		start := time.Now()
		release, err := s.single.acquire(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("acquire %s: %w", key, err)
		}
		if err := release(ctx); err != nil {
			return nil, fmt.Errorf("release %s: %w", key, err)
		}
		samples = append(samples, time.Since(start))
	}
	return samples, nil
}

// handoffRound: clients[0] holds key while the others queue on it, then releases; each
// waiter holds it for hold and releases. It returns the gap from each release call to the
// grant that followed it, and the longest wait from the first release to a grant.
func handoffRound(ctx context.Context, clients []client, key string, hold time.Duration) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	release, err := clients[0].acquire(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("first holder: %w", err)
	}
	var (
		mu                        sync.Mutex
		firstRelease, lastRelease time.Time
		gaps                      []time.Duration
		longest                   time.Duration
		wg                        sync.WaitGroup
		errs                      = make(chan error, len(clients))
	)
	for _, c := range clients[1:] {
		wg.Go(func() {
			rel, err := c.acquire(ctx, key)
			if err != nil {
				errs <- err
				return
			}
			now := time.Now()
			mu.Lock()
			gaps = append(gaps, now.Sub(lastRelease))
			longest = max(longest, now.Sub(firstRelease))
			mu.Unlock()
			time.Sleep(hold) // the work done under the lock
			mu.Lock()
			lastRelease = time.Now()
			mu.Unlock()
			if err := rel(ctx); err != nil {
				errs <- fmt.Errorf("release: %w", err)
			}
		})
	}
	time.Sleep(settle) // let every waiter queue up
	mu.Lock()
	firstRelease = time.Now()
	lastRelease = firstRelease
	mu.Unlock()
	err = release(ctx)
	wg.Wait()
	close(errs)
	if err != nil {
		return nil, 0, fmt.Errorf("first holder release: %w", err)
	}
	for err := range errs {
		return nil, 0, err
	}
	return gaps, longest, nil
}

// idle holds key with clients[0] for d while the other clients wait for it, and returns
// the Redis commands per second per waiter over that time.
func idle(ctx context.Context, clients []client, srv *redisServer, key string, d time.Duration, stderr io.Writer) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	release, err := clients[0].acquire(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("holder: %w", err)
	}
	waiters := clients[1:]
	var wg sync.WaitGroup
	errs := make(chan error, len(waiters))
	for _, c := range waiters {
		wg.Go(func() {
			rel, err := c.acquire(ctx, key)
			if err == nil {
				err = rel(ctx)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	time.Sleep(settle)
	before, err := srv.commandStats()
	if err != nil {
		return 0, errors.Join(err, release(ctx))
	}
	time.Sleep(d)
	after, err := srv.commandStats()
	if err != nil {
		return 0, errors.Join(err, release(ctx))
	}
	if err := release(ctx); err != nil {
		return 0, fmt.Errorf("holder release: %w", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, err
	}
	var calls int64
	var detail []string
	for name, n := range after {
		if delta := n - before[name]; delta > 0 {
			if name == "info" {
				delta-- // the first INFO counts itself
			}
			calls += delta
			detail = append(detail, fmt.Sprintf("%s=%d", name, delta))
		}
	}
	slices.Sort(detail)
	fmt.Fprintf(stderr, "# %s idle commands over %s (scripts' inner calls included): %s\n", key, d, strings.Join(detail, " "))
	return float64(calls) / float64(len(waiters)) / d.Seconds(), nil
}

// percentile is the nearest-rank p-th percentile of samples.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}
