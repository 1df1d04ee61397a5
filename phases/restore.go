package phases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// compensation is what compensate puts back after a failure.
type compensation int

const (
	// compensateNothing leaves everything as it is (on_failure: halt).
	compensateNothing compensation = iota
	// compensateFailed restores and redeploys the failed services and restores those synced
	// but not deployed (on_failure: rollback-failed; and a stopped run under halt).
	compensateFailed
	// compensateRelease returns the whole release: every service the run changed, deployed
	// or not, and the Flagsmith keys it changed (on_failure: rollback).
	compensateRelease
)

// compensationFor is what a failure after Phase 1 puts back under the pipeline's
// on_failure; a stopped (canceled, shut down) run puts back at least what rollback-failed
// does, whatever the policy.
func (x *execution) compensationFor(stopped bool) compensation {
	c := compensateRelease
	switch x.p.OnFailure {
	case config.OnFailureRollbackFailed:
		c = compensateFailed
	case config.OnFailureHalt:
		c = compensateNothing
	}
	if stopped {
		c = max(c, compensateFailed)
	}
	return c
}

// compensate puts back what the run changed after a failure.
//
// After a Phase-1 failure every service the run wrote is restored from its snapshot (none
// was deployed). After a later failure (Phase 2, or a mobile step after it), c says what:
// the whole release goes back, the last wave first (deployed and failed services restored
// and their previous config redeployed, services synced but not deployed restored, then the
// Flagsmith keys the run changed); or only the failed services (restored and redeployed) and
// those synced but not deployed; or nothing, in which case the report says which services
// carry this run's config without having been deployed. A service to which nothing was
// written (every write refused before it was applied) needs no restore; a service whose
// deployment would not end (stillBuilding) is left alone: its state is unknown. A run no
// longer this daemon's puts back nothing: its takeover records what it left.
func (x *execution) compensate(phase runs.Phase, c compensation) {
	if x.notOwned() != nil {
		return
	}
	if phase == runs.Phase1 {
		for _, st := range x.services {
			if st.snap != nil && st.snap.written() && st.stillBuilding == nil {
				x.restore(st, runs.Phase1, false)
			}
		}
		if c == compensateRelease {
			x.revertMobile()
		}
		return
	}
	for _, st := range x.rollbackOrder() {
		switch {
		case st.snap == nil || !st.snap.written() || st.superseded || st.stillBuilding != nil:
			continue
		case c == compensateNothing:
			if !st.failed && !st.deployed {
				x.rec.step(runs.Phase2, st.svc.Name, func(step *runs.Step) {
					step.Status, step.Error = runs.StepSkipped, "not deployed (on_failure: halt); the service carries this run's synced config"
				})
			}
		case st.deployed && c == compensateRelease:
			x.restore(st, runs.Phase2, true)
		case st.deployed:
			// rollback-failed keeps what deployed.
		default:
			x.restore(st, runs.Phase2, st.failed)
		}
	}
	if c == compensateRelease {
		x.revertMobile()
	}
}

// rollbackOrder is the run's services in the order a rollback goes through them: the last
// wave first, and within a wave the reverse of the file's order.
func (x *execution) rollbackOrder() []*svcState {
	var out []*svcState
	waves := x.p.Waves()
	for w := len(waves) - 1; w >= 0; w-- {
		for i := len(waves[w]) - 1; i >= 0; i-- {
			out = append(out, x.services[waves[w][i]])
		}
	}
	return out
}

// restore puts one service back to its Phase-1 snapshot under its lock, unless a newer run
// changed it meanwhile, and redeploys it when asked and everything was put back. The Phase-1
// step records the restore; a redeploy is recorded on the Phase-2 step too. Every message says
// exactly what was put back, what was left and whether the previous config was redeployed.
func (x *execution) restore(st *svcState, phase runs.Phase, redeploy bool) {
	s := st.svc
	sl := serviceLock(phase, s, time.Time{})
	lease, err := x.leases.acquire(x.ctx, sl)
	if err != nil {
		x.restoreFailed(phase, st, restoreResult{}, err)
		return
	}
	sctx, cancel := lease.Context(x.ctx)
	// Restores put things back: their calls go before other runs' writes on the rate budget.
	sctx = coolify.Urgent(coolify.WithTrace(sctx, x.run.ID, lease.Fence()))
	// No write while a deployment this run did not start is in progress.
	var res restoreResult
	err = x.clearDeployments(sctx, s, phase, false)
	if err == nil {
		res, err = x.restoreLocked(sctx, st, lease, redeploy)
	}
	err = leaseErr(lease, sctx, err)
	cancel()
	_ = x.leases.release(lease, sl)
	// What was put back stays put back when a later part fails (the redeploy, say): the
	// service carries its previous config, and the run's left must say so.
	st.restored, st.redeployed = res.restored, res.redeployed
	if err != nil {
		x.restoreFailed(phase, st, res, err)
		return
	}
	now := time.Now().UTC()
	x.rec.step(runs.Phase1, s.Name, func(sp *runs.Step) {
		if res.restored {
			sp.Status, sp.RestoredAt = runs.StepRestored, now
		}
		sp.Error = joinNote(sp.Error, res.note)
	})
	if res.redeployed {
		x.rec.step(runs.Phase2, s.Name, func(sp *runs.Step) {
			sp.RestoredAt, sp.DeploymentUUID = now, res.deployment
		})
	}
	msg := res.note
	if res.restored {
		msg = "phase-1 snapshot restored"
		if len(res.left) > 0 {
			msg = "phase-1 snapshot restored except " + strings.Join(res.left, "; ")
		}
		if res.redeployed {
			msg += "; previous config redeployed"
		} else if redeploy {
			msg += "; not redeployed, because not everything could be put back"
		}
	}
	x.rec.event(runs.Event{Type: runs.EventServiceRestored, Phase: phase, Service: s.Name,
		LockKey: lease.Key(), Fence: lease.Fence(), Message: msg,
		Data: map[string]string{runs.DataDeployment: res.deployment}})
}

// restoreResult says what restoreLocked did.
type restoreResult struct {
	restored   bool     // the snapshot was written back, as far as it could be (see left)
	envsDone   bool     // the env vars were put back (or needed nothing)
	tagDone    bool     // the image tag was put back (or needed nothing)
	redeployed bool     // the previous config was deployed again
	deployment string   // the redeploy's deployment UUID
	left       []string // what could not be put back, and why
	note       string   // for the step: what was left, or why nothing was restored
}

func joinNote(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// restoreFailed records a restore that stopped on err, saying what had been put back by then
// and what was left at this run's values.
func (x *execution) restoreFailed(phase runs.Phase, st *svcState, res restoreResult, err error) {
	snap := st.snap
	var done, left []string
	if snap.envsWritten {
		if res.envsDone {
			done = append(done, "env vars restored")
		} else {
			left = append(left, "env vars")
		}
	}
	if snap.tagWritten {
		if res.tagDone {
			done = append(done, "image tag restored")
		} else {
			left = append(left, fmt.Sprintf("image tag (left at %s)", cmp.Or(st.svc.ImageTag, "(none)")))
		}
	}
	st.restoreErr = err
	var msg string
	switch {
	case len(left) > 0:
		msg = strings.Join(append(done, "NOT restored: "+strings.Join(left, ", ")), "; ") + ": " + err.Error()
	default: // everything was put back; the mark or the redeploy failed (err says which)
		msg = strings.Join(append(done, err.Error()), "; ")
	}
	x.rec.step(runs.Phase1, st.svc.Name, func(sp *runs.Step) { sp.Error = joinNote(sp.Error, msg) },
		runs.Event{Type: runs.EventServiceFailed, Phase: phase, Service: st.svc.Name, Message: msg})
}

// restoreLocked writes back, while the service lock is held, what Phase 1 may have written: the
// env vars it changed (a variable it created is deleted together with the preview twin Coolify
// created with it) and the image tag (null again if it was null). It redeploys when asked and
// everything was put back.
func (x *execution) restoreLocked(ctx context.Context, st *svcState, lease *locks.Lease, redeploy bool) (restoreResult, error) {
	var res restoreResult
	s, snap := st.svc, st.snap
	m, err := x.e.d.Marks.GetMark(ctx, s.UUID)
	if err == nil && m.RunID != x.run.ID && m.Fence > st.fence {
		res.note = fmt.Sprintf("not restored: run %s changed it after this run (fence %d)", m.RunID, m.Fence)
		return res, nil
	}
	if err != nil && !errors.Is(err, runs.ErrNotFound) {
		return res, fmt.Errorf("read mark: %w", err)
	}

	res.envsDone = !snap.envsWritten
	if snap.envsWritten {
		if err := x.restoreEnvs(ctx, snap, &res); err != nil {
			return res, err
		}
		res.envsDone = true
	}
	res.tagDone = !snap.tagWritten
	if snap.tagWritten {
		if err := x.cl.SetImageTag(ctx, s.UUID, snap.tag); err != nil {
			return res, err
		}
		res.tagDone = true
	}
	res.restored = true
	res.note = strings.Join(res.left, "; ")
	// The service carries the build it had before this run again: its mark says so, under
	// this run's name (a redeploy follows, and the write guard must know whose it is), and
	// this pipeline's mark is what it was, naming the run whose build it is. Other
	// pipelines' marks are left alone.
	back := x.mark(s.UUID, lease.Fence(), runs.Phase1)
	back.Pipeline, back.Build, back.RunCreated, back.Rollback = st.before.Pipeline, st.before.Build, st.before.RunCreated, st.before.Rollback
	if _, err := x.e.d.Marks.RestoreMark(ctx, back, x.run.Pipeline, st.beforeOwn); err != nil {
		return res, fmt.Errorf("record restore mark: %w", err)
	}
	// Recorded at once, not only when the restore ends: a daemon that dies from here on
	// leaves the service carrying its previous config, and a takeover must say so.
	// A config put back that the service did not run (another run's sync, superseded by
	// this run before it deployed it) would otherwise be carried and never run: no other run
	// deploys it, since the mark now names this run. The step's note says so until the
	// redeploy ends, for a takeover's left.
	unrun := st.putsBackUnrun()
	x.rec.step(runs.Phase1, s.Name, func(sp *runs.Step) {
		sp.Status, sp.RestoredAt = runs.StepRestored, time.Now().UTC()
		if unrun {
			sp.Note = unrunNote(st)
		}
	})
	redeploy = redeploy || unrun
	if !redeploy {
		return res, nil
	}
	if len(res.left) > 0 {
		res.note = joinNote(res.note, "not redeployed: the previous config could not be put back whole")
		return res, nil
	}
	var seen *coolify.Deployment
	if res.deployment, seen, err = x.trigger(ctx, s, runs.Phase2); err != nil {
		return res, fmt.Errorf("redeploy previous config: %w", err)
	}
	// The redeploy is this run's deployment until it ends: recorded before the wait, so that a
	// takeover after this daemon's death finds it and cancels it.
	x.rec.step(runs.Phase2, s.Name, func(sp *runs.Step) {
		sp.RestoredAt, sp.DeploymentUUID, sp.DeployRequestedAt = time.Now().UTC(), res.deployment, time.Time{}
	})
	if err := x.waitDeployed(ctx, s, res.deployment, seen); err != nil {
		return res, fmt.Errorf("redeploy previous config: %w", err)
	}
	res.redeployed = true
	x.recordRunning(ctx, s, res.deployment, st.runningPutBack(), true)
	return res, nil
}

// restoreEnvs puts back the env vars Phase 1 changed (snap.envs) and deletes those it
// created; an is_shown_once variable, whose old value Coolify never showed, is left at this
// run's value and named in res.left.
func (x *execution) restoreEnvs(ctx context.Context, snap *snapshot, res *restoreResult) error {
	var puts []coolify.EnvVar
	var dels []prevEnv
	var unrestorable []string
	for _, p := range snap.envs {
		switch {
		case p.existed && p.prev.ValueHidden(): // is_shown_once: its old value was never readable
			unrestorable = append(unrestorable, p.key)
		case p.existed:
			puts = append(puts, p.prev)
		default:
			dels = append(dels, p)
		}
	}
	if len(unrestorable) > 0 {
		res.left = append(res.left, fmt.Sprintf("env %v, left at this run's value: Coolify never shows is_shown_once values, so the old ones are unknown", unrestorable))
	}
	if err := x.cl.UpsertEnvs(ctx, snap.ref, puts); err != nil {
		return err
	}
	return x.deleteCreated(ctx, snap.ref, dels)
}

// putsBackUnrun reports whether the config a restore puts back is not what the service ran
// when this run took its lock: its mark then named another run (a sync of another run, or a
// deployment that did not run) that the record of what it ran does not name, as the run
// that deployed it or restored and redeployed it.
func (st *svcState) putsBackUnrun() bool {
	b, r := st.before, st.beforeRunning
	if b.RunID == "" || (r != nil && (r.RunID == b.RunID || r.RestoredBy == b.RunID)) {
		return false
	}
	return true
}

// unrunNotePrefix starts the note of a restored step whose restore put back a config the
// service did not run; the takeover's leftStates reads it.
const unrunNotePrefix = "put back "

// unrunNote is that note: which build was put back and which one the service runs.
func unrunNote(st *svcState) string {
	return fmt.Sprintf("%s%s, which it did not run (it runs %s)", unrunNotePrefix, markedBuild(st.before), ranBuild(st.beforeRunning))
}

// markedBuild names the build a mark describes, for a left report.
func markedBuild(m runs.Mark) string {
	return fmt.Sprintf("build %s of %s, run %s", orUnknown(m.Build), orUnknown(m.Pipeline), m.RunID)
}

// ranBuild names what a record of what a service ran describes, for a left report.
func ranBuild(r *runs.Running) string {
	if r == nil {
		return "a config no run recorded"
	}
	return fmt.Sprintf("build %s of %s, run %s", orUnknown(r.Build), orUnknown(r.Pipeline), r.RunID)
}

// runningPutBack is what the service runs after a restore's redeploy: what it ran before
// this run, or, when the restore put back a config it did not run (putsBackUnrun), the
// build its mark named.
func (st *svcState) runningPutBack() *runs.Running {
	if !st.putsBackUnrun() {
		return st.beforeRunning
	}
	r := &runs.Running{UUID: st.svc.UUID, RunID: st.before.RunID, Pipeline: st.before.Pipeline, Build: st.before.Build}
	if st.svc.Kind != config.KindService && st.snap != nil && st.snap.tagWritten {
		r.ImageTag = st.snap.tag
	}
	return r
}

// deleteCreated deletes the variables Phase 1 created, and the preview twin Coolify created
// with each (it holds this run's value), unless a preview row of that key was there before.
func (x *execution) deleteCreated(ctx context.Context, ref coolify.ResourceRef, created []prevEnv) error {
	if len(created) == 0 {
		return nil
	}
	all, err := x.cl.ListAllEnvs(ctx, ref)
	if err != nil {
		return err
	}
	for _, c := range all {
		i := slices.IndexFunc(created, func(p prevEnv) bool { return p.key == c.Key })
		if i < 0 || c.UUID == "" || (c.IsPreview && created[i].previewExisted) {
			continue
		}
		if err := x.cl.DeleteEnv(ctx, ref, c.UUID); err != nil && !errors.Is(err, coolify.ErrNotFound) {
			return err
		}
	}
	return nil
}

// leftReport says, per service, what state this run leaves it in (Run.Left), for a run that
// did not succeed: what it carries and runs, as far as this run knows. Nil when the run
// changed nothing.
func (x *execution) leftReport() []runs.Left {
	var out []runs.Left
	touched := false
	for _, st := range x.services {
		s := st.svc
		l := runs.Left{Service: s.Name, UUID: s.UUID, State: runs.LeftUntouched}
		written := st.snap != nil && st.snap.written()
		prev, next := "its previous config", "this run's config"
		if s.ImageTag != "" && st.snap != nil && st.snap.tagChanged {
			prev, next = "tag "+cmp.Or(st.snap.tag, "(none)"), "tag "+s.ImageTag
		}
		switch {
		case st.stillBuilding != nil:
			l.State, l.Detail = runs.LeftUnknown, fmt.Sprintf("deployment %s may still be building in Coolify: nothing more was written to it; its state is unknown", st.stillBuilding.Deployment)
		case st.restored && st.redeployed:
			l.State, l.Detail = runs.LeftRestored, fmt.Sprintf("carries and runs %s again (redeployed)", prev)
		case st.restored && st.deployed:
			l.State, l.Detail = runs.LeftRestored, fmt.Sprintf("carries %s again, but still runs %s: the redeploy did not finish", prev, next)
		case st.restored && st.putsBackUnrun():
			l.State, l.Detail = runs.LeftRestored, fmt.Sprintf("carries %s again (%s), but was not redeployed: it runs %s", prev, markedBuild(st.before), ranBuild(st.beforeRunning))
		case st.restored:
			l.State, l.Detail = runs.LeftRestored, fmt.Sprintf("carries %s again; it never ran %s", prev, next)
		case written && st.deployed:
			l.State, l.Detail = runs.LeftDeployed, fmt.Sprintf("carries and runs %s", next)
		case written:
			l.State, l.Detail = runs.LeftSyncedNotDeployed, fmt.Sprintf("carries %s, runs %s", next, prev)
			if st.failed {
				l.Detail = fmt.Sprintf("carries %s; its deployment failed, so it still runs %s", next, prev)
			}
		case st.deployed:
			l.State, l.Detail = runs.LeftDeployed, "already carried this run's config; redeployed"
		case st.stale != "":
			l.Detail = "stale: " + st.stale
		}
		switch {
		case st.restoreErr != nil && !st.restored:
			l.Detail += "; NOT restored: " + firstLine(st.restoreErr.Error())
		case st.restoreErr != nil:
			l.Detail += " (" + firstLine(st.restoreErr.Error()) + ")"
		}
		if l.State != runs.LeftUntouched {
			touched = true
		}
		out = append(out, l)
	}
	if !touched {
		return nil
	}
	return out
}
