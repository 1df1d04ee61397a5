package phases_test

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Run them with, e.g.:
//
//	go test -bench . -run '^$' -benchtime 3x ./phases
//
// Both benchmarks drive the real engine (harness_test.go) over the real lock and run-store
// backends and the fake Coolify on a loopback port, once per backend. They measure the
// engine, not Coolify's throttle: the fake's rate limit and the clients' pacing are off
// (bench/cmd/benchpacing measures pacing).

// BenchmarkOverhead100 runs a pipeline of 100 services on a fake Coolify that answers at once
// and whose deployments take no time, and reports the orchestrator's overhead per service per
// phase:
//
//	overhead = (run wall time − time inside Coolify calls) / (2 phases × 100 services)
//
// The run wall time goes from Submit to the end of Wait (the run stored as ended). The time
// inside Coolify calls is the union of the [Start, End] intervals of the requests the fake
// logged, as the fake saw them (arrival to response written). Everything else is counted as
// overhead: locks, run-store writes and events, diffing, and the client's side of each HTTP
// exchange (encoding, the loopback round trip, decoding).
//
// floor-ms/service/phase is the least the protocol asks of the lock and run-store backends
// per service-phase (floorRun: a lock taken and released, two run writes and a mark), timed
// on the same backends right before and right after each run; overhead÷floor is the
// overhead over it, so that the goal (bench/cmd/benchengine) is set against the backends as
// they perform in the same run, not in milliseconds that depend on the machine's load.
// cpu-ms/service/phase is the process's CPU time over the same runs and services, the
// floor's left out (engine, SQLite, HTTP client and the fake Coolify, not redis-server): on
// a machine shared with other work, wall time grows with the load, CPU time much less.
//
// Each iteration is a new build with a new image tag, so Phase 1 really writes the tag and an
// env var of every service and Phase 2 really deploys all of them.
func BenchmarkOverhead100(b *testing.B) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			const n = 100
			h := newHarnessOn(b, backend, coolifytest.WithTiming(coolifytest.Timing{}), coolifytest.WithConcurrentBuilds(n), coolifytest.WithoutRateLimit())
			h.start(benchPipeline(h, "bench", n))
			var overhead, inCoolify, floor, floorCPU time.Duration
			var calls, writes int
			cpu0 := processCPU(b)
			timeFloor := func(i int) {
				c0 := processCPU(b)
				floor += floorRun(b, h, n, i)
				floorCPU += processCPU(b) - c0
			}
			for i := 0; b.Loop(); i++ {
				timeFloor(i) // before the run and after it: the floor sees the machine as the run does
				h.coolify.ResetRequests()
				wall, r := benchRun(b, h, "bench", i, n)
				reqs := h.coolify.Requests()
				busy := busyTime(reqs)
				overhead += wall - busy
				inCoolify += busy
				calls += len(reqs)
				writes += int(r.Version)
				timeFloor(i)
			}
			cpu := processCPU(b) - cpu0 - floorCPU
			iters := float64(b.N)
			floor /= 2 // timed twice per run
			b.ReportMetric(float64(overhead.Microseconds())/1000/iters/(2*n), "ms/service/phase")
			b.ReportMetric(float64(floor.Microseconds())/1000/iters/(2*n), "floor-ms/service/phase")
			b.ReportMetric(float64(overhead)/float64(floor), "overhead÷floor")
			b.ReportMetric(float64(cpu.Microseconds())/1000/iters/(2*n), "cpu-ms/service/phase")
			b.ReportMetric(float64(inCoolify.Microseconds())/1000/iters/(2*n), "coolify-ms/service/phase")
			b.ReportMetric(float64(calls)/iters/n, "calls/service")
			b.ReportMetric(float64(writes)/iters/n, "run-writes/service")
		})
	}
}

// BenchmarkMakespan20 runs a pipeline of 20 services on a fake Coolify that takes 50 ms to
// answer every call (deployments themselves take no time) and reports the run's makespan
// (Submit to the end of Wait) against the sum of the round trips the engine cannot avoid,
// each 50 ms. The goal is a ratio within 1.05.
//
// The unavoidable round trips are what the engine's design asks of each service
// (docs/architecture.md, "The two phases"; services one at a time, under their lock; two
// independent reads go out at once, so they make one round trip):
//
//	Phase 1: read the env vars and the application at once (snapshot and diff), list the
//	         active deployments (no write while one is in progress), write the env vars
//	         that differ, write the image tag, read both back at once (verify)           5
//	Phase 2: read the application and the env vars at once (does it still carry this
//	         run's sync?), list the active deployments (Coolify drops a deploy while one
//	         is queued or running), deploy, read the deployment back (Coolify answers a
//	         dropped deploy with a uuid it never stored; deployments take no time
//	         here, so this read also finds it ended)                                     4
//
// so 9 × 50 ms per service. Round trips the engine makes beyond these (retries, extra polls)
// count against it in the makespan; calls/service reports how many calls it made,
// outside-coolify-ms the makespan minus the time inside Coolify calls (as in
// BenchmarkOverhead100). The fake's 50 ms sleeps overshoot a little (about 1 ms a call on a
// loaded machine), which also counts against the engine here.
func BenchmarkMakespan20(b *testing.B) {
	const (
		n           = 20
		perCall     = 50 * time.Millisecond
		unavoidable = 9 // round trips per service, see above
	)
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			h := newHarnessOn(b, backend, coolifytest.WithTiming(coolifytest.Timing{}), coolifytest.WithConcurrentBuilds(n), coolifytest.WithoutRateLimit())
			h.coolify.SetLatency(perCall, perCall)
			h.start(benchPipeline(h, "bench", n))
			var makespan, outside time.Duration
			var calls int
			for i := 0; b.Loop(); i++ {
				h.coolify.ResetRequests()
				wall, _ := benchRun(b, h, "bench", i, n)
				reqs := h.coolify.Requests()
				makespan += wall
				outside += wall - busyTime(reqs)
				calls += len(reqs)
			}
			iters := float64(b.N)
			mean := float64(makespan.Microseconds()) / 1000 / iters
			floor := float64((n * unavoidable * perCall).Milliseconds())
			b.ReportMetric(mean, "makespan-ms")
			b.ReportMetric(floor, "unavoidable-ms")
			b.ReportMetric(mean/floor, "ratio")
			b.ReportMetric(float64(calls)/iters/n, "calls/service")
			b.ReportMetric(float64(outside.Microseconds())/1000/iters, "outside-coolify-ms")
		})
	}
}

// benchPipeline adds n applications to the fake and returns a pipeline over them: image tag
// and an env var from the trigger, one constant env var.
func benchPipeline(h *harness, name string, n int) string {
	var y strings.Builder
	fmt.Fprintf(&y, "name: %s\ncoolify:\n  url: %s\n  token: %q\nservices:\n", name, h.coolifyURL, h.coolifyToken)
	for i := range n {
		name, uuid := benchService(i)
		h.coolify.AddApplication(coolifytest.Application{UUID: uuid, Name: uuid, ImageName: "ghcr.io/acme/" + uuid, ImageTag: "v0"})
		fmt.Fprintf(&y, `  - name: %s
    uuid: %s
    image_tag: "${trigger.image_tag}"
    env:
      - key: LOG_LEVEL
        value: info
      - key: BUILD
        value: "${trigger.build}"
    deploy_timeout: 30s
`, name, uuid)
	}
	y.WriteString(`locks:
  ttl: 60s
  phase: { timeout: 60s, max_retries: 0 }
  service: { timeout: 60s, max_retries: 0 }
`)
	return y.String()
}

// benchService is the name and the application UUID of service i of benchPipeline.
func benchService(i int) (name, uuid string) {
	return fmt.Sprintf("svc-%04d", i), fmt.Sprintf("bench-app-%04d", i)
}

// benchRun runs build i of pipeline and returns its wall time (Submit to the end of Wait) and
// the run as stored. It fails the benchmark unless the run succeeded with every one of its n
// services deployed.
func benchRun(b *testing.B, h *harness, pipeline string, i, n int) (time.Duration, runs.Run) {
	b.Helper()
	start := time.Now()
	id := h.submit(pipeline, orchestrator.Trigger{Build: fmt.Sprint(i + 1), ImageTag: fmt.Sprintf("v%d", i+1), By: "bench"})
	r := h.wait(id)
	wall := time.Since(start)
	if r.Status != runs.StatusSucceeded {
		b.Fatalf("run %s: %s (%s)", id, r.Status, r.Reason)
	}
	healthy := 0
	for _, s := range r.Steps {
		if s.Phase == runs.Phase2 && s.Status == runs.StepHealthy {
			healthy++
		}
	}
	if healthy != n {
		b.Fatalf("run %s: %d services deployed and healthy, want %d", id, healthy, n)
	}
	return wall, r
}

// processCPU is the CPU time (user and system) this process has used so far: the engine,
// the lock and run-store clients (and the SQLite backends, which run in process) and the
// fake Coolify; not redis-server's.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// busyTime is the length of the union of the requests' [Start, End] intervals.
func busyTime(reqs []coolifytest.Request) time.Duration {
	reqs = slices.Clone(reqs)
	slices.SortFunc(reqs, func(a, b coolifytest.Request) int { return a.Start.Compare(b.Start) })
	var total time.Duration
	var from, to time.Time
	for _, r := range reqs {
		switch {
		case r.Start.After(to):
			total += to.Sub(from)
			from, to = r.Start, r.End
		case r.End.After(to):
			to = r.End
		}
	}
	return total + to.Sub(from)
}
