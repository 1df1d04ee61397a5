// Command benchha measures many daemons on one Redis and on a Redis Cluster (issue 14, item
// 4): it runs cmd/orchestrator's BenchmarkManyDaemons -runs times (each builds the daemon and
// runs 1, 2 and 3 of them as child processes) and writes the medians, ranges and load
// averages to -out.
//
//	cd bench && go run ./cmd/benchha                  # ~5 min; writes RESULTS-ha.md
//	cd bench && go run ./cmd/benchha -runs 3 -json figures.json
//
// One run takes about 65 s, the build aside, 50 of them on the Cluster. `make bench` runs it
// with -bench '^BenchmarkManyDaemons$/^redis$/' (the private redis-server only, about 15 s
// a run), so its figures and goal join bench/RESULTS.md.
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
What ` + "`BenchmarkManyDaemons`" + ` measures (cmd/orchestrator/ha_bench_test.go): 1, 2 and then 3
real daemons (` + "`orchestrator serve`" + `, built and run as child processes) sharing one Redis:
a private redis-server (` + "`redis`" + `) or a Cluster of three masters (` + "`cluster`" + `, the
daemons' ` + "`redis_url`" + ` naming every node), and one fake Coolify whose calls answer at
once and whose deployments take no time: the daemon polls a deployment every 2 s, so any
duration would cost 2 s per service, one service at a time, and 200 runs would take
20 minutes measuring the poll interval. Coolify's rate limit is **off**, on the fake and
in the daemons' pacing (` + "`coolify.rate_limit: 0`" + `): with it on, 200 runs would measure the
throttle. Per iteration, 200 runs are triggered at once through the HTTP API: 4 runs of each
of 50 pipelines that share their services (pipeline p deploys applications 2p, 2p+1 and
2p+2 of 30, so each application is in 5 pipelines), the k-th run of pipeline p on daemon
p+k mod n (one client per pipeline, back to back); then every run is followed to its end.

Checked every iteration (the benchmark fails otherwise): each run succeeded; the fake saw
3 deployments per run; and the fake's own history keeps every promise of
` + "`coolifytest.Checks`" + `: no mutating request hit an application while another run's
deployment of it was in progress, no two leases' writes interleaved on one application, no
deployment ran another run's config, every application ends running the config last synced
to it, every write carried its run and fence. With deployments that take no time, the first
of these has no inside to fall into; the second and third are what catches two holders here.
Seen failing on purpose: with each daemon
given its own redis-server instead (leases not shared), runs fail their read-back and the
history shows interleaved leases and a deployment running another run's config.
` + "`deploys/run`" + ` is below 3 because a run skips a service a newer run has synced since
(the fence check of Phase 2), which the newer run then deploys.

` + "`runs/min`" + `: 200 runs over the time from the first trigger to the last run's end.
` + "`one÷this`" + `: one daemon's runs/min over these daemons', measured in the same run, for 2
and 3 daemons (goal: at most 1/0.9, so that n daemons do at least 0.9× what one does).
` + "`run-p50-ms`" + `, ` + "`run-p99-ms`" + `: each run's ` + "`created_at`" + ` to its ` + "`ended_at`" + `
(the daemon's clock), so the time a run queued behind the others counts: with 200 runs
arriving at once, the p99 is close to the whole batch's time.
` + "`daemon-cpu-ms/run`" + `: the daemons' CPU time (user and system, each from its start to its
exit, start-up and shutdown included) over the runs: what spreading the runs over more
processes costs the cores they share.

Every run of every pipeline takes the shared ` + "`coolify:phase1`" + ` and ` + "`coolify:phase2`" + `
leases, so runs go through each phase one at a time whatever the number of daemons: more
daemons add availability (a run triggered on a daemon that dies is taken over), not
throughput. What the figures show is what spreading the runs over processes costs or
saves: lease handoffs between processes instead of within one, against more CPU for the
HTTP and run-store work. On this 2-core machine every daemon, the redis-servers and the
fake share the same two cores, so a third daemon cannot bring CPU of its own.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := gobench.Main(ctx, gobench.Program{
		Spec:    gobench.Spec{Pkg: "cmd/orchestrator", Bench: "^BenchmarkManyDaemons$", Benchtime: "1x"},
		Out:     "RESULTS-ha.md",
		Section: "ha",
		Command: "cd bench && go run ./cmd/benchha",
		Title:   "Many daemons sharing one Redis",
		Table:   "200 runs of 50 pipelines sharing 30 services, at once",
		Intro:   intro,
		Metrics: []string{"runs/min", "one÷this", "run-p50-ms", "run-p99-ms", "deploys/run", "daemon-cpu-ms/run"},
		// Adding a daemon must not slow the fleet: n daemons do at least 0.9× what one does
		// (one÷this is reported for 2 and 3 daemons only).
		Goals: []gobench.Goal{{Metric: "one÷this", Max: 1 / 0.9}},
	}, os.Args, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchha:", err)
		os.Exit(1)
	}
}
