package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
)

// Many-daemons benchmark parameters (issue 14, item 4).
const (
	haPipelines   = 50
	haRunsPerPipe = 4  // 200 runs in all
	haApps        = 30 // each pipeline deploys 3, so each application is in 5 pipelines
)

// BenchmarkManyDaemons starts 1, 2 and then 3 daemons (the real binary, as child processes)
// sharing one Redis, a private redis-server ("redis") or a Cluster of three masters
// ("cluster"), and one fake Coolify whose calls answer at once, whose deployments take no
// time (the daemon polls a deployment every 2 s, so any duration would be 2 s per service,
// one service at a time) and whose rate limit is off (the daemons' pacing too). Per iteration it triggers 200
// runs at once, 4 of each of 50 pipelines that share their services (pipeline p deploys
// applications 2p, 2p+1 and 2p+2 of 30), the runs of pipeline p going to daemon p+k mod n
// for its k-th run (one client goroutine per pipeline, back to back), and waits for every
// run to end. Each run must succeed, and the fake's own history must keep every promise of
// coolifytest.Checks: above all, no mutating request hits an application while another
// run's deployment of it is in progress, and no two leases' writes interleave on one.
//
// It reports runs/min (200 runs over first trigger to the last run's end), one÷this (one
// daemon's runs/min over these daemons', in the same run; for 2 and 3 daemons), the daemons' CPU time per run
// (daemon-cpu-ms/run, start-up and shutdown included), and the p50 and p99 run latency (each run's created_at to its ended_at, both the daemon's). Every run takes
// the shared coolify:phase1 and coolify:phase2 leases, so runs go through each phase one at
// a time whatever the daemon count: more daemons add availability, not throughput; the
// figures show what the lease handoffs between processes cost. Run it with, e.g.:
//
//	go test -bench ManyDaemons -run '^$' -benchtime 1x ./cmd/orchestrator
func BenchmarkManyDaemons(b *testing.B) {
	bin := buildDaemon(b)
	for _, topo := range []string{"redis", "cluster"} {
		var one float64 // runs/min of one daemon on topo, measured first
		for n := 1; n <= 3; n++ {
			b.Run(fmt.Sprintf("%s/daemons=%d", topo, n), func(b *testing.B) {
				var url string
				if topo == "redis" {
					url = redistest.Start(b).URL()
				} else {
					url = redistest.StartCluster(b, redistest.ClusterOptions{}).URL()
				}
				cf := coolifytest.NewServer(b, coolifytest.WithTiming(coolifytest.Timing{}), coolifytest.WithConcurrentBuilds(haApps), coolifytest.WithoutRateLimit())
				pipes := writePipelines(b, b.TempDir(), cf, "ha", haPipelines, haApps)
				daemons := make([]*loadDaemon, n)
				for i := range daemons {
					daemons[i] = runDaemon(b, bin, cf, b.TempDir(), pipes, url)
				}
				var lat []time.Duration
				var took time.Duration
				runs, deploys := 0, 0
				for i := 0; b.Loop(); i++ {
					l, t := haRound(b, daemons, i)
					lat = append(lat, l...)
					took += t
					runs += len(l)
					h := cf.History()
					if broken := h.Broken(); len(broken) > 0 {
						b.Fatalf("round %d, %d daemons on %s:\n%s", i, n, topo, strings.Join(broken, "\n"))
					}
					deploys = len(h.Spans)
				}
				var cpu time.Duration
				for _, d := range daemons {
					d.stop(b)
					cpu += d.cmd.ProcessState.UserTime() + d.cmd.ProcessState.SystemTime()
				}
				// The daemons' CPU time (user and system, from start to exit) per run: what more
				// daemons cost the machine's cores beside the handoffs between them.
				b.ReportMetric(ms(cpu)/float64(runs), "daemon-cpu-ms/run")
				perMin := float64(runs) / took.Minutes()
				b.ReportMetric(perMin, "runs/min")
				if n == 1 {
					one = perMin
				} else if one > 0 {
					// Adding a daemon must not slow the fleet: one daemon's runs/min over these
					// daemons', measured in the same run (goal: at most 1/0.9).
					b.ReportMetric(one/perMin, "one÷this")
				}
				b.ReportMetric(ms(percentile(lat, 50)), "run-p50-ms")
				b.ReportMetric(ms(percentile(lat, 99)), "run-p99-ms")
				b.ReportMetric(float64(deploys)/float64(runs), "deploys/run")
			})
		}
	}
}

// haRound triggers haPipelines × haRunsPerPipe runs over the daemons, waits for them all to
// end (each must have succeeded) and returns each run's latency, created to ended, and the
// time from the first trigger to the last end.
func haRound(b *testing.B, daemons []*loadDaemon, round int) ([]time.Duration, time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type run struct {
		d  *loadDaemon
		id string
	}
	var (
		mu    sync.Mutex
		runs  []run
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for p := range haPipelines {
		wg.Go(func() {
			for k := range haRunsPerPipe {
				d := daemons[(p+k)%len(daemons)]
				body := fmt.Sprintf(`{"build":"%d-%d-%d","image_tag":"v%d-%d-%d"}`, round, p, k, round, p, k)
				id, _, err := d.trigger(ctx, fmt.Sprintf("ha%d", p), body)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if err == nil {
					runs = append(runs, run{d, id})
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatalf("round %d: %v", round, first)
	}

	lat := make([]time.Duration, 0, len(runs))
	var last time.Time
	for _, r := range runs {
		if err := r.d.follow(ctx, r.id); err != nil {
			b.Fatalf("round %d: %v\n%s", round, err, r.d.logText())
		}
		var got struct {
			Status, Reason string
			CreatedAt      time.Time `json:"created_at"`
			EndedAt        time.Time `json:"ended_at"`
		}
		if _, err := r.d.get(ctx, "/v1/runs/"+r.id, &got); err != nil {
			b.Fatal(err)
		}
		if got.Status != "succeeded" {
			b.Fatalf("run %s: %s (%s)\n%s", r.id, got.Status, got.Reason, r.d.logText())
		}
		lat = append(lat, got.EndedAt.Sub(got.CreatedAt))
		if got.EndedAt.After(last) {
			last = got.EndedAt
		}
	}
	return lat, last.Sub(start)
}
