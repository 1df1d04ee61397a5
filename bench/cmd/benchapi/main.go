// Command benchapi measures the API's read latency and the daemon's memory under load
// (issue 13, item 3): it runs cmd/orchestrator's BenchmarkAPILoad -runs times (each builds
// the daemon and runs it as a child process) and writes the medians, ranges and load
// averages to -out.
//
//	cd bench && go run ./cmd/benchapi                 # ~2 min; writes RESULTS-api.md
//	cd bench && go run ./cmd/benchapi -runs 3 -json figures.json
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
What ` + "`BenchmarkAPILoad`" + ` measures (cmd/orchestrator/load_bench_test.go): the real
daemon (` + "`orchestrator serve`" + `, built and run as a child process, SQLite state dir or a
private redis-server) on the fake Coolify (no latency, instant deployments). Per iteration:
200 runs triggered across 5 pipelines of 3 services (one client per pipeline, back to back)
while reads go out **open-loop**: a ` + "`GET /v1/runs`" + ` (first page, 50 runs) and a
` + "`GET /v1/runs/{id}`" + ` (a random run triggered so far) are each due every 12.5 ms
(160 reads/s), and a ` + "`GET /healthz`" + ` every 10 ms, until every run has ended (each must
succeed).

Each request is sent at its intended time from its own goroutine (a slow answer never
holds back the next one) and its latency is measured **from that intended time** to the
end of the answer, so when the daemon or the machine stalls, every request that should have
gone out during the stall counts it: the correction for coordinated omission (done by hand
in ` + "`openLoop`" + `, about 40 lines, rather than with vegeta, whose latencies start when a
worker actually sends, and which would add a dependency tree for one loop).
` + "`healthz-p99-ms`" + ` is what the machine adds to a request that does nothing: the floor under
every p99 here. Peak RSS is the daemon's ` + "`VmHWM`" + ` (/proc/<pid>/status). The trigger rate
limit is off in the daemon's config.

Goals (issue 13): read p99 ≤ 10 ms; peak RSS ≤ 60 MB.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := gobench.Main(ctx, gobench.Program{
		Spec:    gobench.Spec{Pkg: "cmd/orchestrator", Bench: "^BenchmarkAPILoad$", Benchtime: "1x"},
		Out:     "RESULTS-api.md",
		Section: "api",
		Command: "cd bench && go run ./cmd/benchapi",
		Title:   "API under load",
		Table:   "200 runs, 160 reads/s open-loop",
		Intro:   intro,
		Metrics: []string{"read-p99-ms", "read-p50-ms", "list-p99-ms", "get-p99-ms", "healthz-p99-ms", "peak-rss-MB", "trigger-p50-ms", "trigger-p99-ms", "runs/s"},
		Goals:   []gobench.Goal{{Metric: "read-p99-ms", Max: 10}, {Metric: "peak-rss-MB", Max: 60}},
	}, os.Args, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchapi:", err)
		os.Exit(1)
	}
}
