package phases

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The deploy-window gate (package gates): asked before Phase 1 and again before Phase 2, so a
// run queued (or synced) before a deny window opened does not go on inside it. The run holds
// no lock while it waits: before Phase 1 it has taken none yet, and between the phases the
// phase-1 lock and every service lock are released.

// errOutsideWindow is the failure of a run outside its deploy windows under outside: fail.
var errOutsideWindow = errors.New("outside the deploy windows")

// windowRecheck bounds one wait for a window, so a verdict is taken again at least this
// often (a time zone's rules, a clock moved).
const windowRecheck = time.Minute

// awaitWindow returns nil once the pipeline's windows are open (at once when it has none).
// Outside them it fails with errOutsideWindow under outside: fail, or else records a
// window.closed event saying until when and waits, until a stop request ends the wait with
// its cause.
func (x *execution) awaitWindow(phase runs.Phase) error {
	w := x.p.Windows.Gates()
	if w.Empty() {
		return nil
	}
	said := time.Time{}
	for {
		v := w.Verdict(x.e.now())
		if v.Open {
			return nil
		}
		select {
		case <-x.overridden():
			return nil // window.override said by whom and why
		default:
		}
		if x.p.Windows.Outside == config.OutsideFail {
			err := fmt.Errorf("%w before %s: %s", errOutsideWindow, phase, v)
			x.rec.event(runs.Event{Type: runs.EventWindowClosed, Phase: phase, Message: err.Error()})
			return err
		}
		if !v.Until.Equal(said) || said.IsZero() {
			ev := runs.Event{Type: runs.EventWindowClosed, Phase: phase, Message: "waiting, holding no lock: " + v.String()}
			if !v.Until.IsZero() {
				ev.Data = map[string]string{runs.DataUntil: v.Until.UTC().Format(time.RFC3339)}
			}
			x.rec.event(ev)
			said = v.Until
		}
		wait := windowRecheck
		if !v.Until.IsZero() {
			wait = min(max(v.Until.Sub(x.e.now()), time.Second), windowRecheck)
		}
		if err := x.sleepUnlessStopped(wait); err != nil {
			return err
		}
	}
}

// sleepUnlessStopped waits d, or until the windows are overridden, or until a stop request
// (its cause returned).
func (x *execution) sleepUnlessStopped(d time.Duration) error {
	ctx, stop := x.untilStop(x.ctx)
	defer stop()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-x.overridden():
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// now is the engine's clock for deploy windows (Deps.Now).
func (e *Engine) now() time.Time { return e.d.Now() }

// windowOverride is a run's override of its deploy windows: who asked (in order) and
// whether it is granted; granted is closed once it is.
type windowOverride struct {
	by      []string
	granted chan struct{}
}

// OverrideWindow implements orchestrator.Engine: the override is recorded as a
// window.override event of the run; a run waiting for its window goes on at once.
func (e *Engine) OverrideWindow(ctx context.Context, id, by, reason string) (*runs.Run, bool, error) {
	if reason == "" {
		return nil, false, fmt.Errorf("override the windows of run %q: %w", id,
			&orchestrator.FieldError{Field: "reason", Reason: "is required: say why the run may go ahead outside its deploy windows"})
	}
	e.mu.Lock()
	x := e.execs[id]
	e.mu.Unlock()
	r, err := e.d.Store.Get(ctx, id)
	if err != nil {
		return nil, false, fmt.Errorf("override the windows of run %q: %w", id, err)
	}
	if r.Status.Terminal() {
		return &r, false, fmt.Errorf("override the windows of run %q: it is %s: %w", id, r.Status, runs.ErrEnded)
	}
	if x == nil {
		return &r, false, fmt.Errorf("run %q is executed by %q: %w (override it there)", id, r.Instance, orchestrator.ErrNotOwner)
	}
	granted, err := x.override(by)
	if err != nil {
		return &r, false, fmt.Errorf("override the windows of run %q: %w", id, err)
	}
	msg := "deploy windows overridden by " + by + ": " + reason
	if !granted {
		msg = "override of the deploy windows asked by " + by + ": " + reason + "; it takes effect once a second person overrides too"
	}
	x.rec.event(runs.Event{Type: runs.EventWindowOverride, Message: msg, Data: map[string]string{runs.DataBy: by, runs.DataReason: reason}})
	return &r, granted, nil
}

// override records by's override and reports whether the override is granted: at once, or,
// under override_second_person, once two different subjects asked. ErrSecondPerson when by
// already asked and a second person is needed.
func (x *execution) override(by string) (bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.windowOverrideLocked()
	select {
	case <-o.granted:
		return true, nil
	default:
	}
	if x.p.Windows != nil && x.p.Windows.OverrideSecondPerson {
		if slices.Contains(o.by, by) {
			return false, fmt.Errorf("%w: %s asked already; the pipeline's windows need another person's override", orchestrator.ErrSecondPerson, by)
		}
		o.by = append(o.by, by)
		if len(o.by) < 2 {
			return false, nil
		}
	} else {
		o.by = append(o.by, by)
	}
	close(o.granted)
	return true, nil
}

// windowOverrideLocked returns the run's override state, made on first use; x.mu is held.
func (x *execution) windowOverrideLocked() *windowOverride {
	if x.winOverride == nil {
		x.winOverride = &windowOverride{granted: make(chan struct{})}
	}
	return x.winOverride
}

// overridden returns the channel closed once the run's windows are overridden.
func (x *execution) overridden() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.windowOverrideLocked().granted
}
