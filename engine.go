package orchestrator

import (
	"context"
	"time"
)

// Engine is the deploy engine as the front doors use it: the contract package api serves
// and package phases implements (*phases.Engine). Run is the run record the engine stores
// and answers with (*runs.Run): it is a parameter because this package imports nothing of the
// module, and the record lives with its store.
//
// Its refusals are this package's errors, wrapped: ErrUnknownPipeline, ErrInvalid (FieldErrors
// naming each trigger field), ErrShuttingDown, ErrNotOwner.
type Engine[Run any] interface {
	// Submit validates t against the pipeline and enqueues a run; existing is true when
	// t.IdempotencyKey matched a run already created (that run is returned, nothing new
	// starts). Errors: ErrUnknownPipeline; ErrInvalid (FieldErrors naming the trigger's
	// fields); ErrShuttingDown; the store's errors.
	Submit(ctx context.Context, pipeline string, t Trigger) (run Run, existing bool, err error)
	// Cancel stops a run: a queued one never starts, a running one stops after its current
	// step and compensates. by (who asks) and reason (why, may be empty) are recorded in the
	// run. Errors: the store's not-found; its ended error when the run already ended;
	// ErrNotOwner when another daemon instance executes it.
	Cancel(ctx context.Context, runID, by, reason string) (Run, error)
	// OverrideWindow lets a run go ahead outside its pipeline's deploy windows, from now on,
	// for who asks (by) and why (reason, required). When the pipeline's windows say
	// override_second_person, the first override only asks: granted is false until a
	// different subject overrides too. Errors: ErrInvalid (no reason); ErrSecondPerson (the
	// person who asked first asks again); the store's not-found; its ended error;
	// ErrNotOwner.
	OverrideWindow(ctx context.Context, runID, by, reason string) (run Run, granted bool, err error)
	// Decide answers the question a run waits on (an approval of its plan): an approval
	// counts for the digest it names; enough approvals let the run go on, a rejection ends
	// it failed. Errors: ErrNotAwaiting; ErrDecisionChanged (the digest is no longer the one
	// asked about); ErrSecondPerson (the person already voted, or approves a run they
	// triggered where that is forbidden); ErrInvalid; the store's errors; ErrNotOwner.
	Decide(ctx context.Context, runID string, v DecisionVote) (Run, error)
	// Plan is the dry run: what a run with t would change and which locks it would take.
	// Errors: ErrUnknownPipeline; ErrInvalid; outside-API and secret errors.
	Plan(ctx context.Context, pipeline string, t Trigger) (*Plan, error)
	// Pipelines lists the loaded pipelines' names, sorted.
	Pipelines() []string
	// Services lists the Coolify resources the loaded pipelines deploy: which pipelines
	// deploy each, who wrote it last, and each pipeline's newest build on it. Errors: the
	// store's.
	Services(ctx context.Context) ([]Service, error)
}

// Service is one Coolify resource as the services view shows it (GET /v1/services,
// `orchestrator services`). A resource several pipelines deploy has two records: its mark,
// the last run that synced or deployed it, whatever its pipeline (Phase 2's write guard reads
// it), and per pipeline the newest build that pipeline synced or deployed there (the
// stale-build guard compares a run with its own pipeline's only).
type Service struct {
	UUID string `json:"uuid"`
	// Names are the names the pipelines give it, sorted, each once.
	Names []string `json:"names"`
	// Pipelines are the loaded pipelines that deploy it, by name, then the pipelines no
	// longer loaded that have a build recorded on it.
	Pipelines []ServicePipeline `json:"pipelines"`
	// Mark is the last run that synced or deployed it; nil when none has.
	Mark *ServiceMark `json:"mark,omitempty"`
	// Running is what it was last seen running, verified by a run; nil when no run has.
	Running *ServiceRunning `json:"running,omitempty"`
	// InProgress are the deployments Coolify shows queued or in progress on it now (the
	// daemon's view asks Coolify; a view from the local backend alone does not, and leaves it
	// nil); InProgressUnread says why Coolify could not be asked.
	InProgress       []string `json:"in_progress,omitempty"`
	InProgressUnread string   `json:"in_progress_unread,omitempty"`
}

// ServiceRunning is what a service was last seen running: the tag, commit and app version
// of a build, since when, which deployment, and the run whose build it is (Restored: put
// back by run RestoredBy's rollback).
type ServiceRunning struct {
	ImageTag   string    `json:"image_tag,omitempty"`
	Commit     string    `json:"commit,omitempty"`
	AppVersion string    `json:"app_version,omitempty"`
	Deployment string    `json:"deployment_uuid,omitempty"`
	RunID      string    `json:"run_id"`
	Pipeline   string    `json:"pipeline,omitempty"`
	Build      string    `json:"build,omitempty"`
	Since      time.Time `json:"since"`
	Restored   bool      `json:"restored,omitempty"`
	RestoredBy string    `json:"restored_by,omitempty"`
}

// ServicePipeline is one pipeline's part in a Service.
type ServicePipeline struct {
	Pipeline string `json:"pipeline"`
	// Service is the name the pipeline gives the resource ("" for a pipeline not loaded).
	Service string `json:"service,omitempty"`
	// Newest is the newest build the pipeline synced or deployed on the resource and the run
	// whose build it is (a restore puts back the run whose build it restores); nil when none.
	Newest *ServiceMark `json:"newest,omitempty"`
}

// ServiceMark is what a mark records: run RunID synced (phase1) or deployed (phase2) the
// resource under Fence at At, with build Build of pipeline Pipeline (created at RunCreated,
// a rollback or not). Package runs calls it runs.Mark. A resource's mark written by a restore
// names the restoring run, with the build it put back.
type ServiceMark struct {
	RunID      string    `json:"run_id"`
	Fence      int64     `json:"fence"`
	Phase      string    `json:"phase"`
	At         time.Time `json:"at"`
	Pipeline   string    `json:"pipeline,omitempty"`
	Build      string    `json:"build,omitempty"`
	RunCreated time.Time `json:"run_created,omitzero"`
	Rollback   bool      `json:"rollback,omitempty"`
}

// Plan is a dry run: what a run of a pipeline with some trigger would change and which locks
// it would take, and who holds them now. Values are never shown.
type Plan struct {
	Pipeline string        `json:"pipeline"`
	Services []ServicePlan `json:"services"`
	// Waves are the names of the services Phase 2 would deploy, wave by wave in the order the
	// waves run; Parallel is how many of one wave deploy at once.
	Waves    [][]string   `json:"waves,omitempty"`
	Parallel int          `json:"parallel"`
	Mobile   []MobilePlan `json:"mobile,omitempty"`
	Locks    []LockPlan   `json:"locks"`
	// Problems are what would make the run fail (or end without deploying) before it writes
	// anything, every one found: Coolify unreachable, a token refused or lacking an ability,
	// a service Coolify does not know, a secret that cannot be read, a Flagsmith environment
	// key or feature that does not exist or a change that does not fit its value, a build
	// older than the one on every service, a lock key frozen. WouldFail says whether there
	// are any; `orchestrator plan` exits non-zero then.
	Problems  []string `json:"problems,omitempty"`
	WouldFail bool     `json:"would_fail"`
	// Warnings are worth knowing and fail nothing, e.g. services left alone as stale while
	// others are deployed.
	Warnings []string `json:"warnings,omitempty"`
	// Timeouts are the windows that decide a run's outcome, per service: see TimeoutPlan.
	Timeouts []TimeoutPlan `json:"timeouts,omitempty"`
	// Window is the deploy windows' verdict now ("inside the deploy windows", or outside
	// them until when, and why); empty when the pipeline has none. Outside them, a problem
	// says what a run would do (wait or fail).
	Window string `json:"window,omitempty"`
	// Checks are the metric checks the run would measure after it deploys (the pipeline's
	// analysis), with the run's values in their queries.
	Checks []CheckPlan `json:"checks,omitempty"`
	// Requests is about how many requests to Coolify a run would send: see RequestPlan.
	Requests RequestPlan `json:"coolify_requests"`
}

// CheckPlan is one metric check of a run's analysis, as it would be sent to Prometheus.
type CheckPlan struct {
	Name string `json:"name"`
	// Service is the service it measures ("" for a check of the whole release).
	Service string `json:"service,omitempty"`
	// Query is the PromQL sent, placeholders filled.
	Query        string        `json:"query"`
	Success      string        `json:"success"`
	Failure      string        `json:"failure,omitempty"`
	Interval     time.Duration `json:"interval_ns"`
	Count        int           `json:"count"`
	FailureLimit int           `json:"failure_limit"`
	// Error says why Prometheus refuses the query or cannot be asked (the run would fail).
	Error string `json:"error,omitempty"`
}

// RequestPlan is the Coolify requests a run is expected to send, by purpose (preflight, sync,
// deploy, poll, health) and in all: an estimate from what the plan found to write, the waves
// and how the engine waits (about coolify.LooksPerDeployment looks at the active deployments
// per deployment, shared by the deployments in flight at once, and one read at each end),
// not a bound. Retries and a Coolify that answers slowly add to it.
type RequestPlan struct {
	ByPurpose map[string]int `json:"by_purpose"`
	Total     int            `json:"total"`
}

// ServicePlan is what Phase 1 would write to one service.
type ServicePlan struct {
	Name string `json:"name"`
	UUID string `json:"uuid"`
	Kind string `json:"kind"`
	// Env lists every variable of the service's definition with what would happen to it
	// (action "create", "update" or "unchanged") and, for a write, every flag and the comment it
	// changes and whether the value changes. Never values.
	Env      []EnvChange `json:"env"`
	ImageTag *TagChange  `json:"image_tag,omitempty"`
	// Error says why the service could not be read (the plan goes on with the others).
	Error string `json:"error,omitempty"`
	// Stale, when set, says that the stale-build guard would leave the service alone: a
	// newer build of the pipeline is on it (the note names it and its run). A rollback is
	// never stale.
	Stale string `json:"stale,omitempty"`
}

// MobilePlan is one mobile step: the fields it would set, and what it would write to the
// feature's value as it is now (remote config, not a secret: shown as it is).
type MobilePlan struct {
	Name    string   `json:"name"`
	Feature string   `json:"feature"`
	When    string   `json:"when"`
	Fields  []string `json:"fields"`
	LockKey string   `json:"lock_key"`
	// Environment is the Flagsmith environment's name; Current the value there now, Next the
	// value the step would write, Changes whether they differ; Kept the never_downgrade
	// verdicts (a version the step would not lower). Error says why it could not be worked
	// out (the run would fail there).
	Environment string   `json:"environment,omitempty"`
	Current     string   `json:"current,omitempty"`
	Next        string   `json:"next,omitempty"`
	Changes     bool     `json:"changes"`
	Kept        []string `json:"kept,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// TimeoutPlan is the windows that decide a run's outcome on one service: how long a
// deployment may take before it is canceled (Deploy), how long a deployment of the run's
// own that will not end is canceled again before the run gives up on it (Cancel), how long
// Coolify's status may take to match health.coolify_status (Status) and how long the HTTP
// health check may take (HTTP); zero when the service has no such check.
type TimeoutPlan struct {
	Service string        `json:"service"`
	Deploy  time.Duration `json:"deploy_timeout_ns"`
	Cancel  time.Duration `json:"cancel_timeout_ns"`
	Status  time.Duration `json:"status_timeout_ns,omitempty"`
	HTTP    time.Duration `json:"http_timeout_ns,omitempty"`
}

// LockPlan is one key the run would take and its current lease, if any.
type LockPlan struct {
	Key     string     `json:"key"`
	Free    bool       `json:"free"`
	Current *LeaseInfo `json:"current,omitempty"`
}

// LeaseInfo is a snapshot of one lease on a lock key (docs/architecture.md, "Lock keys and
// namespaces"): who holds it, under which fence, since and until when. Package locks calls
// it locks.Info. The token is the lease's secret capability (release and renew compare on
// it); it is never encoded.
type LeaseInfo struct {
	Key        string    `json:"key"`
	Token      string    `json:"-"`
	Holder     string    `json:"holder"`
	Fence      int64     `json:"fence"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Message    string    `json:"message,omitempty"`
	// Frozen marks an operator freeze: a lease with no heartbeat that expires at ExpiresAt.
	Frozen bool `json:"frozen,omitempty"`
	// ClosedUntil is set while the key is in the lock-delay that follows a forced release;
	// the key is then free but cannot be granted before that instant.
	ClosedUntil time.Time `json:"closed_until,omitzero"`
	// Waiters is the number of live waiters queued on the key (listings only).
	Waiters int `json:"waiters"`
}

// Remaining is how long the lease has left at now (zero when expired).
func (i LeaseInfo) Remaining(now time.Time) time.Duration {
	if d := i.ExpiresAt.Sub(now); d > 0 {
		return d
	}
	return 0
}
