package main

import (
	"fmt"
	"time"

	"github.com/deploy-orchestrator/orchestrator/bench/internal/figures"
)

// Goals that the report checks. Those of the Redis backend are ratios to bsm/redislock
// (redislock-10ms) measured in the same run (issue 39), so they do not depend on the load of
// the machine at the time: burst handoff p50 and p99, and the paired uncontended p50.
const (
	redisHandoffP50Ratio = 0.1 // burst handoff p50 ÷ redislock-10ms's
	redisHandoffP99Ratio = 0.5 // burst handoff p99 ÷ redislock-10ms's
	redisRatioGoal       = 1.2 // uncontended p50 ÷ redislock-10ms's
	sqliteProcsP50Goal   = 5   // ms, both patterns (no peer to compare with)
)

// peer is the implementation the Redis backend's goals are ratios to.
const peer = "redislock-10ms"

// addFigures turns one run's results into benchreport figures.
func addFigures(rep *figures.Report, impls []impl, results []result, cfg config) {
	rep.About = fmt.Sprintf(`One local redis-server (started by the program, no persistence), and SQLite files in a
temporary directory. orchestrator-sqlite: every client in this process, sharing one handle;
orchestrator-sqlite-procs: each client a child process of its own on one file, as `+"`serve`"+` and
`+"`run`"+` share a state directory. Our backends run through locks.Locker with its defaults.

- **handoff**: %[1]d waiters, each with connections of its own, queue on one key held by another
  client; each holds it %[2]s, releases and leaves. The figure is the gap from the start of a
  release call to the next grant, over %[3]d rounds per pattern. **burst**: every waiter asks at
  once (a CI fan-out); **staggered**: each asks at a uniformly random time over %[4]s, and the
  first holder releases at its end. **longest wait**: from the first release of a round to its
  last grant, median over the rounds.
- **acquire+release p50**: distinct keys, %[5]d times per implementation, one operation per turn in
  a random order each round (a paired comparison under the same machine load).
  orchestrator-redis-driver is the Redis driver alone (TryAcquire and Release, no Locker), to
  split our figure into the driver's share and the Locker's. **paired**: the same, with
  orchestrator-redis and redislock-10ms taking turns with each other alone (new clients), as
  the goal on their ratio is defined (`+"`-only orchestrator-redis,redislock-10ms`"+`):
  **first** before every other phase (the goal's measure), **last** after them all.
- **idle commands**: Redis commands per waiter per second while the key is held %[6]s (INFO
  commandstats, scripts' inner calls included).`,
		cfg.waiters, cfg.hold, cfg.rounds, cfg.window, cfg.n, cfg.idle)

	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	peerAt := -1
	for i, im := range impls {
		if im.name == peer {
			peerAt = i
		}
	}
	for _, p := range patterns {
		table := "handoff, " + p.String()
		for i, im := range impls {
			if im.diagnostic {
				continue
			}
			h := results[i].handoff[p]
			var p50Goal float64
			if im.name == "orchestrator-sqlite-procs" {
				p50Goal = sqliteProcsP50Goal
			}
			rep.Add(figures.Figure{Table: table, Row: im.name, Column: "handoff p50", Unit: "ms", Value: ms(h.p50), Max: p50Goal, Headline: true})
			rep.Add(figures.Figure{Table: table, Row: im.name, Column: "handoff p99", Unit: "ms", Value: ms(h.p99), Headline: true})
			rep.Add(figures.Figure{Table: table, Row: im.name, Column: "longest wait", Unit: "ms", Value: ms(h.chainMaxWait)})
			if im.name == "orchestrator-redis" && p == burst && peerAt >= 0 {
				ph := results[peerAt].handoff[p]
				rep.Add(figures.Figure{Table: table, Row: im.name, Column: "p50 ÷ " + peer, Unit: "×",
					Value: float64(h.p50) / float64(ph.p50), Max: redisHandoffP50Ratio, Headline: true})
				rep.Add(figures.Figure{Table: table, Row: im.name, Column: "p99 ÷ " + peer, Unit: "×",
					Value: float64(h.p99) / float64(ph.p99), Max: redisHandoffP99Ratio, Headline: true})
			}
		}
	}
	for i, im := range impls {
		res := results[i]
		const table = "uncontended and idle"
		rep.Add(figures.Figure{Table: table, Row: im.name, Column: "acquire+release p50", Unit: "µs",
			Value: float64(res.uncontendedP50.Nanoseconds()) / 1e3, Headline: !im.diagnostic})
		if im.diagnostic {
			continue
		}
		if im.redis {
			rep.Add(figures.Figure{Table: table, Row: im.name, Column: "idle commands", Unit: "/waiter/s", Value: res.idleCmds})
		}
	}
}

// addPairedFigures adds the paired uncontended measures (see paired), first and last; the
// goal is on the first, measured as issue 13 defines it.
func addPairedFigures(rep *figures.Report, first, last [len(pairedNames)]time.Duration) {
	const table = "uncontended, paired"
	for _, ph := range []struct {
		name string
		p50s [len(pairedNames)]time.Duration
		goal float64
	}{{"first", first, redisRatioGoal}, {"last", last, 0}} {
		for i, name := range pairedNames {
			rep.Add(figures.Figure{Table: table, Row: name, Column: "p50, " + ph.name, Unit: "µs",
				Value: float64(ph.p50s[i].Nanoseconds()) / 1e3, Headline: true})
		}
		rep.Add(figures.Figure{Table: table, Row: pairedNames[0], Column: "÷ " + pairedNames[1] + ", " + ph.name, Unit: "×",
			Value: float64(ph.p50s[0]) / float64(ph.p50s[1]), Max: ph.goal, Headline: true})
	}
}

// addPriceFigures adds the price of the Redis backend's guarantees (see price.go).
func addPriceFigures(rep *figures.Report, pr []priceResult, cfg config) {
	if len(pr) == 0 {
		return
	}
	rep.About += fmt.Sprintf(`
- **price of guarantees**: the product's uncontended acquire+release layer by layer (the Locker
  over the driver, as the paired table times it; the driver alone), the driver's two scripts
  (measurement copies of their fast paths, straight on go-redis), then those scripts with one
  guarantee taken out at a time, against bsm/redislock's scripts and two bare PINGs, %[1]d pairs
  each in turn in a random order. The ratio is to bsm/redislock's pair in the same run, so the
  steps between rows are what each layer and each guarantee adds. **Redis time**: what the server
  spends on one pair (INFO commandstats over %[1]d more pairs of that variant alone, scripts with
  the commands they call), work that a slow round trip hides.`, cfg.price)
	// Headline: docs/benchmarks.md explains the uncontended ratio's gap from this table, so it quotes
	// it in the generated summary rather than copying it by hand.
	const table = "price of guarantees (uncontended pair)"
	bsm := pr[len(pr)-1].p50
	for _, r := range pr {
		rep.Add(figures.Figure{Table: table, Row: r.name, Column: "p50", Unit: "µs", Value: float64(r.p50.Nanoseconds()) / 1e3, Headline: true})
		rep.Add(figures.Figure{Table: table, Row: r.name, Column: "÷ bsm/redislock", Unit: "×", Value: float64(r.p50) / float64(bsm), Headline: true})
		rep.Add(figures.Figure{Table: table, Row: r.name, Column: "Redis time", Unit: "µs", Value: float64(r.redis.Nanoseconds()) / 1e3, Headline: true})
	}
}
