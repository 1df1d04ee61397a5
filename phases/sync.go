package phases

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// snapshot is what Phase 1 found before it wrote, for the keys and tag it wrote: enough to
// put the service back. It holds env values in memory only, for the run's lifetime.
type snapshot struct {
	ref  coolify.ResourceRef
	envs []prevEnv
	// tag is the image tag before the write; tagChanged says whether the tag was written.
	tag        string
	tagChanged bool
}

// prevEnv is one variable before Phase 1 wrote it.
type prevEnv struct {
	key     string
	existed bool
	prev    coolify.EnvVar // when existed
}

// ErrVerify: a value read back after a write differs from what was written.
var ErrVerify = errors.New("read-back differs from what was written")

func refOf(s config.Service) coolify.ResourceRef {
	if s.Kind == config.KindService {
		return coolify.ServiceRef(s.UUID)
	}
	return coolify.AppRef(s.UUID)
}

// desiredEnvs resolves the service's env vars (secrets included) into what Coolify should
// hold. Values live only in the returned slice.
func (x *execution) desiredEnvs(ctx context.Context, s config.Service) ([]coolify.EnvVar, error) {
	var refs []secrets.Ref
	for _, e := range s.Env {
		if e.Secret != nil {
			refs = append(refs, secrets.Ref{Source: e.Secret.Source, Key: e.Secret.Key})
		}
	}
	var vals secrets.Resolved
	if len(refs) > 0 {
		var err error
		if vals, err = x.resolver.Resolve(ctx, refs...); err != nil {
			return nil, fmt.Errorf("secrets of %s: %w", s.Name, err)
		}
	}
	out := make([]coolify.EnvVar, 0, len(s.Env))
	for _, e := range s.Env {
		v := e.Value.Reveal()
		if e.Secret != nil {
			v, _ = vals.Get(secrets.Ref{Source: e.Secret.Source, Key: e.Secret.Key})
		}
		ev := coolify.EnvVar{Key: e.Key, Value: v, IsLiteral: e.IsLiteral, IsMultiline: e.IsMultiline,
			IsShownOnce: e.IsShownOnce, Comment: e.Comment}
		if s.Kind != config.KindService {
			ev.IsBuildtime, ev.IsRuntime = e.IsBuildtime, e.IsRuntime
		}
		out = append(out, ev)
	}
	return out, nil
}

// envDiff compares desired variables with the current ones: the variables to write, and for
// each the state before. A variable whose value the token can't read is always written (its
// value can't be compared).
func envDiff(kind config.ServiceKind, current, desired []coolify.EnvVar) (writes []coolify.EnvVar, prev []prevEnv) {
	for _, d := range desired {
		i := slices.IndexFunc(current, func(c coolify.EnvVar) bool { return c.Key == d.Key && !c.IsPreview })
		if i < 0 {
			writes = append(writes, d)
			prev = append(prev, prevEnv{key: d.Key})
			continue
		}
		c := current[i]
		if kind == config.KindService { // services take no preview/build/runtime flags
			c.IsBuildtime, c.IsRuntime = false, false
		}
		if c.SameAs(d) {
			continue
		}
		writes = append(writes, d)
		prev = append(prev, prevEnv{key: d.Key, existed: true, prev: current[i]})
	}
	return writes, prev
}

// syncService is Phase 1 for one service: under coolify:<uuid>, snapshot, write what
// differs, verify by reading back, and record the mark.
func (x *execution) syncService(pctx context.Context, st *svcState) error {
	s := st.svc
	start := time.Now()
	lease, err := x.acquire(pctx, s.LockKey(), runs.Phase1, s.Name, false, &stepLock{runs.Phase1, s.Name, start})
	if err != nil {
		x.failStep(runs.Phase1, s.Name, err)
		return err
	}
	st.fence = lease.Fence()
	sctx, cancel := lease.Context(pctx)
	sctx = coolify.WithTrace(sctx, x.run.ID, lease.Fence())
	changes, err := x.sync(sctx, st)
	if err == nil {
		_, err = x.e.d.Marks.PutMark(sctx, runs.Mark{UUID: s.UUID, RunID: x.run.ID, Fence: lease.Fence(), Phase: runs.Phase1, At: time.Now().UTC()})
		if err != nil {
			err = fmt.Errorf("record sync mark of %s: %w", s.Name, err)
		}
	}
	err = leaseErr(lease, sctx, err)
	cancel()
	if rerr := x.release(lease, runs.Phase1, s.Name, false); err == nil && errors.Is(rerr, locks.ErrLost) {
		err = rerr // the writes may have raced with another holder
	}
	if err != nil {
		x.failStep(runs.Phase1, s.Name, err)
		x.stepDone(runs.Phase1, runs.StepFailed, start)
		return fmt.Errorf("sync %s: %w", s.Name, err)
	}
	st.synced = true
	evType, msg := runs.EventServiceSynced, describeChanges(changes)
	if changes.Empty() {
		evType = runs.EventServiceUnchanged
	}
	x.setStep(runs.Phase1, s.Name, func(step *runs.Step) {
		step.Status, step.EndedAt, step.Changes = runs.StepSynced, time.Now().UTC(), changes
	}, runs.Event{Type: evType, Phase: runs.Phase1, Service: s.Name, LockKey: lease.Key(), Fence: lease.Fence(), Message: msg,
		Data: map[string]string{"synced_by": x.run.ID}})
	x.stepDone(runs.Phase1, runs.StepSynced, start)
	return nil
}

// sync does the reads and writes of Phase 1 for one service. It fills st.snap before the
// first write, so a failure part way can be compensated.
func (x *execution) sync(ctx context.Context, st *svcState) (runs.Changes, error) {
	s := st.svc
	ref := refOf(s)
	var changes runs.Changes
	desired, err := x.desiredEnvs(ctx, s)
	if err != nil {
		return changes, err
	}
	current, err := x.cl.ListEnvs(ctx, ref)
	if err != nil {
		return changes, err
	}
	writes, prev := envDiff(s.Kind, current, desired)

	var oldTag string
	tagChange := false
	if s.Kind != config.KindService && s.ImageTag != "" {
		app, err := x.cl.GetApplication(ctx, s.UUID)
		if err != nil {
			return changes, err
		}
		oldTag = app.ImageTag
		tagChange = app.ImageTag != s.ImageTag
	}
	if len(writes) == 0 && !tagChange {
		return changes, nil
	}
	for _, p := range prev {
		// Coolify never shows an is_shown_once value, to any token: such a variable is
		// written every run and cannot be restored (restore says so). Any other hidden value
		// means the token lacks read:sensitive, and overwriting what could not be put back
		// is refused.
		if p.existed && p.prev.ValueHidden() && !p.prev.IsShownOnce {
			return changes, fmt.Errorf("env %s of %s: the current value is hidden from this token, so it could not be restored on failure; give the token read:sensitive", p.key, s.Name)
		}
	}
	// No write while a deployment this run did not start is in progress.
	if err := x.clearDeployments(ctx, s, runs.Phase1, false); err != nil {
		return changes, err
	}
	st.snap = &snapshot{ref: ref, envs: prev, tag: oldTag, tagChanged: tagChange}

	if len(writes) > 0 {
		if err := x.cl.UpsertEnvs(ctx, ref, writes); err != nil {
			return changes, err
		}
		for _, w := range writes {
			changes.EnvKeys = append(changes.EnvKeys, w.Key)
		}
		slices.Sort(changes.EnvKeys)
	}
	if tagChange {
		if err := x.cl.SetImageTag(ctx, s.UUID, s.ImageTag); err != nil {
			return changes, err
		}
		changes.ImageTag = &runs.TagChange{Old: oldTag, New: s.ImageTag}
	}
	return changes, x.verify(ctx, st, writes)
}

// verify reads the service back and checks that it carries what was written.
func (x *execution) verify(ctx context.Context, st *svcState, writes []coolify.EnvVar) error {
	s := st.svc
	if len(writes) > 0 {
		current, err := x.cl.ListEnvs(ctx, refOf(s))
		if err != nil {
			return fmt.Errorf("read back: %w", err)
		}
		if again, _ := envDiff(s.Kind, current, writes); len(again) > 0 {
			var keys []string
			for _, a := range again {
				if !hiddenIn(current, a.Key) {
					keys = append(keys, a.Key)
				}
			}
			if len(keys) > 0 {
				return fmt.Errorf("%w: env %v of %s", ErrVerify, keys, s.Name)
			}
		}
	}
	if st.snap != nil && st.snap.tagChanged {
		app, err := x.cl.GetApplication(ctx, s.UUID)
		if err != nil {
			return fmt.Errorf("read back: %w", err)
		}
		if app.ImageTag != s.ImageTag {
			return fmt.Errorf("%w: image tag of %s is %q, want %q", ErrVerify, s.Name, app.ImageTag, s.ImageTag)
		}
	}
	return nil
}

// hiddenIn reports whether the current variable key has a value the token can't read (then
// only its flags could be compared, and a value difference is not a verify failure).
func hiddenIn(current []coolify.EnvVar, key string) bool {
	for _, c := range current {
		if c.Key == key && !c.IsPreview {
			return c.ValueHidden()
		}
	}
	return false
}

func (x *execution) failStep(phase runs.Phase, name string, err error) {
	x.setStep(phase, name, func(step *runs.Step) {
		step.Status, step.EndedAt, step.Error = runs.StepFailed, time.Now().UTC(), err.Error()
	}, runs.Event{Type: runs.EventServiceFailed, Phase: phase, Service: name, Message: err.Error()})
}

func describeChanges(c runs.Changes) string {
	if c.Empty() {
		return "already up to date"
	}
	msg := ""
	if len(c.EnvKeys) > 0 {
		msg = fmt.Sprintf("env %v", c.EnvKeys)
	}
	if c.ImageTag != nil {
		if msg != "" {
			msg += ", "
		}
		msg += fmt.Sprintf("image tag %q → %q", c.ImageTag.Old, c.ImageTag.New)
	}
	return msg
}
