package phases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// ErrInstanceLive: another daemon holds this instance's liveness lease: two daemons must not
// share an ORCH_INSTANCE.
var ErrInstanceLive = errors.New("another daemon with this instance name is running")

// takeoverWait bounds the wait for another daemon's takeover of the same instance.
const takeoverWait = 30 * time.Second

// holdLiveness takes this instance's liveness lease. A lease left by this instance's previous
// life (killed) expires within its TTL, so the wait is one TTL and a little more; a lease that
// is renewed all along that wait belongs to a live daemon: ErrInstanceLive.
func (e *Engine) holdLiveness(ctx context.Context) error {
	ttl := e.d.LivenessTTL
	key := orchestrator.DaemonLiveKey(e.d.Instance)
	if err := e.liveElsewhere(ctx, key, ttl); err != nil {
		return err
	}
	lease, err := e.acquireLiveness(ctx, key, ttl)
	if errors.Is(err, locks.ErrBudgetExhausted) {
		return fmt.Errorf("instance %q: its liveness lease %q stayed held for %s: %w (give each daemon its own ORCH_INSTANCE): %w",
			e.d.Instance, key, ttl+ttl/2, ErrInstanceLive, err)
	}
	if err != nil {
		return fmt.Errorf("instance %q: take liveness lease %q: %w", e.d.Instance, key, err)
	}
	e.mu.Lock()
	e.live = lease
	e.mu.Unlock()
	return nil
}

// startBackendWait bounds how long a starting daemon tries again to take its liveness lease
// while the lock backend is unavailable: a daemon (re)started during a Redis failover, or
// before Redis is up, waits for it rather than exiting at once.
const startBackendWait = 30 * time.Second

// acquireLiveness takes the liveness lease on key, trying again while the backend is
// unavailable (locks.ErrUnavailable: unreachable, or a grant its replicas did not confirm),
// for up to startBackendWait, with a warning each time.
func (e *Engine) acquireLiveness(ctx context.Context, key string, ttl time.Duration) (*locks.Lease, error) {
	start, pause := time.Now(), 250*time.Millisecond
	for {
		lease, err := e.d.Locker.Acquire(ctx, locks.Request{
			Key: key, Holder: orchestrator.DaemonHolder(e.d.Instance), Owner: e.daemonOwner(),
			Message: fmt.Sprintf("daemon %s is alive", e.d.Instance), TTL: ttl,
			Budget: locks.Budget{Timeout: ttl + ttl/2, MaxRetries: 0},
		})
		if err == nil || !errors.Is(err, locks.ErrUnavailable) || time.Since(start)+pause > startBackendWait {
			return lease, err
		}
		e.log.LogAttrs(ctx, slog.LevelWarn, "lock backend unavailable at start; trying again",
			slog.String(logLockKey, key), slog.Duration("in", pause), slog.String(logError, err.Error()))
		if err := ctxtime.Sleep(ctx, pause); err != nil {
			return nil, err
		}
		pause = min(2*pause, 4*time.Second)
	}
}

// liveElsewhere watches a liveness lease on key that another process holds, until it ends
// (nil: Acquire takes it) or its holder renews it: a live daemon has this instance name, and
// the error says so at once (within the holder's renewal interval, a third of its TTL, rather
// than after a whole TTL) without suggesting to force-release that daemon's lease.
func (e *Engine) liveElsewhere(ctx context.Context, key string, ttl time.Duration) error {
	first, err := e.d.Locker.Get(ctx, key)
	if err != nil {
		return nil // free, or unreadable: Acquire decides
	}
	tick := min(max(ttl/10, 20*time.Millisecond), 250*time.Millisecond)
	giveUp := first.ExpiresAt.Add(ttl / 2)
	for time.Now().Before(giveUp) {
		t := time.NewTimer(tick)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		cur, err := e.d.Locker.Get(ctx, key)
		if err != nil {
			return nil // released or expired: the previous life is gone
		}
		if cur.Fence != first.Fence || cur.ExpiresAt.After(first.ExpiresAt) {
			return fmt.Errorf("instance %q is in use: %s holds its liveness lease %q and renewed it at %s: %w; give each daemon its own ORCH_INSTANCE "+
				"(do not force-release that lease: it is a running daemon's)",
				e.d.Instance, cur.Holder, key, time.Now().UTC().Format(time.RFC3339), ErrInstanceLive)
		}
	}
	return nil
}

// liveLease returns the current liveness lease.
func (e *Engine) liveLease() *locks.Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.live
}

// keepLive takes the liveness lease again whenever it is lost (the lock backend stalled or
// was unreachable past the TTL, or the process was stopped), so a daemon that lives on is not
// taken for dead. Before it does, it stops every execution it owns: from the moment the lease
// was lost, the other daemons may take their runs over, and an execution that went on after
// that would act on runs that are not its own. Once the lease is held again, it takes over
// the runs it stopped that nobody else took over meanwhile (takeOverDisowned).
func (e *Engine) keepLive(ctx context.Context) {
	for {
		lease := e.liveLease()
		select {
		case <-ctx.Done():
			return
		case <-lease.Done():
		}
		if ctx.Err() != nil {
			return
		}
		lost := lease.Err()
		e.log.LogAttrs(ctx, slog.LevelWarn, "liveness lease lost; stopping this daemon's runs before taking it again", slog.String(logError, fmt.Sprint(lost)))
		e.stopOwned(ctx, fmt.Errorf("%w: daemon %s lost its liveness lease (%v), so the other daemons presume it dead", ErrNotOwned, e.d.Instance, lost))
		for {
			err := e.holdLiveness(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			e.log.LogAttrs(ctx, slog.LevelError, "liveness lease not taken again", slog.String(logError, err.Error()))
			t := time.NewTimer(e.d.LivenessTTL / 4)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		e.log.LogAttrs(ctx, slog.LevelInfo, "liveness lease taken again")
		e.takeOverDisowned(ctx)
	}
}

// daemonOwner groups the daemon's own leases (liveness, takeover) in the locker.
func (e *Engine) daemonOwner() string { return orchestrator.NamespaceDaemon + e.d.Instance }

// watch looks, every half liveness TTL, for unfinished runs whose owner's liveness lease has
// expired, and takes them over; it also keeps this daemon's own liveness lease.
func (e *Engine) watch(ctx context.Context) {
	defer close(e.watchDone)
	live := make(chan struct{})
	go func() { defer close(live); e.keepLive(ctx) }()
	defer func() { <-live }()
	suspects := map[string]bool{}
	for {
		wait := time.Duration(float64(e.d.LivenessTTL/2) * (0.75 + rand.Float64()/2))
		if ctxtime.Sleep(ctx, wait) != nil {
			return
		}
		suspects = e.takeOverDead(ctx, suspects)
	}
}

// takeOverDead takes over the runs of every owner found without a liveness lease on two
// scans in a row (suspects are those found so on the scan before): a daemon whose lease
// lapsed in a backend stall takes it again at once, and is not taken for dead. It returns
// the owners found without a lease on this scan.
func (e *Engine) takeOverDead(ctx context.Context, suspects map[string]bool) map[string]bool {
	next := map[string]bool{}
	if lease := e.liveLease(); lease == nil || lease.Err() != nil {
		return next // this daemon may itself be cut off: judge nobody
	}
	e.mu.Lock()
	retry := e.leftovers
	e.mu.Unlock()
	if retry {
		if _, err := e.takeover(ctx, e.d.Instance, e.restartReason(), false); err == nil {
			e.mu.Lock()
			e.leftovers = false
			e.mu.Unlock()
			e.forgetEndedDisowned(ctx)
		} else if ctx.Err() == nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "previous life's runs still not taken over", slog.String(logError, err.Error()))
		}
	}
	unfinished, err := e.d.Store.Unfinished(ctx, "")
	if err != nil {
		if ctx.Err() == nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "takeover watch: runs not listed", slog.String(logError, err.Error()))
		}
		return next
	}
	var owners []string
	for _, r := range unfinished {
		if r.Instance != "" && r.Instance != e.d.Instance && !slices.Contains(owners, r.Instance) {
			owners = append(owners, r.Instance)
		}
	}
	for _, owner := range owners {
		if _, err := e.d.Locker.Get(ctx, orchestrator.DaemonLiveKey(owner)); !errors.Is(err, locks.ErrNotFound) {
			continue // alive, or unknown: do nothing
		}
		next[owner] = true
		if !suspects[owner] {
			continue // missing once: look again next time
		}
		if _, err := e.takeover(ctx, owner, fmt.Sprintf("daemon %s died (its liveness lease expired); taken over by %s", owner, e.d.Instance), false); err != nil && ctx.Err() == nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "takeover failed", slog.String(logkey.Owner, owner), slog.String(logError, err.Error()))
		}
	}
	return next
}

// takeover ends the unfinished runs of owner under the lock daemon:takeover:<owner>: each
// run's ownership epoch is advanced, its deployments still running are canceled, its leases
// released, its steps finished as interrupted, and the state it left each service in written
// (Run.Left). With wait, the lock is waited for (this instance's own leftovers at start);
// without, a takeover under way elsewhere is left to finish. Of this instance's own runs,
// only leftovers are taken (see leftover): those of a previous life, with reason, and those
// whose executions were disowned, with disownedReason. It returns the runs it ended.
func (e *Engine) takeover(ctx context.Context, owner, reason string, wait bool) ([]runs.Run, error) {
	budget := locks.Budget{Timeout: 10 * time.Millisecond, MaxRetries: 0}
	if wait {
		budget.Timeout = takeoverWait
	}
	key := orchestrator.DaemonTakeoverKey(owner)
	lease, err := e.d.Locker.Acquire(ctx, locks.Request{
		Key: key, Holder: orchestrator.DaemonHolder(e.d.Instance), Owner: e.daemonOwner(),
		Message: fmt.Sprintf("daemon %s takes over the runs of %s", e.d.Instance, owner),
		TTL:     e.d.LivenessTTL, Budget: budget,
	})
	if errors.Is(err, locks.ErrHeld) && !wait {
		return nil, nil // another daemon is at it
	}
	if err != nil {
		return nil, fmt.Errorf("take over %s: %w", owner, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteTimeout)
		defer cancel()
		_ = lease.Release(rctx)
	}()
	lctx, cancel := lease.Context(ctx)
	defer cancel()
	if owner != e.d.Instance {
		// Looked at again under the lock: the owner may have come back.
		if _, err := e.d.Locker.Get(lctx, orchestrator.DaemonLiveKey(owner)); !errors.Is(err, locks.ErrNotFound) {
			return nil, nil
		}
	}
	list, err := e.d.Store.Unfinished(lctx, owner)
	if err != nil {
		return nil, fmt.Errorf("take over %s: %w", owner, err)
	}
	var ended []runs.Run
	for _, r := range list {
		why := reason
		if owner == e.d.Instance {
			if !e.leftover(r) {
				continue // a run of this life
			}
			if !r.CreatedAt.Before(e.startedAt) {
				why = e.disownedReason()
			}
		}
		done, err := e.takeOverRun(lctx, r, why, lease.Fence())
		if err != nil {
			return ended, err
		}
		if done != nil {
			ended = append(ended, *done)
			if owner == e.d.Instance && !r.CreatedAt.Before(e.startedAt) {
				e.reportTakenOver(*done, e.d.Instance, true)
			}
		}
	}
	if len(ended) > 0 {
		ids := make([]string, len(ended))
		for i, r := range ended {
			ids[i] = r.ID
		}
		e.audit(lctx, runs.AuditTakeover, orchestrator.DaemonLiveKey(owner), fmt.Sprintf("%s: runs %s", reason, strings.Join(ids, ", ")),
			map[string]string{"owner": owner, "runs": strings.Join(ids, ",")})
		e.log.LogAttrs(lctx, slog.LevelWarn, "runs taken over", slog.String(logkey.Owner, owner), slog.String(logkey.Runs, strings.Join(ids, ",")))
	}
	return ended, lease.Err()
}

// takeOverRun ends one run of a dead daemon. Order matters: its deployments still running
// are canceled before its leases are released, so the next holder of a service lock never
// finds the dead run's deployment running.
// Its Coolify calls carry the run's ID and the takeover lease's fence.
func (e *Engine) takeOverRun(ctx context.Context, r runs.Run, reason string, fence int64) (out *runs.Run, err error) {
	ctx, span := e.startTakeoverSpan(ctx, r)
	defer func() {
		if out != nil {
			endRunSpan(span, out.Status, out.Reason)
		} else {
			endSpan(span, err) // it ended meanwhile (nil), or the takeover failed
		}
	}()
	// The epoch first, before anything is touched: from this write on, the run's old
	// execution (a daemon cut off from the store, or frozen, that comes back) confirms its
	// writes against it and finds the run no longer its own.
	r, err = e.d.Store.Update(ctx, r.ID, func(cur *runs.Run) error {
		cur.Epoch = max(cur.Epoch, 1) + 1
		cur.TakenOverBy, cur.TakenOverAt = e.d.Instance, time.Now().UTC()
		return nil
	}, runs.Event{Type: runs.EventRunTakeover, Message: fmt.Sprintf("daemon %s takes the run over from daemon %s: %s", e.d.Instance, r.Instance, reason),
		Data: map[string]string{runs.DataInstance: r.Instance, runs.DataTakenOverBy: e.d.Instance}})
	if errors.Is(err, runs.ErrEnded) {
		return nil, nil // it ended meanwhile: its daemon was not dead after all
	}
	if err != nil {
		return nil, fmt.Errorf("take over run %s: %w", r.ID, err)
	}
	ends, evs, err := e.settleLeftDeployments(coolify.WithTrace(ctx, r.ID, fence), r, reason)
	if err != nil {
		return nil, err
	}
	released := e.releaseRunLeases(ctx, r, reason)
	now := time.Now().UTC()
	left := leftStates(r, ends)
	evs = append(evs, runs.Event{Type: runs.EventRunInterrupted, Message: "run interrupted: " + reason + describeLeft(left),
		Data: map[string]string{runs.DataInstance: r.Instance, runs.DataHeldLocks: strings.Join(released, ",")}})
	ended, err := e.d.Store.Update(ctx, r.ID, func(cur *runs.Run) error {
		cur.Status, cur.Reason, cur.EndedAt, cur.HeldLocks, cur.Waiting = runs.StatusInterrupted, reason, now, nil, nil
		cur.Left = leftStates(*cur, ends)
		for i := range cur.Steps {
			if !cur.Steps[i].Status.Done() {
				cur.Steps[i].Status = runs.StepInterrupted
				if cur.Steps[i].EndedAt.IsZero() && !cur.Steps[i].StartedAt.IsZero() {
					cur.Steps[i].EndedAt = now
				}
			}
		}
		return nil
	}, evs...)
	if errors.Is(err, runs.ErrEnded) {
		return nil, nil // it ended meanwhile: its daemon was not dead after all
	}
	if err != nil {
		return nil, fmt.Errorf("take over run %s: %w", r.ID, err)
	}
	if o := e.d.Observer; o != nil {
		o.RunEnded(r.Pipeline, runs.StatusInterrupted)
	}
	e.runEnded(ended)
	return &ended, nil
}

// settleLeftDeployments cancels the deployments the dead run r started that still run, and
// finds how the others ended: per service name, how its deployment ended, and the events
// that say what was canceled.
func (e *Engine) settleLeftDeployments(ctx context.Context, r runs.Run, reason string) (map[string]deployEnd, []runs.Event, error) {
	var cl Coolify
	if p := e.d.Pipelines[r.Pipeline]; p != nil {
		cl = e.coolifyFor(p)
	}
	var evs []runs.Event
	ends := map[string]deployEnd{} // service name → how its deployment ended
	for _, s := range r.Steps {
		if s.Phase == runs.Phase2 && !s.DeployRequestedAt.IsZero() && cl != nil {
			end, ev, err := e.settleRequestedDeploy(ctx, cl, r, s, reason)
			if err != nil {
				return nil, nil, err
			}
			if end.uuid != "" {
				ends[s.Name] = end
			}
			evs = append(evs, ev...)
			continue
		}
		// A step's own deployment while the step runs, and the redeploy of the previous
		// config once a rollback restored the service (RestoredAt), whatever the step's status.
		if s.Phase != runs.Phase2 || s.DeploymentUUID == "" ||
			(s.Status != runs.StepRunning && s.Status != runs.StepDeployed && s.RestoredAt.IsZero()) {
			continue
		}
		if cl == nil {
			evs = append(evs, runs.Event{Type: runs.EventServiceFailed, Phase: runs.Phase2, Service: s.Name,
				Message: fmt.Sprintf("deployment %s not looked at: pipeline %s is not loaded on %s", s.DeploymentUUID, r.Pipeline, e.d.Instance)})
			continue
		}
		d, err := cl.GetDeployment(ctx, s.DeploymentUUID)
		if err != nil {
			if errors.Is(err, coolify.ErrNotFound) {
				continue
			}
			return nil, nil, fmt.Errorf("take over run %s: deployment %s of %s: %w", r.ID, s.DeploymentUUID, s.Name, err)
		}
		if !d.Status.Active() {
			ends[s.Name] = deployEnd{uuid: d.UUID, status: d.Status}
			continue
		}
		ev, err := e.cancelLeftDeployment(ctx, cl, r, s, d.UUID, reason, "")
		if err != nil {
			return nil, nil, err
		}
		ends[s.Name] = deployEnd{uuid: d.UUID, status: coolify.StatusCancelledByUser}
		evs = append(evs, ev)
	}
	return ends, evs, nil
}

// settleRequestedDeploy handles step s of the dead run r, which died between sending a
// deploy and recording its deployment: the guard had cleared every other before the request,
// so what runs now is its, as long as the run still holds the service's lease (else another
// run may have deployed since, and nothing tells the deployments apart). What runs is
// canceled; otherwise the deployment the request started and has ended, if any, is found. It
// returns how the deployment ended (zero when none was found) and the cancel events.
func (e *Engine) settleRequestedDeploy(ctx context.Context, cl Coolify, r runs.Run, s runs.Step, reason string) (deployEnd, []runs.Event, error) {
	own, err := e.holdsLease(ctx, r, orchestrator.ServiceLockKey(s.UUID))
	if err != nil {
		return deployEnd{}, nil, fmt.Errorf("take over run %s: lease of %s: %w", r.ID, s.Name, err)
	}
	if !own {
		e.log.LogAttrs(ctx, slog.LevelWarn, "deploy of a dead run not looked for: its service lease is gone",
			slog.String(logRunID, r.ID), slog.String(logService, s.Name))
		return deployEnd{}, nil, nil
	}
	active, err := cl.ActiveDeployments(ctx, s.UUID)
	if err != nil {
		return deployEnd{}, nil, fmt.Errorf("take over run %s: deployments of %s: %w", r.ID, s.Name, err)
	}
	var end deployEnd
	var evs []runs.Event
	for _, d := range active {
		ev, err := e.cancelLeftDeployment(ctx, cl, r, s, d.UUID, reason, "its deploy was sent but not recorded before the daemon died")
		if err != nil {
			return deployEnd{}, nil, err
		}
		end = deployEnd{uuid: d.UUID, status: coolify.StatusCancelledByUser}
		evs = append(evs, ev)
	}
	if len(active) > 0 {
		return end, evs, nil
	}
	// Nothing runs: the deploy was dropped, or its deployment has ended since.
	if d, ok := e.requestedDeployment(ctx, cl, r, s); ok {
		end = deployEnd{uuid: d.UUID, status: d.Status}
	}
	return end, nil, nil
}

// holdsLease reports whether one of r's step leases holds key now (a live lease).
func (e *Engine) holdsLease(ctx context.Context, r runs.Run, key string) (bool, error) {
	in, err := e.d.Locker.Get(ctx, key)
	if errors.Is(err, locks.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return isRunsHolder(in.Holder, r), nil
}

// cancelLeftDeployment cancels deployment depUUID of step s, left running by the dead run r,
// audits it and returns the deploy.canceled event to record (how says how it was found).
func (e *Engine) cancelLeftDeployment(ctx context.Context, cl Coolify, r runs.Run, s runs.Step, depUUID, reason, how string) (runs.Event, error) {
	if err := cl.CancelDeployment(ctx, depUUID); err != nil && !errors.Is(err, coolify.ErrBadRequest) {
		return runs.Event{}, fmt.Errorf("take over run %s: cancel deployment %s of %s: %w", r.ID, depUUID, s.Name, err)
	}
	msg := fmt.Sprintf("canceled: deployment %s of %s was left running by the dead daemon %s (%s)", depUUID, s.Name, r.Instance, reason)
	if how != "" {
		msg += "; " + how
	}
	e.audit(ctx, runs.AuditCancelDeployment, orchestrator.ServiceLockKey(s.UUID), fmt.Sprintf("run %s: %s", r.ID, msg),
		map[string]string{"run": r.ID, "deployment": depUUID, "service": s.Name})
	return runs.Event{Type: runs.EventDeployCanceled, Phase: runs.Phase2, Service: s.Name, LockKey: orchestrator.ServiceLockKey(s.UUID),
		Message: msg, Data: map[string]string{runs.DataDeployment: depUUID}}, nil
}

// releaseRunLeases force-releases every lease still held under the run's holder prefix: the
// keys its record names and any other (a lease granted just before the daemon died, before
// it was recorded). It returns the keys released.
func (e *Engine) releaseRunLeases(ctx context.Context, r runs.Run, reason string) []string {
	keys := slices.Clone(r.HeldLocks)
	for _, ns := range orchestrator.Namespaces() {
		infos, err := e.d.Locker.List(ctx, ns)
		if err != nil {
			continue
		}
		for _, in := range infos {
			if isRunsHolder(in.Holder, r) && !slices.Contains(keys, in.Key) {
				keys = append(keys, in.Key)
			}
		}
	}
	var released []string
	for _, key := range keys {
		if e.releaseLeftover(ctx, r, key, reason) {
			released = append(released, key)
		}
	}
	return released
}

// requestedDeployment finds the deployment a dead run's unrecorded deploy request started,
// once it has ended (see endedSince). A failed read is logged and finds none.
func (e *Engine) requestedDeployment(ctx context.Context, cl Coolify, r runs.Run, s runs.Step) (coolify.Deployment, bool) {
	d, ok, err := endedSince(ctx, cl, s.UUID, s.DeployRequestedAt)
	if err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, "deployments of a dead run's service not read; its deploy request is reported as not deployed",
			slog.String(logRunID, r.ID), slog.String(logService, s.Name), slog.String(logError, err.Error()))
	}
	return d, ok
}

// endedSince finds, among the application's deployments, the one a deploy request stamped
// requested started, when it is no longer queued or running: the newest deployment, if
// Coolify created it no earlier than the second the request was stamped in (its created_at
// has whole seconds). The guard let no other deployment run before the request, and the run
// held the service's lease since, so a newer deployment is the request's (or one a person
// started meanwhile, which nothing tells apart). Coolify's clock is compared with the
// stamp's: behind by a second or more, it finds none; ahead, it may take an earlier
// deployment, one that ended before the guard's read, for the request's.
func endedSince(ctx context.Context, cl Coolify, appUUID string, requested time.Time) (coolify.Deployment, bool, error) {
	_, ds, err := cl.ListDeployments(ctx, appUUID, 0, 1)
	if err != nil {
		return coolify.Deployment{}, false, err
	}
	if len(ds) == 0 || ds[0].CreatedAt.Before(requested.Truncate(time.Second)) {
		return coolify.Deployment{}, false, nil
	}
	return ds[0], true, nil
}

// deployEnd is how a deployment a dead run was waiting for ended.
type deployEnd struct {
	uuid   string
	status coolify.DeploymentStatus
}

// leftStates says, per service of the run, what state the run left it in, and names each
// mobile step whose write was under way.
func leftStates(r runs.Run, ends map[string]deployEnd) []runs.Left {
	var out []runs.Left
	for _, s := range r.Steps {
		if s.Phase != runs.Phase1 {
			continue
		}
		l := runs.Left{Service: s.Name, UUID: s.UUID, State: runs.LeftUntouched}
		p2 := r.Step(runs.Phase2, s.Name)
		end, waited := ends[s.Name]
		switch {
		case s.Status == runs.StepRestored:
			l.State = runs.LeftRestored
			redeployed := waited && p2 != nil && (!p2.RestoredAt.IsZero() || !p2.DeployRequestedAt.IsZero())
			if redeployed {
				l.Detail = "previous config put back; its redeploy, deployment " + end.uuid + ", ended " + string(end.status)
			}
			if strings.HasPrefix(s.Note, unrunNotePrefix) && !(redeployed && end.status == coolify.StatusFinished) {
				l.Detail = s.Note + "; it was not redeployed"
			}
		case waited && end.status == coolify.StatusFinished:
			l.State, l.Detail = runs.LeftDeployed, "deployment "+end.uuid+" finished after the daemon died; health not checked"
		case waited && end.status == coolify.StatusFailed:
			l.State, l.Detail = runs.LeftSyncedNotDeployed, "deployment "+end.uuid+" failed; the service carries this run's config"
		case waited:
			l.State, l.Detail = runs.LeftDeployCanceled, "deployment "+end.uuid+" canceled; the service carries this run's config, not deployed"
		case p2 != nil && (p2.Status == runs.StepHealthy || p2.Status == runs.StepDeployed):
			l.State = runs.LeftDeployed
		case s.Status == runs.StepSynced && s.Changes.Empty():
			l.State, l.Detail = runs.LeftUntouched, "already carried this run's config"
		case s.Status == runs.StepSynced:
			l.State = runs.LeftSyncedNotDeployed
		case s.Status == runs.StepFailed && !s.Changes.Empty():
			// Changes on a failed sync are what may have been written before it failed.
			l.State, l.Detail = runs.LeftSyncedNotDeployed, "the sync failed part way and was not restored: it may carry part of this run's config"
		case s.Status == runs.StepRunning:
			l.State, l.Detail = runs.LeftSyncedNotDeployed, "the sync was under way: it may carry part of this run's config"
		}
		out = append(out, l)
	}
	for _, s := range r.Steps {
		if s.Phase == runs.PhaseMobile && s.Status == runs.StepRunning {
			// Past its lock, the step reads, then writes: nothing tells whether the write landed.
			out = append(out, runs.Left{Service: s.Name, State: runs.LeftWriteUnknown,
				Detail: "the Flagsmith update was under way: it may have been written; read the feature's value before running again"})
		}
	}
	return out
}

func describeLeft(left []runs.Left) string {
	var parts []string
	for _, l := range left {
		parts = append(parts, l.Service+": "+strings.ReplaceAll(l.State, "_", " "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; services left " + strings.Join(parts, ", ")
}
