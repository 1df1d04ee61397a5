package runstest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Bench measures a backend on the engine's and the API's hot paths:
//
//   - UpdateStep: one step of a 100-service run changes and one event is appended (the
//     engine does this several times per service per phase);
//   - Append: one event alone (lock.waiting and friends);
//   - List: the first page of 50 runs out of 200 (5 pipelines, 20 services each, with
//     events), read by parallel clients; reports p50 and p99 latency;
//   - ListWhileWriting: the same while a writer keeps updating steps, as during a deploy;
//   - Follow: Follow of a 100-service run while 300 step updates are written to it, the last
//     one ending it; FollowFromOtherStore, the same with the writes going through another
//     Store, as another daemon's would (on Redis: such a Store's signals reach the follower;
//     on SQLite, stores of one process do not signal each other, so the follower sees the
//     run's end at its FollowPoll and that is what the figure measures).
//
// newBackend is called once per sub-benchmark, as in Run.
func Bench(b *testing.B, newBackend func(tb testing.TB) Opener) {
	b.Run("UpdateStep", func(b *testing.B) { benchUpdateStep(b, newBackend(b)(b)) })
	b.Run("Append", func(b *testing.B) { benchAppend(b, newBackend(b)(b)) })
	b.Run("List", func(b *testing.B) { benchList(b, newBackend(b)(b), false) })
	b.Run("ListWhileWriting", func(b *testing.B) { benchList(b, newBackend(b)(b), true) })
	b.Run("Follow", func(b *testing.B) {
		s := newBackend(b)(b)
		benchFollow(b, s, s)
	})
	b.Run("FollowFromOtherStore", func(b *testing.B) {
		open := newBackend(b)
		benchFollow(b, open(b), open(b))
	})
}

// bigRun is a run of services steps in Phase 1 and Phase 2.
func bigRun(pipeline string, services int) runs.Run {
	r := runs.Run{Pipeline: pipeline, Instance: "bench", Trigger: orchestrator.Trigger{Build: "1", ImageTag: "v2", By: "api:bench"}}
	for _, ph := range []runs.Phase{runs.Phase1, runs.Phase2} {
		for i := range services {
			r.SetStep(runs.Step{
				Phase: ph, Name: fmt.Sprintf("service-%03d", i), UUID: fmt.Sprintf("uuid-%03d", i), Status: runs.StepPending,
				LockKey: fmt.Sprintf("coolify:uuid-%03d", i),
			})
		}
	}
	return r
}

func benchUpdateStep(b *testing.B, s runs.Store) {
	ctx := context.Background()
	r, _, err := s.Create(ctx, bigRun("bench", 100))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("service-%03d", i%100)
		_, err := s.Update(ctx, r.ID, func(x *runs.Run) error {
			st := x.Step(runs.Phase1, name)
			st.Status, st.Fence = runs.StepSynced, int64(i)
			st.Changes = runs.Changes{Env: []orchestrator.EnvChange{{Key: "A", Action: orchestrator.EnvCreate}, {Key: "B", Action: orchestrator.EnvUpdate, ValueChanged: true}}, ImageTag: &orchestrator.TagChange{Old: "v1", New: "v2"}}
			return nil
		}, runs.Event{Type: runs.EventServiceSynced, Phase: runs.Phase1, Service: name, Fence: int64(i)})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// benchFollow: an iteration is one run of 100 services that w updates 300 times (one step
// and one event each, the last one ending the run) while f follows it to its end.
func benchFollow(b *testing.B, w, f runs.Store) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, _, err := w.Create(ctx, bigRun("bench", 100))
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- runs.Follow(ctx, f, r.ID, 0, func(runs.Event) error { return nil }) }()
		for i := range 300 {
			name := fmt.Sprintf("service-%03d", i%100)
			_, err := w.Update(ctx, r.ID, func(x *runs.Run) error {
				x.Step(runs.Phase1, name).Status = runs.StepSynced
				if i == 299 {
					x.Status = runs.StatusSucceeded
				}
				return nil
			}, runs.Event{Type: runs.EventServiceSynced, Phase: runs.Phase1, Service: name})
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

func benchAppend(b *testing.B, s runs.Store) {
	ctx := context.Background()
	r, _, err := s.Create(ctx, bigRun("bench", 1))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Append(ctx, r.ID, runs.Event{Type: runs.EventLockWaiting, LockKey: "coolify:phase1", Message: "held by prod#1/api"}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchList(b *testing.B, s runs.Store, writing bool) {
	ctx := context.Background()
	for i := range 200 {
		r := bigRun(fmt.Sprintf("pipeline-%d", i%5), 20)
		created, _, err := s.Create(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Update(ctx, created.ID, func(x *runs.Run) error { x.Status = runs.StatusSucceeded; return nil },
			runs.Event{Type: runs.EventRunStarted}, runs.Event{Type: runs.EventRunSucceeded}); err != nil {
			b.Fatal(err)
		}
	}

	var (
		wg   sync.WaitGroup
		stop = make(chan struct{})
	)
	if writing {
		live, _, err := s.Create(ctx, bigRun("pipeline-0", 100))
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() { // owned here: stopped by close(stop), waited for below
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("service-%03d", i%100)
				_, err := s.Update(ctx, live.ID, func(x *runs.Run) error {
					x.Step(runs.Phase2, name).Status = runs.StepRunning
					return nil
				}, runs.Event{Type: runs.EventDeployStarted, Service: name})
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}

	var (
		mu  sync.Mutex
		lat []time.Duration
	)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			start := time.Now()
			p, err := s.List(ctx, runs.Filter{Limit: 50})
			if err != nil {
				b.Error(err)
				return
			}
			if len(p.Runs) != 50 {
				b.Errorf("List: %d runs, want 50", len(p.Runs))
				return
			}
			mine = append(mine, time.Since(start))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	close(stop)
	wg.Wait()
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
}
