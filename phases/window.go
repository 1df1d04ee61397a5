package phases

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// sleepUnlessStopped waits d, or until a stop request (its cause returned).
func (x *execution) sleepUnlessStopped(d time.Duration) error {
	ctx, stop := x.untilStop(x.ctx)
	defer stop()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// now is the engine's clock for deploy windows (Deps.Now).
func (e *Engine) now() time.Time { return e.d.Now() }
