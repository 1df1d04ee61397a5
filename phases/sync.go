package phases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
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
	// tag is the image tag before the write; tagChanged says whether the tag was to be written.
	tag        string
	tagChanged bool
	// envsWritten and tagWritten say whether the env write and the tag write may have reached
	// Coolify: set before each call, cleared when its error proves it was not applied
	// (coolify.NotApplied). Restore puts back only what may have been written.
	envsWritten, tagWritten bool
	// envChanges and tagChange are the changes the env write and the tag write make.
	envChanges []orchestrator.EnvChange
	tagChange  *orchestrator.TagChange
}

// mayHaveWritten is what may have reached Coolify, by name: recorded on a step that failed
// part way, so that a takeover after the daemon's death says the service may carry it.
func (s *snapshot) mayHaveWritten() runs.Changes {
	var c runs.Changes
	if s == nil {
		return c
	}
	if s.envsWritten {
		c.Env = s.envChanges
	}
	if s.tagWritten {
		c.ImageTag = s.tagChange
	}
	return c
}

// written reports whether anything may have been written.
func (s *snapshot) written() bool { return s.envsWritten || s.tagWritten }

// prevEnv is one variable before Phase 1 wrote it.
type prevEnv struct {
	key     string
	existed bool
	prev    coolify.EnvVar // when existed
	// previewExisted: an application's preview row of the key was there before (so a restore
	// that deletes a created variable leaves it alone; otherwise Coolify created it as the
	// variable's twin).
	previewExisted bool
}

// ErrVerify: a value read back after a write differs from what was written.
var ErrVerify = errors.New("read-back differs from what was written")

func refOf(s config.Service) coolify.ResourceRef {
	if s.Kind == config.KindService {
		return coolify.ServiceRef(s.UUID)
	}
	return coolify.AppRef(s.UUID)
}

// wantEnv is one env entry of the pipeline with its value resolved: the value, and the flags
// and comment the entry mentions (nil: keep the current one, or Coolify's default for a new
// variable). The value is in the form Coolify stores it (coolify.Stored: trimmed), so that it
// compares with what is read back; it lives only here, for the run's lifetime.
type wantEnv struct {
	key   string
	value string
	entry config.EnvVar // for the flags and comment
}

// desiredEnvs resolves the service's env entries (secrets included).
func (x *execution) desiredEnvs(ctx context.Context, s config.Service) ([]wantEnv, error) {
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
	out := make([]wantEnv, 0, len(s.Env))
	for _, e := range s.Env {
		v := e.Value.Reveal()
		if e.Secret != nil {
			v, _ = vals.Get(secrets.Ref{Source: e.Secret.Source, Key: e.Secret.Key})
		}
		out = append(out, wantEnv{key: e.Key, value: coolify.Stored(v), entry: e})
	}
	return out, nil
}

// envFlag is one boolean flag of an env var: its name, where the pipeline entry says it, and
// where an EnvVar holds it.
type envFlag struct {
	name    string
	entry   func(config.EnvVar) *bool
	current func(*coolify.EnvVar) *bool
	appOnly bool // services take no build/runtime flags
}

var envFlags = []envFlag{
	{"is_buildtime", func(e config.EnvVar) *bool { return e.IsBuildtime }, func(v *coolify.EnvVar) *bool { return &v.IsBuildtime }, true},
	{"is_runtime", func(e config.EnvVar) *bool { return e.IsRuntime }, func(v *coolify.EnvVar) *bool { return &v.IsRuntime }, true},
	{"is_literal", func(e config.EnvVar) *bool { return e.IsLiteral }, func(v *coolify.EnvVar) *bool { return &v.IsLiteral }, false},
	{"is_multiline", func(e config.EnvVar) *bool { return e.IsMultiline }, func(v *coolify.EnvVar) *bool { return &v.IsMultiline }, false},
	{"is_shown_once", func(e config.EnvVar) *bool { return e.IsShownOnce }, func(v *coolify.EnvVar) *bool { return &v.IsShownOnce }, false},
}

// envDiff compares the wanted variables with the current ones. For each variable that needs a
// write it returns what to write (the current variable with the value and the flags and comment
// the entry mentions; for a new one Coolify's defaults instead of the current state), the state
// before, and the change by name. A variable whose current value the token can't read is always
// written (its value can't be compared).
func envDiff(kind config.ServiceKind, current []coolify.EnvVar, desired []wantEnv) (writes []coolify.EnvVar, prev []prevEnv, changes []orchestrator.EnvChange) {
	for _, d := range desired {
		i := slices.IndexFunc(current, func(c coolify.EnvVar) bool { return c.Key == d.key && !c.IsPreview })
		var base coolify.EnvVar
		ch := orchestrator.EnvChange{Key: d.key, Action: orchestrator.EnvUpdate}
		if i < 0 {
			base = coolify.NewEnvVar(d.key, "")
			ch.Action = orchestrator.EnvCreate
		} else {
			base = current[i]
			ch.ValueUnknown = base.ValueHidden()
			ch.ValueChanged = !base.ValueHidden() && base.Value != d.value
		}
		w := base.WithValue(d.value)
		w.UUID, w.IsShared = "", false
		for _, f := range envFlags {
			if f.appOnly && kind == config.KindService {
				continue
			}
			want := f.entry(d.entry)
			if want == nil {
				continue
			}
			if cur := f.current(&w); *cur != *want {
				ch.Flags = append(ch.Flags, orchestrator.FlagChange{Name: f.name, Old: *cur, New: *want})
				*cur = *want
			}
		}
		if c := d.entry.Comment; c != nil {
			if want := coolify.Stored(*c); want != w.Comment {
				ch.Comment = &orchestrator.CommentChange{Old: w.Comment, New: want}
				w.Comment = want
			}
		}
		if ch.Action == orchestrator.EnvUpdate && !ch.ValueChanged && !ch.ValueUnknown && len(ch.Flags) == 0 && ch.Comment == nil {
			continue
		}
		writes = append(writes, w)
		changes = append(changes, ch)
		if i < 0 {
			prev = append(prev, prevEnv{key: d.key})
		} else {
			prev = append(prev, prevEnv{key: d.key, existed: true, prev: current[i]})
		}
	}
	return writes, prev, changes
}

// syncService is Phase 1 for one service: under coolify:<uuid>, snapshot, write what
// differs, verify by reading back, and record the mark.
func (x *execution) syncService(pctx context.Context, st *svcState) error {
	s := st.svc
	start := time.Now()
	wctx, stopWait := x.untilStop(pctx)
	// The grant is stored while the mark and the snapshot are read (sync waits for it before
	// its first write).
	sl := serviceLock(runs.Phase1, s, start)
	lease, recorded, err := x.leases.acquireReading(wctx, sl)
	stopWait()
	if err != nil {
		x.rec.fail(runs.Phase1, s.Name, err)
		return err
	}
	st.fence = lease.Fence()
	sctx, cancel := lease.Context(pctx)
	sctx = coolify.WithTrace(sctx, x.run.ID, lease.Fence())
	// The stale-build guard, under the lock: no write over a newer build of this pipeline.
	// The service's mark, whichever pipeline wrote it, and what it runs are what a restore
	// puts back and a rollback replaces: read beside the guard's.
	var stale string
	readOwn := func() (err error) { stale, st.beforeOwn, err = x.staleOn(sctx, s.UUID); return err }
	readMark := func() (err error) {
		if st.before, err = x.serviceMark(sctx, s.UUID); err != nil {
			return err
		}
		st.beforeRunning, err = x.running(sctx, s.UUID)
		return err
	}
	err = cmp.Or(readAtOnce(readOwn, readMark))
	var changes runs.Changes
	if err == nil && stale == "" {
		changes, err = x.sync(sctx, st, recorded)
		if err == nil {
			recorded() // the grant is in the run before the mark names this build
			_, err = x.e.d.Marks.PutMark(sctx, x.mark(s.UUID, lease.Fence(), runs.Phase1))
			if err != nil {
				err = fmt.Errorf("record sync mark of %s: %w", s.Name, err)
			}
		}
	}
	recorded()
	err = leaseErr(lease, sctx, err)
	cancel()
	if rerr := x.leases.release(lease, sl); err == nil && errors.Is(rerr, locks.ErrLost) {
		err = rerr // the writes may have raced with another holder
	}
	if err != nil {
		// What may have been written is recorded with the failure, before the restore: a
		// daemon that dies before the restore has ended leaves a takeover to say so.
		may := st.snap.mayHaveWritten()
		x.rec.step(runs.Phase1, s.Name, func(step *runs.Step) {
			step.Status, step.EndedAt, step.Error, step.Changes = runs.StepFailed, time.Now().UTC(), err.Error(), may
		}, runs.Event{Type: runs.EventServiceFailed, Phase: runs.Phase1, Service: s.Name, Message: err.Error()})
		x.stepDone(runs.Phase1, runs.StepFailed, start)
		return fmt.Errorf("sync %s: %w", s.Name, err)
	}
	if stale != "" {
		x.markStale(st, lease.Key(), lease.Fence(), stale)
		x.stepDone(runs.Phase1, runs.StepStale, start)
		return nil
	}
	if x.run.Trigger.Rollback {
		x.recordRollback(pctx, s, st.before)
	}
	st.synced = true
	evType, msg := runs.EventServiceSynced, describeChanges(changes)
	if changes.Empty() {
		evType = runs.EventServiceUnchanged
	}
	x.rec.step(runs.Phase1, s.Name, func(step *runs.Step) {
		step.Status, step.EndedAt, step.Changes = runs.StepSynced, time.Now().UTC(), changes
	}, runs.Event{Type: evType, Phase: runs.Phase1, Service: s.Name, LockKey: lease.Key(), Fence: lease.Fence(), Message: msg,
		Data: map[string]string{"synced_by": x.run.ID}})
	x.stepDone(runs.Phase1, runs.StepSynced, start)
	return nil
}

// sync does the reads and writes of Phase 1 for one service. It fills st.snap before the
// first write, so a failure part way can be compensated, and calls recorded (which waits for
// the lock's grant to be stored) before the first call that may change anything.
func (x *execution) sync(ctx context.Context, st *svcState, recorded func()) (runs.Changes, error) {
	s := st.svc
	ref := refOf(s)
	var changes runs.Changes
	desired, err := x.desiredEnvs(ctx, s)
	if err != nil {
		return changes, err
	}
	// The snapshot: the env rows and, for an application with a tag to set, its current tag,
	// read at once.
	var all []coolify.EnvVar
	var app *coolify.Application
	readEnvs := func() (err error) { all, err = x.cl.ListAllEnvs(ctx, ref); return err }
	readApp := func() (err error) { app, err = x.cl.GetApplication(ctx, s.UUID); return err }
	envsErr, appErr := readAtOnce(readEnvs, readIf(s.Kind != config.KindService && s.ImageTag != "", readApp))
	if err := cmp.Or(envsErr, appErr); err != nil {
		return changes, err
	}
	current := slices.DeleteFunc(slices.Clone(all), func(e coolify.EnvVar) bool { return e.IsPreview })
	writes, prev, envChanges := envDiff(s.Kind, current, desired)
	for i := range prev {
		prev[i].previewExisted = slices.ContainsFunc(all, func(e coolify.EnvVar) bool { return e.IsPreview && e.Key == prev[i].key })
	}

	var oldTag string
	tagChange := false
	if app != nil {
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
	recorded()
	// No write while a deployment this run did not start is in progress.
	if err := x.clearDeployments(ctx, s, runs.Phase1, false); err != nil {
		return changes, err
	}
	st.snap = &snapshot{ref: ref, envs: prev, tag: oldTag, tagChanged: tagChange, envChanges: envChanges}
	slices.SortFunc(st.snap.envChanges, func(a, b orchestrator.EnvChange) int { return strings.Compare(a.Key, b.Key) })
	if tagChange {
		st.snap.tagChange = &orchestrator.TagChange{Old: oldTag, New: s.ImageTag}
	}

	if len(writes) > 0 {
		st.snap.envsWritten = true
		if err := x.cl.UpsertEnvs(ctx, ref, writes); err != nil {
			st.snap.envsWritten = !coolify.NotApplied(err)
			return changes, err
		}
		changes.Env = st.snap.envChanges
	}
	if tagChange {
		st.snap.tagWritten = true
		if err := x.cl.SetImageTag(ctx, s.UUID, s.ImageTag); err != nil {
			st.snap.tagWritten = !coolify.NotApplied(err)
			return changes, err
		}
		changes.ImageTag = st.snap.tagChange
	}
	return changes, x.verify(ctx, st, writes)
}

// verify reads the service back and checks that it carries what was written. A variable whose
// value the token can't read is checked on its flags and comment only.
func (x *execution) verify(ctx context.Context, st *svcState, writes []coolify.EnvVar) error {
	s := st.svc
	// Both read back at once when both were written.
	var current []coolify.EnvVar
	var app *coolify.Application
	readEnvs := func() (err error) { current, err = x.cl.ListEnvs(ctx, refOf(s)); return err }
	readApp := func() (err error) { app, err = x.cl.GetApplication(ctx, s.UUID); return err }
	tagWritten := st.snap != nil && st.snap.tagChanged
	envsErr, appErr := readAtOnce(readIf(len(writes) > 0, readEnvs), readIf(tagWritten, readApp))
	if len(writes) > 0 {
		if envsErr != nil {
			return fmt.Errorf("read back: %w", envsErr)
		}
		var keys []string
		for _, w := range writes {
			i := slices.IndexFunc(current, func(c coolify.EnvVar) bool { return c.Key == w.Key && !c.IsPreview })
			if i < 0 {
				keys = append(keys, w.Key)
				continue
			}
			c := current[i]
			if c.ValueHidden() {
				c = c.WithValue(w.Value)
			}
			if s.Kind == config.KindService { // services take no build/runtime flags
				c.IsBuildtime, c.IsRuntime = w.IsBuildtime, w.IsRuntime
			}
			if !c.SameAs(w) {
				keys = append(keys, w.Key)
			}
		}
		if len(keys) > 0 {
			return fmt.Errorf("%w: env %v of %s", ErrVerify, keys, s.Name)
		}
	}
	if tagWritten {
		if appErr != nil {
			return fmt.Errorf("read back: %w", appErr)
		}
		if app.ImageTag != s.ImageTag {
			return fmt.Errorf("%w: image tag of %s is %q, want %q", ErrVerify, s.Name, app.ImageTag, s.ImageTag)
		}
	}
	return nil
}

func describeChanges(c runs.Changes) string {
	if c.Empty() {
		return "already up to date"
	}
	return c.String()
}
