// Command benchengine measures the engine's own overhead on a 100-service pipeline, on both
// run-store and lock backends (issue 13, item 3): it runs phases.BenchmarkOverhead100
// -runs times and writes the medians, ranges and load averages to -out.
//
//	cd bench && go run ./cmd/benchengine              # ~1 min; writes RESULTS-engine.md
//	cd bench && go run ./cmd/benchengine -runs 3 -json figures.json
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/deploy-orchestrator/orchestrator/bench/internal/gobench"
)

const intro = `
What ` + "`phases.BenchmarkOverhead100`" + ` measures (phases/bench_test.go): one run of a
100-service pipeline per iteration (each service gets a new image tag and one changed env
var, so Phase 1 writes and Phase 2 deploys every service), on the real engine, lock and
run-store backends (SQLite files in a temp dir; Redis on a private redis-server) and the
fake Coolify on a loopback port that answers at once, deployments taking no time.

    ms/service/phase = (run wall time − time inside Coolify calls) / (2 phases × 100 services)

Run wall time: Submit to the end of Wait. Time inside Coolify calls: the union of the
[Start, End] intervals of the requests the fake logged. Everything else is the engine's
overhead: locks, run-store writes and events, diffing, the client half of each HTTP
exchange.

` + "`floor-ms/service/phase`" + ` is the least the protocol must ask of the backends for one
service in one phase, timed in the same process on the same backends right before and right
after each of those runs (their mean), for every service-phase of a run of the same size,
one after the other as the engine goes through them: take the service's lock and release
it; record the step as started under the lease's fence (a run-store Update with its event:
it must be stored before anything is written to Coolify, since a takeover reads it to know
the service may carry the run's writes); record the mark "synced (deployed) by run R at
fence F" (what Phase 2, the stale-build guard and the write rule read); record the step's
outcome (an Update with its event, stored before the lease is released, or the next holder
and a takeover cannot tell what the service was left in). So 2 of the engine's 3 run
writes per service-phase (` + "`run-writes/service`" + `, over both phases, is about 6) are
mandatory; the rest (lock waits, ` + "`deploy_requested_at`" + `, the deployment's UUID, the
run's start, phases and end), every read
(marks, ownership checks) and the Coolify calls' client half are left out: the floor is a
lower bound, which the engine cannot reach. ` + "`overhead÷floor`" + ` is ms/service/phase over
it, how many floors the engine spends per service-phase. A slower machine slows the floor
with the run, as it does not slow a bound in milliseconds, so the goal is on the ratio.

` + "`cpu-ms/service/phase`" + ` is the benchmark process's CPU time (engine, SQLite,
HTTP client and the fake Coolify; not redis-server) over the same runs, the floor's left out:
on this 2-core machine shared with other work, wall time grows with the load much more than
CPU time does. ` + "`run-writes/service`" + ` counts run-store Updates; since the step rows/fields
(issue 13) each writes the run's header and only the steps it changed, not the whole run.

Goal (issue 39, translating issue 13's ms/service/phase ≤ 2 on both backends):
overhead÷floor ≤ 3.1 on SQLite, ≤ 4.4 on Redis. The 2 ms bound entered the code at f47085e
(2026-12-03). The same floor on that commit's backends (built from it, its
BenchmarkOverhead100 given this floor, run alternately with this code nine times each,
2026-12-06 11:45–11:50 UTC at load 2.8–4.1) cost 0.643 ms on SQLite (0.55–0.88) and 0.457
ms on Redis (0.33–0.50), against 0.431 and 0.421 ms on this code's backends: 2 ms was
2 ÷ 0.643 = 3.11 floors on SQLite and 2 ÷ 0.457 = 4.38 on Redis, rounded to two figures.
In those runs this code read 3.62× and 3.90× (medians; 1.54 and 1.62 ms/service/phase): the
SQLite goal is missed, the Redis one met. The engine at f47085e read 2.67× and 3.01× (1.68
and 1.39 ms; 5.09 run writes per service against 6.10): what it gained since (the ownership
epoch read before each outside write, the stale-build guard's mark reads,
` + "`deploy_requested_at`" + `) costs about 0.9 floor on either backend. The Redis floor is the
noisier: from one run to the next it sits near 0.27 or near 0.42 ms (over those nine runs the
Redis ratio ranged 3.5–4.9 while ms/service/phase ranged 1.28–1.70), so the goal is judged
on medians. ms/service/phase stays as information: its old bound of 2 ms measured the
machine's load as much as the engine.

Before the step records (main at 9d8a0ec, where each write rewrote the whole run, 63 KB of
JSON for 100 services), measured back to back with this code on 2026-12-03 at load 10–11:
SQLite 10.8 and 7.3 ms/service/phase before, 4.6 and 3.8 after; Redis 4.7 and 3.3 before,
2.4 and 2.1 after.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := gobench.Main(ctx, gobench.Program{
		Spec:    gobench.Spec{Pkg: "phases", Bench: "^BenchmarkOverhead100$", Benchtime: "3x"},
		Out:     "RESULTS-engine.md",
		Section: "engine",
		Command: "cd bench && go run ./cmd/benchengine",
		Title:   "Engine overhead",
		Table:   "100 services, zero-latency fakes",
		Intro:   intro,
		Metrics: []string{"ms/service/phase", "floor-ms/service/phase", "overhead÷floor", "cpu-ms/service/phase",
			"coolify-ms/service/phase", "calls/service", "run-writes/service"},
		// issue 13's 2 ms over the floor as it cost at f47085e, where that goal was set (see intro)
		Goals: []gobench.Goal{{Metric: "overhead÷floor", Bench: "sqlite", Max: 3.1},
			{Metric: "overhead÷floor", Bench: "redis", Max: 4.4}},
		Headlines: []string{"ms/service/phase", "floor-ms/service/phase"},
	}, os.Args, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchengine:", err)
		os.Exit(1)
	}
}
