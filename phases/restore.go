package phases

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// compensate puts back what the run changed after a failure.
//
// After a Phase-1 failure every service the run wrote is restored from its snapshot. After a
// Phase-2 failure with rollback, the failed service is restored and redeployed on its
// previous config, and services synced but not yet deployed are restored (they never ran
// this run's config, so they need no deploy). With halt nothing is touched: the run's report
// says which services carry this run's config without having been deployed.
func (x *execution) compensate(phase runs.Phase, failed *svcState, rollback bool) {
	for _, st := range x.services {
		switch {
		case st.snap == nil || st.superseded || st.deployed:
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
			x.restore(st, runs.Phase2, st == failed)
		}
	}
}

// restore puts one service back to its Phase-1 snapshot under its lock, unless a newer run
// changed it meanwhile, and redeploys it when asked. The Phase-1 step records the restore;
// a redeploy is recorded on the Phase-2 step too.
func (x *execution) restore(st *svcState, phase runs.Phase, redeploy bool) {
	s := st.svc
	lease, err := x.acquire(x.ctx, s.LockKey(), phase, s.Name, false, nil)
	if err != nil {
		x.restoreFailed(phase, s.Name, err)
		return
	}
	sctx, cancel := lease.Context(x.ctx)
	sctx = coolify.WithTrace(sctx, x.run.ID, lease.Fence())
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
		x.restoreFailed(phase, s.Name, err)
		return
	}
	now := time.Now().UTC()
	x.setStep(runs.Phase1, s.Name, func(sp *runs.Step) {
		if res.restored {
			sp.Status, sp.RestoredAt = runs.StepRestored, now
		}
		sp.Error = joinNote(sp.Error, res.note)
	})
	if redeploy {
		x.setStep(runs.Phase2, s.Name, func(sp *runs.Step) {
			sp.RestoredAt, sp.DeploymentUUID = now, res.deployment
		})
	}
	msg := "phase-1 snapshot restored"
	if redeploy {
		msg += " and previous config redeployed"
	}
	x.update(func(*runs.Run) {}, runs.Event{Type: runs.EventServiceRestored, Phase: phase, Service: s.Name,
		LockKey: lease.Key(), Fence: lease.Fence(), Message: joinNote(msg, res.note),
		Data: map[string]string{"deployment_uuid": res.deployment}})
}

// restoreResult says what restoreLocked did.
type restoreResult struct {
	restored   bool   // the snapshot was written back
	deployment string // the redeploy's deployment UUID
	note       string // what was left as it was, and why
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

func (x *execution) restoreFailed(phase runs.Phase, name string, err error) {
	msg := "NOT restored: " + err.Error()
	x.setStep(runs.Phase1, name, func(sp *runs.Step) { sp.Error = joinNote(sp.Error, msg) }, runs.Event{Type: runs.EventServiceFailed, Phase: phase, Service: name, Message: msg})
}

// restoreLocked writes the snapshot back while the service lock is held. It returns the
// redeploy's deployment UUID and a note when it left something as it was.
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

	var puts []coolify.EnvVar
	var dels []string
	var unrestorable []string
	for _, p := range snap.envs {
		switch {
		case p.existed && p.prev.ValueHidden(): // is_shown_once: its old value was never readable
			unrestorable = append(unrestorable, p.key)
		case p.existed:
			puts = append(puts, p.prev)
		default:
			dels = append(dels, p.key)
		}
	}
	if len(unrestorable) > 0 {
		res.note = fmt.Sprintf("env %v left at this run's value: Coolify never shows is_shown_once values, so the old ones are unknown", unrestorable)
	}
	if err := x.cl.UpsertEnvs(ctx, snap.ref, puts); err != nil {
		return res, err
	}
	if len(dels) > 0 {
		current, err := x.cl.ListEnvs(ctx, snap.ref)
		if err != nil {
			return res, err
		}
		for _, c := range current {
			if slices.Contains(dels, c.Key) && !c.IsPreview && c.UUID != "" {
				if err := x.cl.DeleteEnv(ctx, snap.ref, c.UUID); err != nil && !errors.Is(err, coolify.ErrNotFound) {
					return res, err
				}
			}
		}
	}
	if snap.tagChanged {
		if snap.tag == "" {
			res.note = joinNote(res.note, "image tag left at "+s.ImageTag+": it was empty before, which the API cannot set back")
		} else if err := x.cl.SetImageTag(ctx, s.UUID, snap.tag); err != nil {
			return res, err
		}
	}
	res.restored = true
	if _, err := x.e.d.Marks.PutMark(ctx, runs.Mark{UUID: s.UUID, RunID: x.run.ID, Fence: lease.Fence(), Phase: runs.Phase1, At: time.Now().UTC()}); err != nil {
		return res, fmt.Errorf("record restore mark: %w", err)
	}
	if !redeploy {
		return res, nil
	}
	var seen *coolify.Deployment
	if res.deployment, seen, err = x.trigger(ctx, s, runs.Phase2); err != nil {
		return res, fmt.Errorf("redeploy previous config: %w", err)
	}
	if err := x.waitDeployed(ctx, s, res.deployment, seen); err != nil {
		return res, fmt.Errorf("redeploy previous config: %w", err)
	}
	return res, nil
}
