package phases

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/mobile"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// mobileSteps runs the pipeline's mobile steps that run at when, in order, each as a
// read-modify-write under its own mobile: lock. The run holds no coolify: key here: the
// mobile step refuses to start otherwise.
func (x *execution) mobileSteps(when config.MobileWhen) (err error) {
	var sctx context.Context // the stage's, once a step runs
	for _, m := range x.p.Mobile {
		if m.When != when {
			continue
		}
		if err := x.stopping(); err != nil {
			return err
		}
		if when == config.WhenBeforePhase1 {
			if err := x.enterPhase(runs.StatusMobile); err != nil {
				return err
			}
		}
		if sctx == nil {
			var span trace.Span
			sctx, span = stage(x.ctx, "mobile "+string(when), runs.PhaseMobile)
			defer func() { endSpan(span, err) }()
		}
		if err := x.task(sctx, runs.PhaseMobile, m.Name, func(ctx context.Context) error { return x.mobileStep(ctx, m) }); err != nil {
			return err
		}
	}
	return nil
}

func (x *execution) mobileStep(ctx context.Context, m config.MobileStep) error {
	start := time.Now()
	x.rec.status(runs.StatusMobile)
	x.rec.step(runs.PhaseMobile, m.Name, func(s *runs.Step) {
		s.StartedAt, s.LockKey = start.UTC(), m.LockKey()
	}, runs.Event{Type: runs.EventPhaseStarted, Phase: runs.PhaseMobile, Service: m.Name, LockKey: m.LockKey()})

	client, err := x.e.flagsmithFor(m.Flagsmith)
	if err != nil {
		x.rec.fail(runs.PhaseMobile, m.Name, err)
		return err
	}
	// The mobile: lease is taken like every other: recorded in the run's events and held
	// locks. The locker refuses it while the run holds a coolify: key (ErrNamespace).
	wctx, stopWait := x.untilStop(ctx)
	sl := mobileLock(m, start)
	lease, err := x.leases.acquire(wctx, sl)
	stopWait()
	if err != nil {
		x.rec.fail(runs.PhaseMobile, m.Name, err)
		x.stepDone(runs.PhaseMobile, runs.StepFailed, start)
		return fmt.Errorf("mobile %s: %w", m.Name, err)
	}
	step := mobile.NewStep(client, mobile.WithStepLogger(x.log))
	paths := slices.Sorted(maps.Keys(m.Set))
	lctx, cancel := lease.Context(ctx)
	res, err := step.Run(lctx, mobileRequest(m, x.run.ID, lease.Fence()))
	err = leaseErr(lease, lctx, err)
	cancel()
	if rerr := x.leases.release(lease, sl); err == nil && errors.Is(rerr, locks.ErrLost) {
		err = rerr // the write may have raced with another holder
	}
	if err != nil {
		x.rec.fail(runs.PhaseMobile, m.Name, err)
		x.stepDone(runs.PhaseMobile, runs.StepFailed, start)
		return fmt.Errorf("mobile %s: %w", m.Name, err)
	}
	var fields []string
	defer func() {
		if res.Changed {
			x.mobileDone = append(x.mobileDone, mobileDone{step: m, res: res, paths: fields})
		}
	}()
	if res.Changed {
		skipped := map[string]bool{}
		for _, s := range res.Skipped {
			skipped[s.Path] = true
		}
		for _, p := range paths {
			if !skipped[p] {
				fields = append(fields, p)
			}
		}
	}
	msg := "already up to date"
	if res.Changed {
		msg = fmt.Sprintf("%s updated: %v", m.Feature, fields)
	}
	if len(res.Skipped) > 0 {
		msg += fmt.Sprintf(" (%d change(s) skipped: never downgrade)", len(res.Skipped))
	}
	x.rec.step(runs.PhaseMobile, m.Name, func(s *runs.Step) {
		s.Status, s.EndedAt, s.Fence, s.Changes = runs.StepUpdated, time.Now().UTC(), res.Fence, runs.Changes{Fields: fields, Values: fieldValues(res, fields)}
	}, runs.Event{Type: runs.EventMobileUpdated, Phase: runs.PhaseMobile, Service: m.Name, LockKey: res.LockKey, Fence: res.Fence, Message: msg})
	x.stepDone(runs.PhaseMobile, runs.StepUpdated, start)
	return nil
}

// fieldValues are the old and new values of the fields a mobile step changed.
func fieldValues(res mobile.Result, fields []string) []runs.FieldChange {
	if len(fields) == 0 {
		return nil
	}
	var out []runs.FieldChange
	for _, v := range mobile.FieldValues(res.Old, res.New, fields) {
		out = append(out, runs.FieldChange{Field: v.Path, Old: v.Old, New: v.New})
	}
	return out
}

// mobileDone is a mobile step this run wrote: what a whole-release rollback puts back.
type mobileDone struct {
	step  config.MobileStep
	res   mobile.Result
	paths []string // the fields it changed ("" for the whole value)
}

// revertMobile puts back, the last first, what the run's mobile steps wrote to Flagsmith,
// each under its feature's lock like the step itself: every field still holding what the
// step wrote goes back to what it was before; a field changed since (a person's edit, another
// run's) is kept, and the event says so. A revert that fails is recorded on the step.
func (x *execution) revertMobile() {
	for i := len(x.mobileDone) - 1; i >= 0; i-- {
		d := x.mobileDone[i]
		m := d.step
		err := x.revertMobileStep(d)
		if err != nil {
			x.rec.step(runs.PhaseMobile, m.Name, func(s *runs.Step) { s.Error = joinNote(s.Error, "NOT reverted: "+err.Error()) },
				runs.Event{Type: runs.EventServiceFailed, Phase: runs.PhaseMobile, Service: m.Name, Message: "revert failed: " + err.Error()})
		}
	}
}

func (x *execution) revertMobileStep(d mobileDone) error {
	m := d.step
	client, err := x.e.flagsmithFor(m.Flagsmith)
	if err != nil {
		return err
	}
	sl := mobileLock(m, time.Time{})
	lease, err := x.leases.acquire(x.ctx, sl)
	if err != nil {
		return err
	}
	lctx, cancel := lease.Context(x.ctx)
	res, err := mobile.NewStep(client, mobile.WithStepLogger(x.log)).Run(lctx, mobile.Request{
		Environment: m.Flagsmith.Environment, Feature: m.Feature, RunID: x.run.ID, Fence: lease.Fence(),
		Revert: &mobile.Revert{Old: d.res.Old, New: d.res.New, Paths: d.paths},
	})
	err = leaseErr(lease, lctx, err)
	cancel()
	_ = x.leases.release(lease, sl)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("%s put back as it was before the run", m.Feature)
	if !res.Changed {
		msg = m.Feature + ": nothing of this run's left to put back"
	}
	if len(res.Skipped) > 0 {
		kept := make([]string, len(res.Skipped))
		for i, s := range res.Skipped {
			kept[i] = s.Path
		}
		msg += fmt.Sprintf("; kept, as changed since the run wrote them: %v", kept)
	}
	now := time.Now().UTC()
	x.rec.step(runs.PhaseMobile, m.Name, func(s *runs.Step) { s.Status, s.RestoredAt = runs.StepRestored, now },
		runs.Event{Type: runs.EventMobileReverted, Phase: runs.PhaseMobile, Service: m.Name, LockKey: lease.Key(), Fence: lease.Fence(), Message: msg})
	return nil
}
