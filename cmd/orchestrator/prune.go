package main

import (
	"context"
	"log/slog"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// startPruner prunes the run history under r at once and every r.Interval, logging what went
// and warning when a prune fails (the next one tries again). The returned stop ends it and
// waits for it.
func startPruner(ctx context.Context, p runs.Pruner, r config.Retention, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	keep := runs.Retention{MaxAge: r.MaxAge, MaxRuns: r.MaxRuns}
	go func() {
		defer close(done)
		runs.PruneEvery(ctx, p, keep, r.Interval, func(n int, err error) {
			switch {
			case err != nil:
				log.LogAttrs(ctx, slog.LevelWarn, "run history prune failed", slog.String(logkey.Error, err.Error()))
			case n > 0:
				log.LogAttrs(ctx, slog.LevelInfo, "run history pruned", slog.Int(logkey.Runs, n),
					slog.Duration(logkey.MaxAge, r.MaxAge), slog.Int(logkey.MaxRuns, r.MaxRuns))
			}
		})
	}()
	return func() {
		cancel()
		<-done
	}
}
