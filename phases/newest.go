package phases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The newest build wins (docs/guarantees.md, promise 4). A pipeline's Order says which of two runs is
// newer: by build number (the default for numeric builds), by submission time, or not at all.
// Three rules follow from it:
//
//   - The stale-build guard: a run does not write or deploy a service on which its pipeline's
//     mark (the newest build of the same pipeline that synced or deployed it, whatever other
//     pipelines wrote there since) names a newer build. The step ends stale, naming that
//     build and its run; a run whose every service is stale ends superseded without touching
//     Coolify. Between pipelines that deploy one service there is no order: the last to
//     deploy wins, one at a time under the service's lock.
//   - A rollback (Trigger.Rollback) deploys an older build on purpose: it passes the guard and
//     is recorded, with who and why, in the run and the audit.
//   - Under concurrency: supersede, the newest pending run (not yet in Phase 1) of a pipeline
//     ends every other pending run of it, on every daemon sharing the store.

// standing is where a run stands in its pipeline's order.
type standing struct {
	pipeline string
	order    config.Order // effective: build, created or none
	build    string
	created  time.Time
	rollback bool
}

func standingOf(p *config.Pipeline, r runs.Run) standing {
	return standing{pipeline: r.Pipeline, order: p.Order.Effective(r.Trigger.Build), build: r.Trigger.Build,
		created: r.CreatedAt, rollback: r.Trigger.Rollback}
}

// olderThanMark reports whether the build that mark m, this run's pipeline's mark on a
// service, records is newer than this run's (so this run's build would be stale there).
// Marks that carry nothing to compare (no numeric build, no creation time) never are, nor
// are marks of other pipelines (staleOn reads the pipeline's own; this is a guard).
func (s standing) olderThanMark(m runs.Mark) bool {
	if m.Pipeline != s.pipeline {
		return false
	}
	switch s.order {
	case config.OrderBuild:
		return config.IsBuildNumber(m.Build) && config.CompareBuilds(m.Build, s.build) > 0
	case config.OrderCreated:
		return !m.RunCreated.IsZero() && m.RunCreated.After(s.created)
	}
	return false
}

// outranks reports whether s, a pending run, should survive a later-submitted run n under
// the supersede policy: only when the pipeline orders by build, s's build is newer, and n is
// not a rollback (which is the newest wish by definition).
func (s standing) outranks(n standing) bool {
	return n.order == config.OrderBuild && !n.rollback && config.IsBuildNumber(s.build) &&
		config.CompareBuilds(s.build, n.build) > 0
}

// newerNote describes what makes a service stale for this run: the newer build and its run.
func (s standing) newerNote(m runs.Mark) string {
	what := "build " + m.Build
	if s.order == config.OrderCreated {
		what = "a run created at " + m.RunCreated.Format(time.RFC3339Nano)
	}
	if m.Rollback {
		what += " (a rollback)"
	}
	return fmt.Sprintf("%s of run %s is %s on it, newer than this run's build %s", what, m.RunID, markVerb(m.Phase), orUnknown(s.build))
}

func markVerb(p runs.Phase) string {
	if p == runs.Phase2 {
		return "deployed"
	}
	return "synced"
}

// mark is the mark this run records on a service it synced or deployed under fence.
func (x *execution) mark(uuid string, fence int64, phase runs.Phase) runs.Mark {
	return runs.Mark{UUID: uuid, RunID: x.run.ID, Fence: fence, Phase: phase, At: time.Now().UTC(),
		Pipeline: x.run.Pipeline, Build: x.run.Trigger.Build, RunCreated: x.run.CreatedAt, Rollback: x.run.Trigger.Rollback}
}

// staleOn returns the note that makes service uuid stale for this run ("" when it is not):
// this pipeline's mark on it names a newer build than this run's, and this run is no
// rollback. It also returns that mark (nil when the pipeline has none there).
func (x *execution) staleOn(ctx context.Context, uuid string) (string, *runs.Mark, error) {
	m, err := x.e.d.Marks.PipelineMark(ctx, uuid, x.run.Pipeline)
	switch {
	case errors.Is(err, runs.ErrNotFound):
		return "", nil, nil
	case err != nil:
		return "", nil, fmt.Errorf("read the mark of pipeline %s on %s: %w", x.run.Pipeline, uuid, err)
	}
	st := standingOf(x.p, x.run)
	if x.run.Trigger.Rollback || m.RunID == x.run.ID || !st.olderThanMark(m) {
		return "", &m, nil
	}
	return st.newerNote(m), &m, nil
}

// serviceMark returns service uuid's mark, whichever pipeline wrote it (zero when it has
// none).
func (x *execution) serviceMark(ctx context.Context, uuid string) (runs.Mark, error) {
	m, err := x.e.d.Marks.GetMark(ctx, uuid)
	if err != nil && !errors.Is(err, runs.ErrNotFound) {
		return runs.Mark{}, fmt.Errorf("read the mark of %s: %w", uuid, err)
	}
	return m, nil
}

// running returns what service uuid was last seen running (nil when nothing was recorded).
func (x *execution) running(ctx context.Context, uuid string) (*runs.Running, error) {
	r, err := x.e.d.Marks.GetRunning(ctx, uuid)
	switch {
	case errors.Is(err, runs.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read what %s runs: %w", uuid, err)
	}
	return &r, nil
}

// recordRunning records what the run saw service s run, verified: its deployment dep of
// this run's build, or (back, from a rollback's redeploy) the build it ran before. A
// failure to record is logged: what runs is the same either way.
func (x *execution) recordRunning(ctx context.Context, s config.Service, dep string, back *runs.Running, restored bool) {
	r := runs.Running{UUID: s.UUID, Deployment: dep, Since: time.Now().UTC(), RunID: x.run.ID, Pipeline: x.run.Pipeline,
		Build: x.run.Trigger.Build, Commit: x.run.Trigger.Commit, AppVersion: x.run.Trigger.AppVersion}
	if s.Kind != config.KindService {
		r.ImageTag = s.ImageTag
	}
	if restored {
		if back != nil {
			prev := *back
			prev.Deployment, prev.Since = dep, r.Since
			r = prev
		} else {
			r = runs.Running{UUID: s.UUID, Deployment: dep, Since: r.Since, RunID: x.run.ID}
		}
		r.Restored, r.RestoredBy = true, x.run.ID
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteTimeout)
	defer cancel()
	if err := x.e.d.Marks.PutRunning(wctx, r); err != nil && x.notOwned() == nil {
		x.log.LogAttrs(wctx, slog.LevelWarn, "what the service runs not recorded", slog.String(logService, s.Name), slog.String(logError, err.Error()))
	}
}

// allStale returns each service's stale note when every service of the run already carries
// a newer build, else nil. It reads the marks without locks: Phase 1 checks each service
// again under its lock.
func (x *execution) allStale(ctx context.Context) []string {
	var notes []string
	for _, s := range x.services {
		note, _, err := x.staleOn(ctx, s.svc.UUID)
		if err != nil || note == "" {
			return nil
		}
		notes = append(notes, note)
	}
	return notes
}

// markStale ends both steps of a stale service: this run neither writes nor deploys it.
func (x *execution) markStale(st *svcState, lockKey string, fence int64, note string) {
	st.stale = note
	now := time.Now().UTC()
	x.rec.update(func(r *runs.Run) {
		for _, ph := range []runs.Phase{runs.Phase1, runs.Phase2} {
			withStep(ph, st.svc.Name, func(s *runs.Step) {
				s.Status, s.EndedAt, s.Note = runs.StepStale, now, note
			})(r)
		}
	}, runs.Event{Type: runs.EventServiceStale, Phase: runs.Phase1, Service: st.svc.Name, LockKey: lockKey, Fence: fence, Message: note})
}

// staleServices names the services the guard left, for the run's reason.
func (x *execution) staleServices() []string {
	var out []string
	for _, s := range x.services {
		if s.stale != "" {
			out = append(out, s.svc.Name)
		}
	}
	return out
}

// recordRollback writes the audit record of a rollback's sync of one service: who asked,
// why, and which build it replaced.
func (x *execution) recordRollback(ctx context.Context, s config.Service, before runs.Mark) {
	over := "no recorded build"
	if before.RunID != "" {
		over = fmt.Sprintf("build %s of run %s", orUnknown(before.Build), before.RunID)
	}
	x.e.audit(ctx, runs.AuditRollback, s.LockKey(), fmt.Sprintf("run %s of %s rolls %s back to build %s over %s, by %s: %s",
		x.run.ID, x.run.Pipeline, s.Name, orUnknown(x.run.Trigger.Build), over, orUnknown(x.run.Trigger.By), orNoReason(x.run.Trigger.Reason)),
		map[string]string{"run": x.run.ID, "service": s.Name, "build": x.run.Trigger.Build, "replaced_run": before.RunID, "replaced_build": before.Build})
}

func orNoReason(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// queuedMessage is the run.queued event's text: who queued it, and for a rollback why.
func queuedMessage(t orchestrator.Trigger) string {
	msg := "queued by " + orUnknown(t.By)
	if t.Rollback {
		msg += fmt.Sprintf(" as a rollback to build %s (it passes the stale-build guard): %s", orUnknown(t.Build), orNoReason(t.Reason))
	}
	return msg
}

// errNotPending: a run to supersede has entered a phase (or ended) meanwhile.
var errNotPending = errors.New("run is no longer pending")

// supersedePending applies the supersede policy for run r, just created: the pending runs of
// its pipeline (status queued or awaiting a decision: not yet in Phase 1), on every daemon sharing the store, end as
// superseded by r, unless one of them outranks r (a newer build), in which case r is the one
// superseded. Each is ended with one store update that checks it is still queued, so a run
// that enters Phase 1 meanwhile (its own daemon's update wins) is left alone. It reports
// whether r itself was superseded.
func (e *Engine) supersedePending(ctx context.Context, p *config.Pipeline, r runs.Run) bool {
	var pending []runs.Run
	f := runs.Filter{Pipeline: r.Pipeline, Status: []runs.Status{runs.StatusQueued, runs.StatusAwaiting}, Limit: runs.MaxLimit}
	for {
		page, err := e.d.Store.List(ctx, f)
		if err != nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "pending runs not listed; none superseded", slog.String(logRunID, r.ID), slog.String(logError, err.Error()))
			return false
		}
		pending = append(pending, page.Runs...)
		if f.Cursor = page.Next; f.Cursor == "" {
			break
		}
	}
	me := standingOf(p, r)
	for _, o := range pending {
		if o.ID != r.ID && standingOf(p, o).outranks(me) {
			return e.endPending(ctx, r.ID, o.ID)
		}
	}
	for _, o := range pending {
		// Runs submitted after r (to another daemon, at the same moment) are left to theirs.
		if submittedBefore(o, r) {
			e.endPending(ctx, o.ID, r.ID)
		}
	}
	return false
}

// submittedBefore orders runs by creation, then ID.
func submittedBefore(a, b runs.Run) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.ID < b.ID
}

// endPending ends run id as superseded by run by if it is still pending, and stops its
// execution when this engine has it (another daemon's notices the store: watchPending). It
// reports whether it ended the run.
func (e *Engine) endPending(ctx context.Context, id, by string) bool {
	cause := fmt.Errorf("%w %s", errSuperseded, by)
	now := time.Now().UTC()
	ended, err := e.d.Store.Update(ctx, id, func(r *runs.Run) error {
		if r.Status != runs.StatusQueued && r.Status != runs.StatusAwaiting {
			return errNotPending
		}
		r.Status, r.Reason, r.EndedAt, r.SupersededBy = runs.StatusSuperseded, cause.Error(), now, by
		for i := range r.Steps {
			if !r.Steps[i].Status.Done() {
				r.Steps[i].Status = runs.StepSkipped
			}
		}
		return nil
	}, runs.Event{Type: runs.EventRunSuperseded, Message: cause.Error()})
	if err != nil {
		if !errors.Is(err, errNotPending) && !errors.Is(err, runs.ErrEnded) {
			e.log.LogAttrs(ctx, slog.LevelWarn, "pending run not superseded", slog.String(logRunID, id), slog.String(logError, err.Error()))
		}
		return false
	}
	e.report(ctx, ended)
	e.mu.Lock()
	x := e.execs[id]
	e.mu.Unlock()
	if x != nil {
		x.supersede(by)
	}
	return true
}
