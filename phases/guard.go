package phases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// ErrDeploymentInProgress: a deployment this run did not start is still queued or in progress
// on the application after the guard waited for it and tried to cancel it; the run refuses to
// write.
var ErrDeploymentInProgress = errors.New("another deployment of the application is in progress")

// ErrStillBuilding: a deployment of the run's own is still queued or in progress after the
// run canceled it again and again for the service's cancel_timeout (Coolify refused the
// cancels, or their answers were lost). Nothing more is written to the application: Coolify
// reads its env vars and image tag while it builds. A *StillBuildingError says which.
var ErrStillBuilding = errors.New("a deployment of the run's own is still building")

// StillBuildingError names the deployment that would not end, and what was last seen of it.
type StillBuildingError struct {
	Service, AppUUID, Deployment string
	Status                       coolify.DeploymentStatus // as last read ("" when it could not be read)
	Cancels                      int                      // cancels sent
	For                          time.Duration
	Last                         error // the last cancel's or read's failure
}

func (e *StillBuildingError) Error() string {
	status := string(e.Status)
	if status == "" {
		status = "queued or in progress, as far as it could be read"
	}
	msg := fmt.Sprintf("deployment %s of %s (%s) is still %s in Coolify after %d cancel(s) over %s", e.Deployment, e.Service, e.AppUUID,
		status, e.Cancels, e.For.Round(time.Second))
	if e.Last != nil {
		msg += " (last: " + firstLine(e.Last.Error()) + ")"
	}
	return msg + "; nothing more was written to " + e.Service + " after it, and its state is unknown: cancel the deployment in Coolify (or let it end), then run again"
}

// Is makes errors.Is(err, ErrStillBuilding) true.
func (e *StillBuildingError) Is(target error) bool { return target == ErrStillBuilding }

// Pauses between two looks at a deployment of the run's own that did not end when canceled:
// the first, doubled after each look up to the last.
const (
	endOwnFirst = time.Second
	endOwnMax   = 10 * time.Second
)

// endOwnDeployment makes sure that dep, a deployment of this run's own, has ended before
// anything more is written to the application: while Coolify shows it queued or in
// progress, it is canceled and read again, with backoff, for up to the service's
// cancel_timeout. A cancel that answered 200 counts only once a read shows the deployment
// ended (a cancel can fail, or its answer can be lost, with the deployment going on). It
// returns nil once the deployment has ended (or Coolify no longer knows it), a
// *StillBuildingError when it never did, or ctx's error.
func (x *execution) endOwnDeployment(ctx context.Context, s config.Service, dep string) error {
	start := time.Now()
	pause := min(endOwnFirst, s.CancelTimeout)
	serr := &StillBuildingError{Service: s.Name, AppUUID: s.UUID, Deployment: dep}
	for {
		d, err := x.cl.GetDeployment(ctx, dep)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, coolify.ErrNotFound):
			return nil // gone: it builds nothing
		case err != nil:
			serr.Last = err
		case d.Status.Terminal():
			return nil
		default:
			serr.Status = d.Status
			serr.Cancels++
			// 400: it ended between the read and the cancel; the next read says so.
			if cerr := x.cl.CancelDeployment(ctx, dep); cerr != nil && !errors.Is(cerr, coolify.ErrBadRequest) {
				serr.Last = cerr
			}
		}
		serr.For = time.Since(start)
		if serr.For >= s.CancelTimeout {
			return serr
		}
		if err := ctxtime.Sleep(ctx, min(pause, s.CancelTimeout-serr.For)); err != nil {
			return err
		}
		pause = min(2*pause, endOwnMax)
	}
}

// guardRounds bounds how often clearDeployments looks again after waiting or canceling.
const guardRounds = 3

// clearDeployments is called under the service's lease before every mutating Coolify call on
// an application (Phase-1 sync, restore, rollback, deploy). The rule: no write while a
// deployment of the application is queued or in progress that this run did not start.
//
//   - A deployment started by a run whose daemon is dead (its liveness lease expired, or the
//     run was already ended as interrupted) is canceled at once.
//   - Any other (a live run's, or one nobody recorded: a deploy from Coolify's UI, or a
//     daemon killed between its deploy and its record) is waited for, up to the service's
//     deploy_timeout; one still running then is canceled.
//
// Every cancel is recorded as a deploy.canceled event of this run and a cancel_deployment
// audit record. The run's own deployments stand in the way too: before a deploy (forDeploy)
// they are waited for (a deploy would be dropped by Coolify's dedup while one runs); before a
// write they are canceled and seen to end (endOwnDeployment: Coolify reads the env vars and
// the tag while it builds, so a write must not leak into a build the run meant to stop).
// Coolify services have no deployments to list: nothing to do.
func (x *execution) clearDeployments(ctx context.Context, s config.Service, phase runs.Phase, forDeploy bool) error {
	if s.Kind == config.KindService {
		return nil
	}
	for range guardRounds {
		active, err := x.cl.ActiveDeployments(ctx, s.UUID)
		if err != nil {
			return fmt.Errorf("check for deployments in progress: %w", err)
		}
		if len(active) == 0 {
			return nil
		}
		for _, d := range active {
			if !forDeploy && x.startedDeployment(d.UUID) {
				err = x.endOwnDeployment(ctx, s, d.UUID)
			} else {
				err = x.settle(ctx, s, phase, d)
			}
			if err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("%w: %s (%s) still has a deployment queued or running after %d rounds of waiting and canceling; nothing written",
		ErrDeploymentInProgress, s.Name, s.UUID, guardRounds)
}

// settle waits for or cancels one deployment that stands in the way.
func (x *execution) settle(ctx context.Context, s config.Service, phase runs.Phase, d coolify.Deployment) error {
	if x.startedDeployment(d.UUID) {
		_, err := x.cl.WaitDeployment(ctx, d.UUID, s.DeployTimeout)
		if ctx.Err() != nil {
			return err
		}
		return nil
	}
	owner, dead := x.deploymentOwner(ctx, s, d)
	if dead {
		return x.cancelForeign(ctx, s, phase, d.UUID, fmt.Sprintf("deployment %s of %s was left running by %s, whose daemon is gone", d.UUID, s.Name, owner))
	}
	x.log.LogAttrs(ctx, slog.LevelInfo, "waiting for a deployment this run did not start",
		slog.String(logService, s.Name), slog.String(logkey.Deployment, d.UUID), slog.String(logkey.Owner, owner))
	_, err := x.cl.WaitDeployment(ctx, d.UUID, s.DeployTimeout)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for deployment %s (%s) of %s: %w", d.UUID, owner, s.Name, err)
	case errors.Is(err, coolify.ErrDeploymentTimeout):
		// WaitDeployment canceled it (Coolify has no reaper for stuck deployments).
		x.recordCancel(ctx, s, phase, d.UUID, fmt.Sprintf("deployment %s of %s (%s) did not end within deploy_timeout %s", d.UUID, s.Name, owner, s.DeployTimeout), err)
	}
	return nil
}

// deploymentOwner says who started deployment d, as far as the store knows, and whether
// that owner is dead: the service's mark names the last run that wrote or deployed it.
func (x *execution) deploymentOwner(ctx context.Context, s config.Service, d coolify.Deployment) (string, bool) {
	m, err := x.e.d.Marks.GetMark(ctx, s.UUID)
	if err != nil || m.RunID == x.run.ID {
		return "an unrecorded deploy", false
	}
	r, err := x.e.d.Store.Get(ctx, m.RunID)
	if err != nil {
		return "an unrecorded deploy", false
	}
	who := fmt.Sprintf("run %s on %s", r.ID, orUnknown(r.Instance))
	if r.Status.Terminal() {
		// An interrupted run's deployment (one queued before the run was taken over) has
		// nobody left to watch it; any other deployment after a run ended is not its.
		dead := r.Status == runs.StatusInterrupted && (d.CreatedAt.IsZero() || !d.CreatedAt.After(r.EndedAt))
		if !dead {
			return "an unrecorded deploy", false
		}
		return who, true
	}
	return who, !x.e.ownerAlive(ctx, r.Instance, r.ID)
}

// cancelForeign cancels a deployment this run did not start and records it.
func (x *execution) cancelForeign(ctx context.Context, s config.Service, phase runs.Phase, depUUID, why string) error {
	err := x.cl.CancelDeployment(ctx, depUUID)
	if err != nil && !errors.Is(err, coolify.ErrBadRequest) { // 400: it ended meanwhile
		return fmt.Errorf("cancel deployment %s: %w (%s)", depUUID, err, why)
	}
	x.recordCancel(ctx, s, phase, depUUID, why, nil)
	return nil
}

// recordCancel writes the deploy.canceled event and the cancel_deployment audit record.
func (x *execution) recordCancel(ctx context.Context, s config.Service, phase runs.Phase, depUUID, why string, detail error) {
	msg := "canceled: " + why
	if detail != nil {
		msg += " (" + firstLine(detail.Error()) + ")"
	}
	x.rec.event(runs.Event{Type: runs.EventDeployCanceled, Phase: phase, Service: s.Name, LockKey: s.LockKey(),
		Message: msg, Data: map[string]string{runs.DataDeployment: depUUID}})
	x.e.audit(ctx, runs.AuditCancelDeployment, s.LockKey(), fmt.Sprintf("run %s: %s", x.run.ID, msg),
		map[string]string{"run": x.run.ID, "deployment": depUUID, "service": s.Name})
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// startedDeployment reports whether this run started the deployment.
func (x *execution) startedDeployment(uuid string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.started[uuid]
}

// noteStarted records a deployment this run started.
func (x *execution) noteStarted(uuid string) {
	if uuid == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.started == nil {
		x.started = map[string]bool{}
	}
	x.started[uuid] = true
}

// ownerAlive reports whether the daemon instance owner still executes run id: this engine
// when owner is this instance, else any daemon whose liveness lease is held.
func (e *Engine) ownerAlive(ctx context.Context, owner, id string) bool {
	if owner == e.d.Instance {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.execs[id] != nil
	}
	_, err := e.d.Locker.Get(ctx, orchestrator.DaemonLiveKey(owner))
	// Unknown (backend down) counts as alive: waiting is the safe side.
	return err == nil || !errors.Is(err, locks.ErrNotFound)
}

// audit appends a record of an action the engine took itself (a deployment canceled, a dead
// daemon's runs taken over, a leftover lease force-released, a rollback) to the run store's
// audit log, as "daemon:<instance>" with outcome ok: it is written once the action is done.
// A failure to write it is logged at error level, never dropped in silence.
func (e *Engine) audit(ctx context.Context, action, key, reason string, detail map[string]string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	al := e.d.Audit
	if al == nil { // a wiring mistake (see Deps.Audit), worth a line each time
		e.log.LogAttrs(ctx, slog.LevelError, "audit record not written: the engine has no audit log",
			slog.String(logkey.Action, action), slog.String(logLockKey, key))
		return
	}
	maps.DeleteFunc(detail, func(_, v string) bool { return v == "" })
	rec := runs.AuditRecord{Subject: "daemon:" + e.d.Instance, Action: action, Target: key, Reason: reason,
		Outcome: runs.AuditOK, Detail: detail}
	if _, err := al.AppendAudit(ctx, rec); err != nil {
		e.log.LogAttrs(ctx, slog.LevelError, "audit record not written", slog.String(logkey.Action, action),
			slog.String(logLockKey, key), slog.String(logError, err.Error()))
	}
}
