package mobile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
)

// DefaultMaxAttempts bounds how often the step starts over when the value moves between
// its read and its write.
const DefaultMaxAttempts = 5

// Errors of the step, besides the client's and the locks package's.
var (
	// ErrConflict: the value changed between the read and the write on every attempt.
	ErrConflict = errors.New("flagsmith value kept changing under the step")
	// ErrVerify: the value read back after the write is not the value written.
	ErrVerify = errors.New("flagsmith value read back differs from the value written")
	// ErrChangeRequests: the environment requires change requests (approvals); the step
	// does not bypass them.
	ErrChangeRequests = errors.New("flagsmith environment requires change requests")
	// ErrInvalid: a malformed request (no environment, feature, holder or change).
	ErrInvalid = errors.New("invalid mobile step request")
	// ErrOutsideChangeLost (v2 environments): the step's version replaced the value of an
	// outside version, published between the step's last read and its write, and the step
	// could not write its changes again on top of it (no attempt left, the outside version
	// could not be read, or the feature moved again). The step's value was written; the
	// outside value is in the feature's version history, and the error names the versions.
	ErrOutsideChangeLost = errors.New("flagsmith step replaced an outside change and could not restore it")
	// ErrOutsideChangeUnknown (v2 environments): the step's value was written, but reading its
	// version back to learn which version it replaced failed (or, after it replaced an
	// outside version, writing again on top of that one had an unknown outcome), so whether
	// an outside change was lost is unknown. The error names the versions; the feature's
	// version history tells.
	ErrOutsideChangeUnknown = errors.New("flagsmith step wrote its value but could not learn whether it replaced an outside change")
)

// Step is the mobile read-modify-write of a Flagsmith feature value. It takes no lock: the
// caller (the engine) holds the lease "mobile:flagsmith:<feature>" (LockKey) and runs the step
// under the lease's context and fence, so a lost lease stops the Flagsmith calls and every
// call carries the fence. It is safe for concurrent use.
type Step struct {
	client      *Client
	logger      *slog.Logger
	maxAttempts int
}

// StepOption configures a Step.
type StepOption func(*Step)

// WithStepLogger sets the step's logger (default: discard).
func WithStepLogger(l *slog.Logger) StepOption { return func(s *Step) { s.logger = l } }

// WithMaxAttempts bounds the read-compare-write attempts (default DefaultMaxAttempts).
func WithMaxAttempts(n int) StepOption { return func(s *Step) { s.maxAttempts = max(1, n) } }

// NewStep returns a step writing through c.
func NewStep(c *Client, opts ...StepOption) *Step {
	s := &Step{
		client:      c,
		logger:      slog.New(slog.DiscardHandler),
		maxAttempts: DefaultMaxAttempts,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Request is one mobile update.
type Request struct {
	// Environment is the environment's API key (the client-side key in Admin API paths).
	Environment string
	// Feature is the exact feature name, e.g. "version_state".
	Feature string
	// Changes are applied in order to the value read.
	Changes []Change
	// Revert, when set instead of Changes, puts back what an earlier step wrote: see Revert.
	Revert *Revert
	// RunID goes into the X-Orchestrator-Run header of every Flagsmith call.
	RunID string
	// Fence is the fence of the caller's lease on orchestrator.MobileLockKey(Feature); it goes into the
	// X-Orchestrator-Fence header of every Flagsmith call.
	Fence int64
}

// Result says what the step did.
type Result struct {
	Environment string `json:"environment"`
	// EnvironmentName is the environment's name in Flagsmith (the key is the client-side
	// key the request named).
	EnvironmentName string `json:"environment_name,omitempty"`
	Feature         string `json:"feature"`
	LockKey         string `json:"lock_key"`
	Fence           int64  `json:"fence"`
	// Old is the value the applied change started from; New the value written (equal to
	// Old when nothing changed).
	Old Value `json:"old"`
	New Value `json:"new"`
	// Changed is false when the changes were already in place: nothing was written.
	Changed bool `json:"changed"`
	// Attempts counts read-compare-write rounds: more than 1 when the value moved before the
	// write, or when (v2) the write replaced an outside version and was made again on top
	// of it.
	Attempts int `json:"attempts"`
	// Skipped lists changes the never-downgrade rule left out.
	Skipped []Skipped `json:"skipped,omitempty"`
	// V2 tells which write path was used; Version is the published version's uuid (v2).
	V2      bool   `json:"v2"`
	Version string `json:"version,omitempty"`
}

// Run reads the feature value, applies the changes, re-reads just before writing (starting
// over, at most the step's max attempts, when the value moved), writes, reads back and
// verifies. The caller holds the lease on orchestrator.MobileLockKey(r.Feature) and passes its context (so a
// lost lease stops the calls) and its fence.
//
// Flagsmith has no compare-and-set, so another writer's change can still land between the
// last re-read and the write. On a v2 environment the step learns it after the fact: its
// version's previous_version_uuid is not the version it read. It then reads that outside
// version's value, applies the changes to it and publishes again (one more attempt), so both
// changes survive. On a v1 environment nothing tells: the PUT replaces such a change.
//
// Errors: ErrInvalid; ErrChangeRequests; ErrNotFound for a missing environment or feature;
// ErrChange when a change does not apply; ErrConflict; ErrVerify; ErrOutsideChangeLost and
// ErrOutsideChangeUnknown (v2, after the step's value was written); ctx's cause (e.g.
// locks.ErrLost) when the context ends; and the client's *APIError and transport errors.
func (s *Step) Run(ctx context.Context, r Request) (Result, error) {
	key := orchestrator.MobileLockKey(r.Feature)
	res := Result{Environment: r.Environment, Feature: r.Feature, LockKey: key, Fence: r.Fence}
	if r.Environment == "" || r.Feature == "" || (len(r.Changes) == 0) == (r.Revert == nil) {
		return res, fmt.Errorf("mobile step %q: %w: environment, feature and at least one change (or a revert, not both) are required", key, ErrInvalid)
	}
	runID := r.RunID
	if runID == "" {
		runID, _, _ = trace.From(ctx)
	}
	err := s.rmw(trace.With(ctx, runID, r.Fence), r, &res)
	if cause := context.Cause(ctx); err != nil && cause != nil && ctx.Err() != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w (while: %w)", cause, err)
	}
	if err != nil {
		return res, err
	}
	s.logger.LogAttrs(ctx, slog.LevelInfo, "mobile step done",
		slog.String(logkey.LockKey, key), slog.Int64(logkey.Fence, res.Fence),
		slog.Bool(logkey.Changed, res.Changed), slog.Int(logkey.Attempt, res.Attempts))
	return res, nil
}

// Preview is Run without the write: it reads the environment (its key must be valid and it
// must take writes without change requests), the feature and its value, and works out what Run
// would write from it (Result.Old, New, Changed and Skipped; Attempts 0). A change that does
// not fit the value (its type, a path through a non-object, a version that does not parse)
// is the error Run would fail with. Nothing is written; no lock is needed.
func (s *Step) Preview(ctx context.Context, r Request) (Result, error) {
	key := orchestrator.MobileLockKey(r.Feature)
	res := Result{Environment: r.Environment, Feature: r.Feature, LockKey: key}
	if r.Environment == "" || r.Feature == "" || (len(r.Changes) == 0) == (r.Revert == nil) {
		return res, fmt.Errorf("mobile step %q: %w: environment, feature and at least one change (or a revert, not both) are required", key, ErrInvalid)
	}
	env, err := s.environment(ctx, r.Environment)
	if err != nil {
		return res, err
	}
	res.V2, res.EnvironmentName = env.V2Versioning, env.Name
	feat, err := s.client.Feature(ctx, env.Project, r.Feature)
	if err != nil {
		return res, fmt.Errorf("mobile step: %w", err)
	}
	snap, err := s.read(ctx, env, feat)
	if err != nil {
		return res, fmt.Errorf("mobile step: read %q: %w", r.Feature, err)
	}
	next, skipped, changed, err := r.next(snap.state.Value)
	if err != nil {
		return res, fmt.Errorf("mobile step %q: %w", r.Feature, err)
	}
	res.Old, res.New, res.Changed, res.Skipped = snap.state.Value, next, changed, skipped
	return res, nil
}

// snapshot is what one read sees: the state and, on v2, the live version.
type snapshot struct {
	state FeatureState
	live  string
}

// same reports whether nothing moved between two reads: on v1 the state, its value and
// updated_at; on v2 the live version and the value.
func (a snapshot) same(b snapshot) bool {
	return a.state.ID == b.state.ID && a.state.Value == b.state.Value &&
		a.state.UpdatedAt.Equal(b.state.UpdatedAt) && a.live == b.live
}

func (s *Step) read(ctx context.Context, env Environment, feat Feature) (snapshot, error) {
	st, err := s.client.FeatureState(ctx, env.APIKey, feat.ID)
	if err != nil {
		return snapshot{}, err
	}
	snap := snapshot{state: st}
	if env.V2Versioning {
		v, err := s.client.LiveVersion(ctx, env.ID, feat.ID)
		if err != nil {
			return snapshot{}, err
		}
		snap.live = v.UUID
	}
	return snap, nil
}

func (s *Step) rmw(ctx context.Context, r Request, res *Result) error {
	env, err := s.environment(ctx, r.Environment)
	if err != nil {
		return err
	}
	res.V2, res.EnvironmentName = env.V2Versioning, env.Name
	feat, err := s.client.Feature(ctx, env.Project, r.Feature)
	if err != nil {
		return fmt.Errorf("mobile step: %w", err)
	}
	snap, err := s.read(ctx, env, feat)
	if err != nil {
		return fmt.Errorf("mobile step: read %q: %w", r.Feature, err)
	}
	for attempt := 1; attempt <= s.maxAttempts; attempt++ {
		res.Attempts = attempt
		next, skipped, changed, err := r.next(snap.state.Value)
		if err != nil {
			return fmt.Errorf("mobile step %q: %w", r.Feature, err)
		}
		res.Old, res.New, res.Skipped = snap.state.Value, next, skipped
		if !changed {
			return nil
		}
		again, err := s.read(ctx, env, feat)
		if err != nil {
			return fmt.Errorf("mobile step: re-read %q: %w", r.Feature, err)
		}
		if !snap.same(again) {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "flagsmith value moved before write; starting over",
				slog.String(logkey.Feature, r.Feature), slog.String(logkey.Environment, env.Name),
				slog.Int(logkey.Attempt, attempt))
			snap = again
			continue
		}
		if env.V2Versioning {
			return s.publish(ctx, env, feat, r, res, snap, next, attempt)
		}
		_, err = s.client.UpdateFeatureState(ctx, env.APIKey, snap.state.ID, feat.ID, next, snap.state.Enabled)
		if errors.Is(err, ErrLegacyWrite) {
			// Versioning v2 was switched on (asynchronously) since the environment was
			// read: nothing was written; read it all again and write the v2 way.
			s.logger.LogAttrs(ctx, slog.LevelWarn, "flagsmith environment switched to v2 versioning; starting over",
				slog.String(logkey.Feature, r.Feature), slog.String(logkey.Environment, env.Name))
			if env, err = s.environment(ctx, r.Environment); err != nil {
				return err
			}
			if !env.V2Versioning {
				return fmt.Errorf("mobile step: write %q: the environment refuses legacy writes but does not say it uses v2 versioning: %w", r.Feature, ErrLegacyWrite)
			}
			res.V2 = true
			if snap, err = s.read(ctx, env, feat); err != nil {
				return fmt.Errorf("mobile step: read %q: %w", r.Feature, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("mobile step: write %q: %w", r.Feature, err)
		}
		// A v1 write that landed right after another writer's, after the re-read, replaced
		// it: Flagsmith keeps no trace of it, so nothing here can tell.
		res.Changed = true
		return s.verify(ctx, env, feat, r.Feature, res, next)
	}
	return fmt.Errorf("mobile step %q: %d attempts: %w", r.Feature, s.maxAttempts, ErrConflict)
}

// verify reads the feature back after a write: the value must be next and, on v2, the live
// version the one published.
func (s *Step) verify(ctx context.Context, env Environment, feat Feature, feature string, res *Result, next Value) error {
	back, err := s.read(ctx, env, feat)
	if err != nil {
		return fmt.Errorf("mobile step: read back %q: %w", feature, err)
	}
	if back.state.Value != next {
		return fmt.Errorf("mobile step %q: read back a %s of %d bytes, wrote a %s of %d bytes: %w",
			feature, back.state.Value.Kind, len(back.state.Value.String()), next.Kind, len(next.String()), ErrVerify)
	}
	if env.V2Versioning && back.live != res.Version {
		return fmt.Errorf("mobile step %q: live version is %s, published %s: %w", feature, back.live, res.Version, ErrVerify)
	}
	return nil
}

// replaced returns the uuid of the version that version uuid replaced when it went live
// (previous_version_uuid). The version is written: on failure the error says so and
// matches ErrOutsideChangeUnknown.
func (s *Step) replaced(ctx context.Context, feature, uuid string) (string, error) {
	d, err := s.client.VersionDetail(ctx, uuid)
	if err == nil && d.Previous == "" {
		err = errors.New("flagsmith names no version before it")
	}
	if err != nil {
		return "", fmt.Errorf("mobile step %q: %w: version %s is published, but reading it back to learn which version it replaced failed: %w",
			feature, ErrOutsideChangeUnknown, uuid, err)
	}
	return d.Previous, nil
}

// publish writes next on a v2 environment as a version on top of snap's live version, then
// checks from the new version's previous_version_uuid that it replaced that version.
//
// When it replaced another one, an outside version was published between the last re-read
// and the POST: the server cloned it and replaced its environment default (value and
// enabled flag) with next, computed from an older value. publish then reads the outside
// version's default, applies the changes to it and, as the next attempt, publishes that on
// top of its own version, so both changes survive; the outside version was published after
// snap's, so it holds every change before it. It does so once: a version published on top of
// the step's own was built on a value that lacks the outside change, and the step cannot
// tell that version's own change apart to carry both, so that case fails with
// ErrOutsideChangeLost (the step's value stays written), as does running out of attempts.
func (s *Step) publish(ctx context.Context, env Environment, feat Feature, r Request, res *Result, snap snapshot, next Value, attempt int) error {
	v, err := s.client.PublishVersion(ctx, env.ID, feat.ID, next, snap.state.Enabled)
	if err != nil {
		return fmt.Errorf("mobile step: write %q: %w", r.Feature, err)
	}
	res.Changed, res.Version = true, v.UUID
	outside, err := s.replaced(ctx, r.Feature, v.UUID)
	if err != nil {
		return err
	}
	if outside == snap.live {
		return s.verify(ctx, env, feat, r.Feature, res, next)
	}
	s.logger.LogAttrs(ctx, slog.LevelWarn, "flagsmith write replaced an outside version published between the re-read and the write",
		slog.String(logkey.Feature, r.Feature), slog.String(logkey.Environment, env.Name), slog.String(logkey.Version, v.UUID),
		slog.String(logkey.OutsideVersion, outside), slog.String(logkey.BasedOn, snap.live), slog.Int(logkey.Attempt, attempt))
	lost := func(format string, args ...any) error {
		return fmt.Errorf("mobile step %q: %w: version %s replaced the value of outside version %s, published after the step read version %s; "+format,
			append([]any{r.Feature, ErrOutsideChangeLost, v.UUID, outside, snap.live}, args...)...)
	}
	// Writing again is the next attempt; the error when there is none says what happened.
	if attempt >= s.maxAttempts {
		return lost("no attempt left to write again on top of it (%d attempts): %w", s.maxAttempts, ErrConflict)
	}
	theirs, err := s.client.VersionState(ctx, env.ID, feat.ID, outside)
	if err != nil {
		return lost("reading it failed: %w", err)
	}
	res.Attempts = attempt + 1
	redo, skipped, _, err := r.next(theirs.Value)
	if err != nil {
		return lost("the changes do not apply to its value: %w", err)
	}
	res.Old, res.New, res.Skipped = theirs.Value, redo, skipped
	if redo == next && theirs.Enabled == snap.state.Enabled {
		// Their value with the changes applied is what was written: nothing of theirs is
		// missing (the changes overrode all of it). Compared with what was written, not
		// with their value: the changes may be in place in theirs while the rest differs.
		return s.verify(ctx, env, feat, r.Feature, res, next)
	}
	// Write again only on top of the step's own version: anything published since was
	// built on it and lacks their change too.
	now, err := s.read(ctx, env, feat)
	if err != nil {
		return lost("the re-read before writing again failed: %w", err)
	}
	if now.live != v.UUID {
		return lost("version %s was published on top of the step's before it could write again", now.live)
	}
	w, err := s.client.PublishVersion(ctx, env.ID, feat.ID, redo, theirs.Enabled)
	if errors.Is(err, outbound.ErrOutcomeUnknown) {
		return fmt.Errorf("mobile step %q: %w: version %s replaced the value of outside version %s, and whether writing again on top of it worked is unknown: %w",
			r.Feature, ErrOutsideChangeUnknown, v.UUID, outside, err)
	}
	if err != nil {
		return lost("writing again failed: %w", err)
	}
	res.Version = w.UUID
	again, err := s.replaced(ctx, r.Feature, w.UUID)
	if err != nil {
		return err
	}
	if again != v.UUID {
		return fmt.Errorf("mobile step %q: %w: version %s, written again on top of outside version %s, replaced in turn outside version %s, published on top of the step's version %s (which lacks %s's change, so writing again cannot keep both)",
			r.Feature, ErrOutsideChangeLost, w.UUID, outside, again, v.UUID, outside)
	}
	return s.verify(ctx, env, feat, r.Feature, res, redo)
}

// environment resolves the environment and refuses one that requires change requests.
func (s *Step) environment(ctx context.Context, key string) (Environment, error) {
	env, err := s.client.Environment(ctx, key)
	if err != nil {
		return Environment{}, fmt.Errorf("mobile step: environment: %w", err)
	}
	if env.MinimumChangeRequestApprovals != nil {
		return Environment{}, fmt.Errorf("mobile step: environment %q (minimum approvals %d): %w",
			env.Name, *env.MinimumChangeRequestApprovals, ErrChangeRequests)
	}
	return env, nil
}
