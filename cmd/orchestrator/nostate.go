package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// errNoState is what the stand-ins for an embedded backend that does not exist answer to a
// write: only commands that read use them (see openBackendsToRead), so it shows only if one
// tried to write after all.
var errNoState = errors.New("no state to write to: this command only reads, and creates no state directory or database")

// noLocks is the lock driver of an embedded lock database that does not exist: no lock was
// ever taken there, so every key is free and nothing was audited.
type noLocks struct{}

var _ locks.Driver = noLocks{}

func (noLocks) TryAcquire(context.Context, locks.Grant) (locks.Info, error) {
	return locks.Info{}, errNoState
}
func (noLocks) LeaveQueue(context.Context, string, string) error { return nil }
func (noLocks) Renew(context.Context, string, string, time.Duration) (time.Time, error) {
	return time.Time{}, locks.ErrNotHeld
}
func (noLocks) Release(context.Context, string, string) error { return locks.ErrNotHeld }
func (noLocks) Get(_ context.Context, key string) (locks.Info, error) {
	return locks.Info{}, fmt.Errorf("lock %q: %w", key, locks.ErrNotFound)
}
func (noLocks) List(context.Context, string) ([]locks.Info, error) { return nil, nil }
func (noLocks) ForceRelease(context.Context, locks.ForceRequest) (locks.Info, error) {
	return locks.Info{}, errNoState
}
func (noLocks) Freeze(context.Context, locks.FreezeRequest, string, string) (locks.Info, error) {
	return locks.Info{}, errNoState
}
func (noLocks) Unfreeze(context.Context, string) (locks.Info, error) { return locks.Info{}, errNoState }
func (noLocks) Subscribe(context.Context, string) (locks.Subscription, error) {
	return nil, errNoState
}
func (noLocks) Ping(context.Context) error { return nil }
func (noLocks) Close() error               { return nil }

// noRuns is the run store of an embedded run store that does not exist: it holds no run, no
// service mark (so the stale-build guard finds nothing newer) and no webhook delivery.
type noRuns struct{}

var _ store = noRuns{}

func (noRuns) Create(context.Context, runs.Run) (runs.Run, bool, error) {
	return runs.Run{}, false, errNoState
}
func (noRuns) Get(_ context.Context, id string) (runs.Run, error) {
	return runs.Run{}, fmt.Errorf("run %s: %w", id, runs.ErrNotFound)
}
func (noRuns) Status(_ context.Context, id string) (runs.Status, error) {
	return "", fmt.Errorf("run %s: %w", id, runs.ErrNotFound)
}
func (noRuns) Owner(_ context.Context, id string) (runs.Ownership, error) {
	return runs.Ownership{}, fmt.Errorf("run %s: %w", id, runs.ErrNotFound)
}
func (noRuns) List(context.Context, runs.Filter) (runs.Page, error) { return runs.Page{}, nil }
func (noRuns) Update(_ context.Context, id string, _ func(*runs.Run) error, _ ...runs.Event) (runs.Run, error) {
	return runs.Run{}, fmt.Errorf("run %s: %w", id, runs.ErrNotFound)
}
func (noRuns) Append(_ context.Context, id string, _ ...runs.Event) ([]runs.Event, error) {
	return nil, fmt.Errorf("run %s: %w", id, runs.ErrNotFound)
}
func (noRuns) Events(_ context.Context, id string, _ int64, _ int) ([]runs.Event, error) {
	return nil, fmt.Errorf("run %s: %w", id, runs.ErrNotFound)
}
func (noRuns) Subscribe(context.Context, string) (runs.Subscription, error) {
	return nil, errNoState
}
func (noRuns) Unfinished(context.Context, string) ([]runs.Run, error) { return nil, nil }
func (noRuns) Ping(context.Context) error                             { return nil }
func (noRuns) Close() error                                           { return nil }
func (noRuns) PutMark(context.Context, runs.Mark) (runs.Mark, error) {
	return runs.Mark{}, errNoState
}
func (noRuns) RestoreMark(context.Context, runs.Mark, string, *runs.Mark) (runs.Mark, error) {
	return runs.Mark{}, errNoState
}
func (noRuns) GetMark(_ context.Context, uuid string) (runs.Mark, error) {
	return runs.Mark{}, fmt.Errorf("mark of %q: %w", uuid, runs.ErrNotFound)
}
func (noRuns) PipelineMark(_ context.Context, uuid, pipeline string) (runs.Mark, error) {
	return runs.Mark{}, fmt.Errorf("mark of pipeline %q on %q: %w", pipeline, uuid, runs.ErrNotFound)
}
func (noRuns) PipelineMarks(context.Context, string) ([]runs.Mark, error) { return nil, nil }
func (noRuns) Prune(context.Context, runs.Retention) (int, error)         { return 0, errNoState }
func (noRuns) SeenDelivery(context.Context, string, time.Duration) (bool, error) {
	return false, errNoState
}
func (noRuns) PutRunning(context.Context, runs.Running) error { return errNoState }
func (noRuns) GetRunning(_ context.Context, uuid string) (runs.Running, error) {
	return runs.Running{}, fmt.Errorf("what %q runs: %w", uuid, runs.ErrNotFound)
}
func (noRuns) AddReportState(context.Context, runs.Report, runs.ReportState) error { return errNoState }
func (noRuns) ClaimReports(context.Context, string, time.Duration, int) ([]runs.Report, error) {
	return nil, nil
}
func (noRuns) SaveReport(context.Context, string, runs.Report) error  { return errNoState }
func (noRuns) Reports(context.Context, string) ([]runs.Report, error) { return nil, nil }
func (noRuns) SwapLatestReport(context.Context, string, string) (string, error) {
	return "", errNoState
}
func (noRuns) ReleaseClaims(context.Context, string) (int, error) { return 0, nil }
func (noRuns) AppendAudit(context.Context, runs.AuditRecord) (runs.AuditRecord, error) {
	return runs.AuditRecord{}, errNoState
}
func (noRuns) AuditRecords(context.Context, int64, int) ([]runs.AuditRecord, error) { return nil, nil }
func (noRuns) AuditEnds(context.Context) (anchor, head runs.AuditLink, err error) {
	return anchor, head, nil
}
