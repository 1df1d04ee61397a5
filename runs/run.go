// Package runs is the record of what the orchestrator did: a Run is one execution of a
// pipeline with its trigger, its status, one Step per service and phase (what changed, which
// lock it waited for, under which fence, which deployment), and an ordered, append-only log
// of Events.
//
// The package holds the domain types, the Store contract and Portable, the Store written once
// over a small Driver (like locks.Locker over locks.Driver): creation defaults, Update's rules
// and retry, event stamping, filters and cursors, the cache of decoded runs and in-process
// signals are Portable's; a driver only stores and reads, one atomic step per method. Beside
// them are MarkStore (which run last changed each Coolify resource, under which fence, and
// each pipeline's newest build on it), Pruner (retention) and Deliveries (webhook de-duplication), small contracts the backends
// implement directly. Backends live below: runs/sqlitestore (the embedded single-host
// default, one SQLite file in the state dir) and runs/redisstore (multi-host, next to the
// Redis lock backend); runs/runstest is the conformance suite both pass. Follow, written
// once above the backends, replays a run's events and then follows new ones live (for the
// SSE endpoint and the CLI).
//
// Nothing here ever holds a secret: a Step records the keys of the env vars it wrote (with the
// flags and comment it changed, and whether the value changed) and the old and new image tag,
// never values.
package runs

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
)

// Status is where a run is. A run moves queued → phase1 → phase2 → mobile → succeeded, or
// ends early as failed, superseded, canceled, interrupted or expired. A run that waits for a
// person's decision (Decision) is awaiting meanwhile, holding no lock.
type Status string

// The statuses of a run.
const (
	StatusQueued      Status = "queued"
	StatusPhase1      Status = "phase1"
	StatusPhase2      Status = "phase2"
	StatusMobile      Status = "mobile"
	StatusSucceeded   Status = "succeeded"
	StatusFailed      Status = "failed"
	StatusSuperseded  Status = "superseded" // a newer run of the pipeline replaced it while queued
	StatusCanceled    Status = "canceled"
	StatusInterrupted Status = "interrupted" // the daemon executing it stopped under it
	StatusAwaiting    Status = "awaiting"    // it waits for a person's decision (Run.Decision), holding no lock
	StatusExpired     Status = "expired"     // nobody decided before its decision expired
)

// Statuses lists every status, in lifecycle order.
var Statuses = []Status{
	StatusQueued, StatusAwaiting, StatusPhase1, StatusPhase2, StatusMobile,
	StatusSucceeded, StatusFailed, StatusSuperseded, StatusCanceled, StatusInterrupted, StatusExpired,
}

// Terminal reports whether a run in this status has ended: succeeded, failed, superseded,
// canceled, interrupted or expired.
func (s Status) Terminal() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusSuperseded, StatusCanceled, StatusInterrupted, StatusExpired:
		return true
	}
	return false
}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool { return slices.Contains(Statuses, s) }

// Phase names a part of a run. Steps and events carry it.
type Phase string

// The phases of a run (docs/architecture.md, "The two phases").
const (
	Phase1      Phase = "phase1" // sync env vars and image tags, under coolify:phase1
	Phase2      Phase = "phase2" // deploy and health-check, under coolify:phase2
	PhaseMobile Phase = "mobile" // Flagsmith remote-config update, in the mobile: namespace
)

// Run is one execution of a pipeline.
type Run struct {
	ID       string               `json:"id"`
	Pipeline string               `json:"pipeline"`
	Trigger  orchestrator.Trigger `json:"trigger"`
	Status   Status               `json:"status"`
	// Reason says why a run failed, was superseded, canceled or interrupted ("lock lost",
	// "health check failed for api", "superseded by run <id>", "daemon restarted").
	Reason string `json:"reason,omitempty"`
	// SupersededBy names the run that superseded this one (status superseded, under
	// concurrency: supersede).
	SupersededBy string    `json:"superseded_by,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	EndedAt      time.Time `json:"ended_at,omitzero"`
	// Steps holds one step per (phase, name), in the order they were first set: the Phase-1
	// steps of every service, then Phase 2, then mobile.
	Steps []Step `json:"steps"`
	// Instance is the daemon instance executing the run (empty while nobody has claimed
	// it). Store.Unfinished finds an instance's runs by it, for a takeover. (It is stored and
	// shown as "owner", its name before; locks call the run that holds a key its owner.)
	Instance string `json:"owner,omitempty"`
	// HeldLocks are the lock keys the run holds right now. The engine keeps it current so
	// that, when the daemon dies, the interrupted report says which locks were left behind.
	HeldLocks []string `json:"held_locks,omitempty"`
	// Waiting lists the locks the run waits for right now, each with what holds it (the
	// engine sets an entry when a wait lasts and drops it at the grant or the failure), so
	// every view can say what a run waits on instead of only its phase.
	Waiting []Wait `json:"waiting,omitempty"`
	// Left says, for a run that did not succeed, what state it left each service in: written
	// by a takeover for a run whose daemon died, and by the run itself when it failed or was
	// stopped after it had changed something (with the image tag each service carries and
	// runs, where the pipeline sets one).
	Left []Left `json:"left,omitempty"`
	// Epoch is the run's ownership epoch: 1 when it is created, advanced by a takeover
	// before the takeover touches anything. The execution that created the run confirms,
	// before each outside write, that the run is still at that epoch and has not ended
	// (Store.Owner), so a daemon cut off from the store acts on nothing another daemon took
	// over. Only grows (Update keeps the stored value when fn lowers it); 0 in runs stored by
	// builds before it, which count as epoch 1.
	Epoch int64 `json:"epoch,omitempty"`
	// TakenOverBy names the daemon instance that took the run over (Instance stays the one
	// that executed it), TakenOverAt when; empty unless a takeover advanced the epoch.
	TakenOverBy string    `json:"taken_over_by,omitempty"`
	TakenOverAt time.Time `json:"taken_over_at,omitzero"`
	// Trace is the W3C traceparent of the run's span, written when the run starts executing
	// (empty when traces are off): a takeover by another daemon adds its span to the same
	// trace, under it.
	Trace string `json:"trace,omitempty"`
	// Decision is the question the run waits on a person for while it is awaiting (and, once
	// decided, the last one it asked, with its votes); nil when it never asked one.
	Decision *Decision `json:"decision,omitempty"`
	// Version counts the writes of the run; the store sets it (1 after Create, +1 on every
	// Update). Clients can use it as an ETag.
	Version int64 `json:"version"`
}

// Wait is a lock a run waits for: the key, the step waiting (its phase and name) and since
// when, and what held the key when the wait began: a run's step lease (Holder, HeldSince,
// and HolderRun when the lease names its run) or an operator's freeze (Frozen, until
// Until), with the lease's message.
type Wait struct {
	LockKey   string    `json:"lock_key"`
	Phase     Phase     `json:"phase"`
	Step      string    `json:"step"`
	Since     time.Time `json:"since"`
	Holder    string    `json:"holder,omitempty"`
	HolderRun string    `json:"holder_run,omitempty"`
	HeldSince time.Time `json:"held_since,omitzero"`
	Frozen    bool      `json:"frozen,omitempty"`
	Until     time.Time `json:"until,omitzero"`
	Message   string    `json:"message,omitempty"`
}

// String says what the wait is on, for people: "waiting for coolify:phase2, frozen by
// operator:alice until 2026-12-24T18:00:00Z: release freeze", or "waiting for coolify:phase1,
// held by run R (prod#12/phase1) since 12:00:00Z". The dashboard's run.js words it the same.
func (w Wait) String() string {
	s := "waiting for " + w.LockKey
	switch {
	case w.Frozen:
		s += ", frozen by " + cmp.Or(w.Holder, "an operator") + " until " + w.Until.UTC().Format(time.RFC3339)
		if w.Message != "" {
			s += ": " + w.Message
		}
	case w.HolderRun != "":
		s += ", held by run " + w.HolderRun + " (" + w.Holder + ")"
	case w.Holder != "":
		s += ", held by " + w.Holder
		if w.Message != "" {
			s += " (" + w.Message + ")"
		}
	}
	if !w.Frozen && w.Holder != "" && !w.HeldSince.IsZero() {
		s += " since " + w.HeldSince.UTC().Format(time.RFC3339)
	}
	return s
}

// MarshalJSON encodes the wait with its String as "text", so an API client reads what the run
// waits on as the CLI and the dashboard word it. ("text" is ignored when decoding.)
func (w Wait) MarshalJSON() ([]byte, error) {
	type plain Wait
	return json.Marshal(struct {
		plain
		Text string `json:"text"`
	}{plain(w), w.String()})
}

// WaitingFor says what the run waits on ("" when it waits for no lock): its waits' String,
// joined by "; ".
func (r Run) WaitingFor() string {
	parts := make([]string, len(r.Waiting))
	for i, w := range r.Waiting {
		parts[i] = w.String()
	}
	return strings.Join(parts, "; ")
}

// What a taken-over run left a service in (Left.State).
const (
	LeftDeployed          = "deployed"            // Phase 2 deployed it (this run's config runs)
	LeftSyncedNotDeployed = "synced_not_deployed" // it carries this run's config, not deployed
	LeftRestored          = "restored"            // this run's changes were put back
	LeftUntouched         = "untouched"           // this run changed nothing on it
	LeftDeployCanceled    = "deploy_canceled"     // its deployment was canceled; it carries this run's config
	LeftWriteUnknown      = "write_unknown"       // a mobile step's Flagsmith write was under way: it may have landed
	LeftUnknown           = "unknown"             // a deployment of the run's own may still be building: nothing more was written
)

// Ownership is who executes a run now, as Store.Owner reads it.
type Ownership struct {
	Status      Status
	Instance    string
	Epoch       int64
	TakenOverBy string
	TakenOverAt time.Time
}

// OwnershipOf returns r's ownership: its status, instance, epoch (0 read as 1) and takeover.
func OwnershipOf(r Run) Ownership {
	return Ownership{Status: r.Status, Instance: r.Instance, Epoch: max(r.Epoch, 1), TakenOverBy: r.TakenOverBy, TakenOverAt: r.TakenOverAt}
}

// Left is the state a taken-over run left one service (or one mobile step's feature) in.
type Left struct {
	Service string `json:"service"`
	UUID    string `json:"uuid,omitempty"`
	State   string `json:"state"`
	Detail  string `json:"detail,omitempty"`
}

// StepStatus is where one step (one service in one phase, or one mobile change) is.
type StepStatus string

// The statuses of a step.
const (
	StepPending     StepStatus = "pending"      // not started
	StepWaitingLock StepStatus = "waiting_lock" // waiting for its lock
	StepRunning     StepStatus = "running"      // holding its lock and working
	StepSynced      StepStatus = "synced"       // Phase 1 done: the service carries this run's config
	StepDeployed    StepStatus = "deployed"     // Phase 2: the deployment finished, health check pending
	StepHealthy     StepStatus = "healthy"      // Phase 2 done: deployed and healthy
	StepUpdated     StepStatus = "updated"      // mobile step done
	StepSuperseded  StepStatus = "superseded"   // a newer run re-synced the service; not deployed by this run
	StepFailed      StepStatus = "failed"
	StepRestored    StepStatus = "restored" // the Phase-1 snapshot was put back (and redeployed if needed)
	StepSkipped     StepStatus = "skipped"  // not done because the run stopped before it
	// StepInterrupted: the run's daemon died while the step was under way or pending; the
	// run's Left says what state the service was left in.
	StepInterrupted StepStatus = "interrupted"
	// StepStale: the service already carries a newer build than this run's (Step.Note names
	// it and its run); this run neither wrote nor deployed it.
	StepStale StepStatus = "stale"
)

// Done reports whether the step has finished one way or another.
func (s StepStatus) Done() bool {
	switch s {
	case StepPending, StepWaitingLock, StepRunning, StepDeployed:
		return false
	}
	return true
}

// Step is one service in one phase (UUID set), or one mobile change (UUID empty).
type Step struct {
	Phase Phase `json:"phase"`
	// Name is the service's name in the pipeline, or the mobile step's name.
	Name string `json:"name"`
	// UUID is the Coolify application or service UUID (services only).
	UUID string `json:"uuid,omitempty"`
	// Wave is the Phase-2 wave of the service (Phase-2 steps; 0 is the first).
	Wave      int        `json:"wave,omitempty"`
	Status    StepStatus `json:"status"`
	StartedAt time.Time  `json:"started_at,omitzero"`
	EndedAt   time.Time  `json:"ended_at,omitzero"`
	// LockKey is the key the step ran under ("coolify:<uuid>", "mobile:flagsmith:<feature>"),
	// LockWait how long it waited for it, Fence the fence it was granted.
	LockKey  string        `json:"lock_key,omitempty"`
	LockWait time.Duration `json:"lock_wait_ns,omitempty"`
	Fence    int64         `json:"fence,omitempty"`
	// Changes is what the step wrote (Phase 1, mobile): names, never values. On a Phase-1 step
	// that failed, what may have been written before it failed.
	Changes Changes `json:"changes,omitzero"`
	// DeploymentUUID is the Coolify deployment this step started (Phase 2), or the one that
	// redeployed the previous tag when the step was restored.
	DeploymentUUID string `json:"deployment_uuid,omitempty"`
	// DeploymentURL is that deployment's page in Coolify's UI, once Coolify has shown it.
	DeploymentURL string `json:"deployment_url,omitempty"`
	// RestoredAt is when the Phase-1 snapshot was put back (zero if never).
	RestoredAt time.Time `json:"restored_at,omitzero"`
	// DeployRequestedAt is when the step last asked Coolify for a deployment whose UUID is not
	// recorded yet (zero once DeploymentUUID names it): if the daemon dies in between, the
	// takeover looks for that deployment among the application's active ones.
	DeployRequestedAt time.Time `json:"deploy_requested_at,omitzero"`
	// Error is the failure, as text for humans (never containing secret values).
	Error string `json:"error,omitempty"`
	// Note says why a step that did not fail was not done, e.g. for a stale step "build 5
	// (run R) is on the service".
	Note string `json:"note,omitempty"`
}

// Changes records what a step changed, by name only.
type Changes struct {
	// Env are the env vars written (created or changed), sorted by key: for each, which flags
	// and whether the comment and the value changed. Never values.
	Env []orchestrator.EnvChange `json:"env,omitempty"`
	// ImageTag is the image tag change, nil when the tag was already right.
	ImageTag *orchestrator.TagChange `json:"image_tag,omitempty"`
	// Fields are the fields of a mobile feature's JSON document that changed.
	Fields []string `json:"fields,omitempty"`
	// Values are a mobile step's changed fields with their old and new values (a Flagsmith
	// feature's remote config, which every app reads: never a secret), in Fields' order.
	Values []FieldChange `json:"values,omitempty"`
}

// FieldChange is one field of a mobile feature that a step changed: its dotted path ("" for
// the whole value) and its old and new values as JSON text ("" when it was not there).
type FieldChange struct {
	Field string `json:"field"`
	Old   string `json:"old"`
	New   string `json:"new"`
}

// String is `field old → new`, with "(none)" for a side that was not there.
func (f FieldChange) String() string {
	name := cmp.Or(f.Field, "(value)")
	return name + " " + cmp.Or(f.Old, "(none)") + " → " + cmp.Or(f.New, "(none)")
}

// Empty reports whether nothing was changed.
func (c Changes) Empty() bool {
	return len(c.Env) == 0 && c.ImageTag == nil && len(c.Fields) == 0
}

// String lists the changes for people: `tag v1 → v2; env: A created, B (value, is_literal true → false); fields: x`.
// It never holds a value. Empty changes give "".
func (c Changes) String() string {
	var parts []string
	if t := c.ImageTag; t != nil {
		parts = append(parts, "tag "+cmp.Or(t.Old, "(none)")+" → "+cmp.Or(t.New, "(none)"))
	}
	if len(c.Env) > 0 {
		env := make([]string, len(c.Env))
		for i, e := range c.Env {
			env[i] = e.String()
		}
		parts = append(parts, "env: "+strings.Join(env, ", "))
	}
	switch {
	case len(c.Values) > 0:
		vals := make([]string, len(c.Values))
		for i, v := range c.Values {
			vals[i] = v.String()
		}
		parts = append(parts, "fields: "+strings.Join(vals, ", "))
	case len(c.Fields) > 0:
		parts = append(parts, "fields: "+strings.Join(c.Fields, ", "))
	}
	return strings.Join(parts, "; ")
}

// Step returns a pointer to the step of phase named name, or nil. The pointer is into
// r.Steps and stays valid until the next SetStep that appends.
func (r *Run) Step(phase Phase, name string) *Step {
	for i := range r.Steps {
		if r.Steps[i].Phase == phase && r.Steps[i].Name == name {
			return &r.Steps[i]
		}
	}
	return nil
}

// SetStep replaces the step with the same phase and name, or appends s.
func (r *Run) SetStep(s Step) {
	if p := r.Step(s.Phase, s.Name); p != nil {
		*p = s
		return
	}
	r.Steps = append(r.Steps, s)
}

// StepsOf returns the steps of one phase, in order.
func (r *Run) StepsOf(phase Phase) []Step {
	var out []Step
	for _, s := range r.Steps {
		if s.Phase == phase {
			out = append(out, s)
		}
	}
	return out
}

// Clone returns a deep copy of r: the copy shares no map or slice with r.
//
// The stores clone a run on every write (a 100-service run has 200 steps), so the steps'
// changes are copied into a few shared backing arrays rather than one allocation each.
func (r Run) Clone() Run {
	c := r
	if r.Trigger.Params != nil {
		c.Trigger.Params = make(map[string]string, len(r.Trigger.Params))
		for k, v := range r.Trigger.Params {
			c.Trigger.Params[k] = v
		}
	}
	c.HeldLocks = slices.Clone(r.HeldLocks)
	c.Waiting = slices.Clone(r.Waiting)
	c.Left = slices.Clone(r.Left)
	if r.Steps == nil {
		return c
	}
	c.Steps = slices.Clone(r.Steps)
	var nEnv, nFlags, nComments, nTags, nFields, nValues int
	for i := range r.Steps {
		ch := &r.Steps[i].Changes
		nEnv += len(ch.Env)
		for _, e := range ch.Env {
			nFlags += len(e.Flags)
			if e.Comment != nil {
				nComments++
			}
		}
		if ch.ImageTag != nil {
			nTags++
		}
		nFields += len(ch.Fields)
		nValues += len(ch.Values)
	}
	var (
		env      = make([]orchestrator.EnvChange, 0, nEnv)
		flags    = make([]orchestrator.FlagChange, 0, nFlags)
		comments = make([]orchestrator.CommentChange, 0, nComments)
		tags     = make([]orchestrator.TagChange, 0, nTags)
		fields   = make([]string, 0, nFields)
		values   = make([]FieldChange, 0, nValues)
	)
	for i := range c.Steps {
		ch := &c.Steps[i].Changes
		if ch.Env != nil {
			start := len(env)
			for _, e := range ch.Env {
				if e.Flags != nil {
					at := len(flags)
					flags = append(flags, e.Flags...)
					e.Flags = flags[at:len(flags):len(flags)]
				}
				if e.Comment != nil {
					comments = append(comments, *e.Comment)
					e.Comment = &comments[len(comments)-1]
				}
				env = append(env, e)
			}
			ch.Env = env[start:len(env):len(env)]
		}
		if ch.ImageTag != nil {
			tags = append(tags, *ch.ImageTag)
			ch.ImageTag = &tags[len(tags)-1]
		}
		if ch.Fields != nil {
			start := len(fields)
			fields = append(fields, ch.Fields...)
			ch.Fields = fields[start:len(fields):len(fields)]
		}
		if ch.Values != nil {
			start := len(values)
			values = append(values, ch.Values...)
			ch.Values = values[start:len(values):len(values)]
		}
	}
	return c
}
