package phases

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/tracing"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// deployWaves is the work of Phase 2 under coolify:phase2: the pipeline's waves one after
// the other (config.Pipeline.Waves), each through deployWave. A wave starts only when the one
// before it ended without error and no stop was requested: after a failure no later wave
// starts, and the error says which waves ran. Services the stale-build guard left in Phase 1
// are skipped.
func (x *execution) deployWaves(ctx context.Context) error {
	waves := x.p.Waves()
	for n, idx := range waves {
		if err := x.stopping(); err != nil {
			return err
		}
		var wave []*svcState
		for _, i := range idx {
			if st := x.services[i]; st.stale == "" {
				wave = append(wave, st)
			}
		}
		if len(waves) > 1 {
			names := make([]string, len(idx))
			for j, i := range idx {
				names[j] = x.services[i].svc.Name
			}
			x.rec.event(runs.Event{Type: runs.EventWaveStarted, Phase: runs.Phase2,
				Message: fmt.Sprintf("wave %d of %d: %s", n+1, len(waves), strings.Join(names, ", "))})
		}
		wctx, span := stage(ctx, fmt.Sprintf("wave %d", n+1), runs.Phase2, tracing.Wave.Int(n+1))
		err := x.deployWave(wctx, wave)
		endSpan(span, err)
		if err != nil {
			if len(waves) == 1 {
				return err
			}
			return fmt.Errorf("wave %d of %d (%s): %w", n+1, len(waves), wavesRan(n, len(waves)), err)
		}
		if err := x.analyzeWave(ctx, n, len(waves), wave); err != nil {
			return err
		}
	}
	return nil
}

// wavesRan says which waves ran when wave failed (0-based) of n.
func wavesRan(failed, n int) string {
	if failed == n-1 {
		return "the last wave"
	}
	return fmt.Sprintf("waves %d to %d not started", failed+2, n)
}

// deployWave deploys the services of one wave, up to Phase2.Parallel at once, in file order
// (with Parallel 1, one by one as a pipeline without waves does). Each goroutine deploys one
// service through deployService, so it holds one service lock at a time and the superseded
// check, the write rule, the deployment wait and the health check apply to each as they do
// one by one. The first Parallel services start together, whatever becomes of any of them;
// after a failure no service still waiting for a slot starts, and after a stop request none
// does. The ones already started finish (or meet their deploy timeout). The errors of all failed
// services are returned together, in file order. A panic in a goroutine is raised again here,
// once the others have ended, so the run fails as it does on any panic (recoverPanic).
func (x *execution) deployWave(ctx context.Context, wave []*svcState) error {
	errs := make([]error, len(wave))
	slots := make(chan struct{}, max(x.p.Phase2.Parallel, 1))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failed   bool
		panicked any
	)
	for i, st := range wave {
		slots <- struct{}{} // a free slot: a service of the wave ended, or fewer run than Parallel
		mu.Lock()
		stop := failed && i >= cap(slots) // the first Parallel services start together
		mu.Unlock()
		if stop {
			<-slots
			break
		}
		if err := x.stopping(); err != nil {
			<-slots
			errs[i] = err
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer func() {
				if v := recover(); v != nil {
					x.log.LogAttrs(ctx, slog.LevelError, "deploy panicked", slog.String(logService, st.svc.Name),
						slog.Any(logkey.Panic, v), slog.String(logkey.Stack, string(debug.Stack())))
					mu.Lock()
					failed, panicked = true, v
					mu.Unlock()
				}
			}()
			err := x.task(ctx, runs.Phase2, st.svc.Name, func(ctx context.Context) error { return x.deployService(ctx, st) })
			if err != nil {
				mu.Lock()
				failed = true
				mu.Unlock()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
	return joinErrors(errs)
}

// joinErrors returns the non-nil errors as one ("a; b"), nil when there are none; errors.Is
// and errors.As see each of them.
func joinErrors(errs []error) error {
	var list []any
	for _, err := range errs {
		if err != nil {
			list = append(list, err)
		}
	}
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list[0].(error)
	}
	return fmt.Errorf(strings.TrimSuffix(strings.Repeat("%w; ", len(list)), "; "), list...)
}
