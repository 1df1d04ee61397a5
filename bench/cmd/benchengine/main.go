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
exchange. ` + "`cpu-ms/service/phase`" + ` is the benchmark process's CPU time (engine, SQLite,
HTTP client and the fake Coolify; not redis-server) over the same runs: on this 2-core
machine shared with other work, wall time grows with the load much more than CPU time does.
` + "`run-writes/service`" + ` counts run-store Updates; since the step rows/fields
(issue 13) each writes the run's header and only the steps it changed, not the whole run.

Goal (issue 13): ms/service/phase ≤ 2 on both backends.

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
		Metrics: []string{"ms/service/phase", "cpu-ms/service/phase", "coolify-ms/service/phase", "calls/service", "run-writes/service"},
		Goals:   []gobench.Goal{{Metric: "ms/service/phase", Max: 2}},
	}, os.Args, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchengine:", err)
		os.Exit(1)
	}
}
