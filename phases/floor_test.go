package phases_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// floorPipeline names the runs floorRun writes: no pipeline the engine runs, so its marks and
// runs never meet the engine's.
const floorPipeline = "bench-floor"

// floorRun times, on h's lock and run-store backends, the least the protocol must ask of
// them for every service-phase of build i of benchPipeline's n services, one after the
// other as the engine goes through them, and returns the time it took. Per service-phase:
//
//	take the service's lock and release it                        lock acquire + release
//	record the step as started under the lease's fence            run-store Update + event
//	record the mark "synced (deployed) by run R at fence F"        PutMark
//	record the step's outcome                                      run-store Update + event
//
// The first write must reach the store before anything is written to Coolify: a takeover
// reads it to know the service may carry this run's writes (Phase 1 restores them from the
// snapshot; Phase 2 looks for the deployment whose answer was never recorded). The mark is
// what Phase 2 checks (does the service still carry this run's sync?) and what the
// stale-build guard and the write rule read, under the fence rule. The outcome must be
// stored before the lease is released, or the next holder and a takeover cannot tell what
// the service was left in. Each write carries its event, as every change of the run does
// (docs/architecture.md). Left out, so that this stays a lower bound: the reads (marks,
// ownership checks before each outside write), the run's own writes (start, phases, end),
// and whatever the engine writes beyond these three (lock waits, deploy_requested_at, the
// deployment's UUID).
//
// The run written has the steps of the engine's run of benchPipeline (Phase 1, then Phase 2,
// of every service), so that each write encodes a run of its size, under floorPipeline and
// with no instance (no takeover watches it); the locks and marks are on keys of their own.
// It is ended afterwards, untimed.
func floorRun(b *testing.B, h *harness, n, i int) time.Duration {
	b.Helper()
	ctx := context.Background()
	in := runs.Run{Pipeline: floorPipeline, Trigger: orchestrator.Trigger{Build: fmt.Sprint(i + 1), ImageTag: fmt.Sprintf("v%d", i+1), By: "bench"}}
	for _, phase := range []runs.Phase{runs.Phase1, runs.Phase2} {
		for k := range n {
			name, uuid := benchService(k)
			in.Steps = append(in.Steps, runs.Step{Phase: phase, Name: name, UUID: uuid, Status: runs.StepPending})
		}
	}
	r, _, err := h.store.Create(ctx, in)
	if err != nil {
		b.Fatalf("floor: create run: %v", err)
	}
	start := time.Now()
	for _, s := range in.Steps {
		floorStep(ctx, b, h, r, s)
	}
	took := time.Since(start)
	if _, err := h.store.Update(ctx, r.ID, func(r *runs.Run) error { r.Status = runs.StatusSucceeded; return nil }); err != nil {
		b.Fatalf("floor: end run: %v", err)
	}
	return took
}

// floorStep is one service-phase of floorRun.
func floorStep(ctx context.Context, b *testing.B, h *harness, r runs.Run, s runs.Step) {
	key := orchestrator.NamespaceCoolify + floorPipeline + "-" + s.UUID
	lease, err := h.locker.Acquire(ctx, locks.Request{Key: key, Holder: orchestrator.StepHolder(r.Pipeline, r.Trigger.Build, r.ID, s.Name),
		Owner: r.ID, TTL: time.Minute, Budget: locks.Budget{Timeout: time.Minute}})
	if err != nil {
		b.Fatalf("floor: acquire %s: %v", key, err)
	}
	step := func(fn func(*runs.Step)) func(*runs.Run) error {
		return func(r *runs.Run) error {
			st := r.Step(s.Phase, s.Name)
			if st == nil {
				b.Fatalf("floor: run %s has no step %s/%s", r.ID, s.Phase, s.Name)
			}
			fn(st)
			return nil
		}
	}
	fence := lease.Fence()
	if _, err := h.store.Update(ctx, r.ID, step(func(st *runs.Step) {
		st.Status, st.StartedAt, st.LockKey, st.Fence = runs.StepRunning, time.Now().UTC(), key, fence
	}), runs.Event{Type: runs.EventLockAcquired, Phase: s.Phase, Service: s.Name, LockKey: key, Fence: fence}); err != nil {
		b.Fatalf("floor: record the start of %s/%s: %v", s.Phase, s.Name, err)
	}
	if _, err := h.store.PutMark(ctx, runs.Mark{UUID: floorPipeline + "-" + s.UUID, RunID: r.ID, Fence: fence, Phase: s.Phase,
		At: time.Now().UTC(), Pipeline: r.Pipeline, Build: r.Trigger.Build, RunCreated: r.CreatedAt}); err != nil {
		b.Fatalf("floor: mark %s: %v", s.UUID, err)
	}
	outcome, ev := runs.StepSynced, runs.EventServiceSynced
	if s.Phase == runs.Phase2 {
		outcome, ev = runs.StepHealthy, runs.EventDeployFinished
	}
	if _, err := h.store.Update(ctx, r.ID, step(func(st *runs.Step) { st.Status, st.EndedAt = outcome, time.Now().UTC() }),
		runs.Event{Type: ev, Phase: s.Phase, Service: s.Name, LockKey: key, Fence: fence}); err != nil {
		b.Fatalf("floor: record the outcome of %s/%s: %v", s.Phase, s.Name, err)
	}
	if err := lease.Release(ctx); err != nil {
		b.Fatalf("floor: release %s: %v", key, err)
	}
}
