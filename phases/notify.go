package phases

import (
	"context"
	"time"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/notify"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Notifier is told about what people want to hear of (*notify.Notifier): a run that ended,
// a lock waited on too long. Notify must return at once: delivery is not the run's business.
type Notifier interface {
	Notify(cfg *config.Notify, ev notify.Event)
	// LockWait is the wait after which a lock wait is announced (0: never).
	LockWait(cfg *config.Notify) time.Duration
}

// notifyKinds maps the run ends that are announced to their notification event; a
// superseded run is not announced (the run that superseded it will be).
var notifyKinds = map[runs.Status]config.NotifyEvent{
	runs.StatusSucceeded:   config.NotifySucceeded,
	runs.StatusFailed:      config.NotifyFailed,
	runs.StatusCanceled:    config.NotifyCanceled,
	runs.StatusInterrupted: config.NotifyInterrupted,
}

// Reporter is told of every state a run enters, for the places people look besides the
// daemon (*deploystatus.Reporter: Git host deployments). Report must return at once, and
// never fails the run.
type Reporter interface {
	Report(ctx context.Context, r runs.Run)
}

// report tells the reporter, if any, of run r as stored now.
func (e *Engine) report(ctx context.Context, r runs.Run) {
	if e.d.Reporter != nil {
		e.d.Reporter.Report(ctx, r)
	}
}

// runEnded announces run r, as stored at its end, to the notifier and the reporter.
func (e *Engine) runEnded(r runs.Run) {
	e.report(context.Background(), r)
	kind, ok := notifyKinds[r.Status]
	if !ok || e.d.Notifier == nil {
		return
	}
	ev := notify.Event{Kind: kind, Run: &r, At: r.EndedAt}
	for _, s := range r.Steps {
		if s.Status == runs.StepFailed {
			ev.Service = s.Name
			break
		}
	}
	e.d.Notifier.Notify(e.notifyConfig(r.Pipeline), ev)
}

// notifyConfig is the notify block of a pipeline (nil: the daemon's default).
func (e *Engine) notifyConfig(pipeline string) *config.Notify {
	if p := e.d.Pipelines[pipeline]; p != nil {
		return p.Notify
	}
	return nil
}

// lockWaitTimeout bounds the read of a lock's holder for a lock-wait message.
const lockWaitTimeout = 5 * time.Second

// watchLockWait announces, once, that the run has waited on key longer than the pipeline's
// threshold (with the holder and its message). The returned function stops the watch and
// waits for an announcement under way; call it when the wait ends.
func (x *execution) watchLockWait(key string, start time.Time) (stop func()) {
	n := x.e.d.Notifier
	if n == nil {
		return func() {}
	}
	after := n.LockWait(x.p.Notify)
	if after <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	timer := time.AfterFunc(after, func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), lockWaitTimeout)
		defer cancel()
		lock := &notify.Lock{Key: key, Waited: time.Since(start)}
		if info, err := x.e.d.Locker.Get(ctx, key); err == nil {
			lock.Holder, lock.Message = info.Holder, info.Message
		}
		run := x.run
		n.Notify(x.p.Notify, notify.Event{Kind: config.NotifyLockWait, Run: &run, Lock: lock})
	})
	return func() {
		if !timer.Stop() {
			<-done
		}
	}
}
