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

// pattern is how the waiters of a handoff round arrive.
type pattern int

const (
	// burst: every waiter asks at once, as a CI fan-out does, and waits settle before the
	// first holder releases.
	burst pattern = iota
	// staggered: each waiter asks at a uniformly random time over the window; the first
	// holder releases at the end of it. Pollers' retries then fall at random phases
	// instead of in lockstep.
	staggered
)

var patterns = []pattern{burst, staggered}

func (p pattern) String() string { return [...]string{"burst", "staggered"}[p] }

// handoffs are the results of one arrival pattern.
type handoffs struct {
	gaps, chains []time.Duration
}

type handoffResult struct {
	p50, p99, chainMaxWait time.Duration
}

type result struct {
	uncontendedP50 time.Duration
	handoff        [2]handoffResult // by pattern
	idleCmds       float64
}

// subject is one implementation with its clients: one for the uncontended phase, and a
// first holder plus the waiters for the others.
type subject struct {
	impl
	single  client
	clients []client // clients[0] starts each round by holding the key

	uncontended []time.Duration
	handoffs    [2]handoffs // by pattern
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

	// Turns in a new random order each round: whoever runs right after an implementation
	// that leaves work behind (the SQLite drivers wake their pollers after a write) is not
	// always the same one.
	rng := rand.New(rand.NewPCG(1, 2))
	if err := uncontendedTurns(ctx, subjects, cfg, rng); err != nil {
		return nil, err
	}

	for r := range cfg.rounds {
		for _, p := range patterns {
			for _, i := range rng.Perm(len(subjects)) {
				s := subjects[i]
				if s.diagnostic {
					continue
				}
				key := fmt.Sprintf("bench:%s:%s:%d", s.name, p, r)
				g, chain, err := handoffRound(ctx, s.clients, key, p, cfg, rng)
				if err != nil {
					return nil, fmt.Errorf("%s: %s round %d: %w", s.name, p, r, err)
				}
				s.handoffs[p].gaps = append(s.handoffs[p].gaps, g...)
				s.handoffs[p].chains = append(s.handoffs[p].chains, chain)
			}
		}
	}

	results := make([]result, len(subjects))
	for i, s := range subjects {
		results[i].uncontendedP50 = percentile(s.uncontended, 50)
		if s.diagnostic {
			fmt.Fprintf(stderr, "# %s (diagnostic): uncontended n=%d p50=%s p90=%s\n", s.name, len(s.uncontended),
				results[i].uncontendedP50.Round(time.Microsecond), percentile(s.uncontended, 90).Round(time.Microsecond))
			continue
		}
		fmt.Fprintf(stderr, "# %s: uncontended n=%d p90=%s\n", s.name, len(s.uncontended), percentile(s.uncontended, 90).Round(time.Microsecond))
		for _, p := range patterns {
			h := s.handoffs[p]
			results[i].handoff[p] = handoffResult{p50: percentile(h.gaps, 50), p99: percentile(h.gaps, 99), chainMaxWait: percentile(h.chains, 50)}
			fmt.Fprintf(stderr, "#   %s: handoff gaps n=%d p90=%s max=%s; longest wait per round over %d rounds: median %s, worst %s\n",
				p, len(h.gaps), percentile(h.gaps, 90).Round(time.Microsecond), percentile(h.gaps, 100).Round(time.Microsecond),
				len(h.chains), percentile(h.chains, 50).Round(time.Millisecond), percentile(h.chains, 100).Round(time.Millisecond))
		}
		if s.redis {
			var err error
			if results[i].idleCmds, err = idle(ctx, s.clients, srv, "bench:"+s.name+":idle", cfg.idle, stderr); err != nil {
				return nil, fmt.Errorf("%s: idle: %w", s.name, err)
			}
		}
	}
	return results, nil
}

// uncontendedTurns runs the uncontended phase: after a warm-up, cfg.n acquire+release
// pairs per subject, cfg.interleave at a time, the subjects taking turns in a new random
// order each round.
func uncontendedTurns(ctx context.Context, subjects []*subject, cfg config, rng *rand.Rand) error {
	const warmup = 100
	for from := 0; from < warmup+cfg.n; from += cfg.interleave {
		for _, i := range rng.Perm(len(subjects)) {
			s := subjects[i]
			got, err := uncontended(ctx, s, from, min(from+cfg.interleave, warmup+cfg.n))
			if err != nil {
				return fmt.Errorf("%s: uncontended: %w", s.name, err)
			}
			if from >= warmup {
				s.uncontended = append(s.uncontended, got...)
			}
		}
	}
	return nil
}

// pairedNames are the implementations of the uncontended ratio's goal, measured as issue 13
// says: interleaved with each other alone (-only orchestrator-redis,redislock-10ms).
var pairedNames = [...]string{"orchestrator-redis", "redislock-10ms"}

// paired measures the uncontended acquire+release p50 of pairedNames, taking turns with
// each other alone (new clients, keys of their own named after phase), and returns them in
// that order. ok is false when the run does not include both.
func paired(ctx context.Context, impls []impl, cfg config, phase string) (p50s [len(pairedNames)]time.Duration, ok bool, err error) {
	subjects := make([]*subject, 0, len(pairedNames))
	defer func() {
		for _, s := range subjects {
			s.close()
		}
	}()
	for _, name := range pairedNames {
		i := slices.IndexFunc(impls, func(im impl) bool { return im.name == name })
		if i < 0 {
			return p50s, false, nil
		}
		s := &subject{impl: impls[i]}
		s.name += "-paired-" + phase
		if s.single, err = impls[i].newClient(); err != nil {
			return p50s, false, fmt.Errorf("%s: new client: %w", impls[i].name, err)
		}
		subjects = append(subjects, s)
	}
	if err := uncontendedTurns(ctx, subjects, cfg, rand.New(rand.NewPCG(3, 4))); err != nil {
		return p50s, false, err
	}
	for i, s := range subjects {
		p50s[i] = percentile(s.uncontended, 50)
	}
	return p50s, true, nil
}

// uncontended times acquire+release of distinct keys, numbered from to to, by one client.
func uncontended(ctx context.Context, s *subject, from, to int) ([]time.Duration, error) {
	samples := make([]time.Duration, 0, to-from)
	for i := from; i < to; i++ {
		key := fmt.Sprintf("bench:%s:uncontended:%d", s.name, i)
		h, err := s.single.acquire(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("acquire %s: %w", key, err)
		}
		start, end, err := h.release(ctx)
		if err != nil {
			return nil, fmt.Errorf("release %s: %w", key, err)
		}
		samples = append(samples, h.granted.Sub(h.asked)+end.Sub(start))
	}
	return samples, nil
}

// handoffRound: clients[0] holds key while the others queue on it, arriving as p says,
// then releases; each waiter holds it for cfg.hold and releases. It returns the gap from
// each release call to the grant that followed it (counted only if that waiter was
// already waiting then), and the longest wait from the first release to a grant.
func handoffRound(ctx context.Context, clients []client, key string, p pattern, cfg config, rng *rand.Rand) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	first, err := clients[0].acquire(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("first holder: %w", err)
	}
	start := time.Now()
	arrive := make([]time.Duration, len(clients)-1)
	wait := settle
	if p == staggered {
		for i := range arrive {
			arrive[i] = time.Duration(rng.Int64N(int64(cfg.window)))
		}
		wait = cfg.window + settle/10 // the last arrival has time to queue
	}
	// turn is one waiter's time with the lock.
	type turn struct{ asked, granted, released time.Time }
	var (
		wg    sync.WaitGroup
		turns = make([]turn, len(clients)-1)
		errs  = make(chan error, len(clients))
	)
	for i, c := range clients[1:] {
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(arrive[i])))
			h, err := c.acquire(ctx, key)
			if err != nil {
				errs <- err
				return
			}
			time.Sleep(cfg.hold) // the work done under the lock
			released, _, err := h.release(ctx)
			if err != nil {
				errs <- fmt.Errorf("release: %w", err)
				return
			}
			turns[i] = turn{asked: h.asked, granted: h.granted, released: released}
		})
	}
	time.Sleep(time.Until(start.Add(wait)))
	firstRelease, _, err := first.release(ctx)
	wg.Wait()
	close(errs)
	if err != nil {
		return nil, 0, fmt.Errorf("first holder release: %w", err)
	}
	for err := range errs {
		return nil, 0, err
	}
	// The lock passes from one turn to the next in the order of grants.
	slices.SortFunc(turns, func(a, b turn) int { return a.granted.Compare(b.granted) })
	var (
		gaps    []time.Duration
		longest time.Duration
		prev    = firstRelease
	)
	for _, t := range turns {
		if t.asked.Before(prev) {
			gaps = append(gaps, t.granted.Sub(prev))
		}
		longest = max(longest, t.granted.Sub(firstRelease))
		prev = t.released
	}
	return gaps, longest, nil
}

// idle holds key with clients[0] for d while the other clients wait for it, and returns
// the Redis commands per second per waiter over that time.
func idle(ctx context.Context, clients []client, srv *redisServer, key string, d time.Duration, stderr io.Writer) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	first, err := clients[0].acquire(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("holder: %w", err)
	}
	release := func(ctx context.Context) error {
		_, _, err := first.release(ctx)
		return err
	}
	waiters := clients[1:]
	var wg sync.WaitGroup
	errs := make(chan error, len(waiters))
	for _, c := range waiters {
		wg.Go(func() {
			h, err := c.acquire(ctx, key)
			if err == nil {
				_, _, err = h.release(ctx)
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
		if delta := n.calls - before[name].calls; delta > 0 {
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
