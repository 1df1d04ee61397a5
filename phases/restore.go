package phases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// compensate puts back what the run changed after a failure.
//
// After a Phase-1 failure every service the run wrote is restored from its snapshot. After a
// Phase-2 failure with rollback, each failed service (more than one when several of a wave
// deployed at once) is restored and redeployed on its previous config, and services synced
// but not yet deployed are restored (they never ran this run's config, so they need no
// deploy). With halt nothing is touched: the run's report says which services carry this
// run's config without having been deployed. A service to which nothing was written (every
// write refused before it was applied) needs no restore.
func (x *execution) compensate(phase runs.Phase, rollback bool) {
	if x.notOwned() != nil {
		return // the run is its takeover's now, which records what was left
	}
	for _, st := range x.services {
		switch {
		case st.snap == nil || !st.snap.written() || st.superseded || st.deployed:
			continue
		case phase == runs.Phase1:
			x.restore(st, runs.Phase1, false)
		case !rollback:
			if !st.failed {
				x.setStep(runs.Phase2, st.svc.Name, func(step *runs.Step) {
					step.Status, step.Error = runs.StepSkipped, "not deployed (on_failure: halt); the service carries this run's synced config"
				})
			}
		default:
			x.restore(st, runs.Phase2, st.failed)
		}
	}
}

// restore puts one service back to its Phase-1 snapshot under its lock, unless a newer run
// changed it meanwhile, and redeploys it when asked and everything was put back. The Phase-1
// step records the restore; a redeploy is recorded on the Phase-2 step too. Every message says
// exactly what was put back, what was left and whether the previous config was redeployed.
func (x *execution) restore(st *svcState, phase runs.Phase, redeploy bool) {
	s := st.svc
	lease, err := x.acquire(x.ctx, s.LockKey(), phase, s.Name, false, nil)
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
	_ = x.release(lease, phase, s.Name, false)
	if err != nil {
		x.restoreFailed(phase, st, res, err)
		return
	}
	now := time.Now().UTC()
	x.setStep(runs.Phase1, s.Name, func(sp *runs.Step) {
		if res.restored {
			sp.Status, sp.RestoredAt = runs.StepRestored, now
		}
		sp.Error = joinNote(sp.Error, res.note)
	})
	if res.redeployed {
		x.setStep(runs.Phase2, s.Name, func(sp *runs.Step) {
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
	x.update(func(*runs.Run) {}, runs.Event{Type: runs.EventServiceRestored, Phase: phase, Service: s.Name,
		LockKey: lease.Key(), Fence: lease.Fence(), Message: msg,
		Data: map[string]string{"deployment_uuid": res.deployment}})
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
	var msg string
	switch {
	case len(left) > 0:
		msg = strings.Join(append(done, "NOT restored: "+strings.Join(left, ", ")), "; ") + ": " + err.Error()
	default: // everything was put back; the mark or the redeploy failed (err says which)
		msg = strings.Join(append(done, err.Error()), "; ")
	}
	x.setStep(runs.Phase1, st.svc.Name, func(sp *runs.Step) { sp.Error = joinNote(sp.Error, msg) },
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
			return res, err
		}
		if err := x.deleteCreated(ctx, snap.ref, dels); err != nil {
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
	x.setStep(runs.Phase1, s.Name, func(sp *runs.Step) { sp.Status, sp.RestoredAt = runs.StepRestored, time.Now().UTC() })
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
	x.setStep(runs.Phase2, s.Name, func(sp *runs.Step) {
		sp.RestoredAt, sp.DeploymentUUID, sp.DeployRequestedAt = time.Now().UTC(), res.deployment, time.Time{}
	})
	if err := x.waitDeployed(ctx, s, res.deployment, seen); err != nil {
		return res, fmt.Errorf("redeploy previous config: %w", err)
	}
	res.redeployed = true
	return res, nil
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
