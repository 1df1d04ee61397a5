// Package logkey names the attributes of the daemon's log records, once for every package:
// the engine, the API, the lock service and the outside clients write the same key for the
// same thing, so one query finds a run's or a lock's records whichever package wrote them.
// Tests and log readers (an operator's queries and alerts) match these strings: a key is
// added here, never renamed.
package logkey

// What a record is about.
const (
	RunID     = "run_id"
	Pipeline  = "pipeline"
	Phase     = "phase"
	Service   = "service"
	LockKey   = "lock_key"
	Fence     = "fence"
	Holder    = "holder"
	By        = "by"
	Reason    = "reason"
	Error     = "error"
	Status    = "status"
	RequestID = "request_id"
	Note      = "note"
)

// An HTTP request, served (api) or sent (the outside clients).
const (
	Method   = "method"
	Route    = "route"
	Path     = "path"
	Duration = "duration"
	Remote   = "remote"
	Attempt  = "attempt"
	Wait     = "wait"
	System   = "system"
)

// A webhook delivery and the API's checks.
const (
	Provider   = "provider"
	Delivery   = "delivery"
	Check      = "check"
	Rule       = "rule"
	Redelivery = "redelivery"
	Existing   = "existing"
	Role       = "role"
	Subject    = "subject"
	Until      = "until"
)

// Notifications (notify).
const (
	Target = "target"
	Event  = "event"
)

// A recovered panic (internal/panics, the engine).
const (
	Stack = "stack"
	Panic = "panic"
)

// A run's deployments, owners and takeovers (the engine).
const (
	Deployment  = "deployment_uuid"
	Owner       = "owner"
	TakenOverBy = "taken_over_by"
	NotDone     = "not_done"
	Action      = "action"
)

// The daemon's own life (cmd/orchestrator): start, shutdown, the state directory, pruning,
// the environment check.
const (
	Addr       = "addr"
	Backend    = "backend"
	Instance   = "instance"
	Pipelines  = "pipelines"
	Grace      = "grace"
	Left       = "left"
	StateDir   = "state_dir"
	OpenBits   = "open_bits"
	Runs       = "runs"
	MaxAge     = "max_age"
	MaxRuns    = "max_runs"
	Variable   = "variable"
	DidYouMean = "did_you_mean"
	Problem    = "problem"
)

// A Flagsmith feature and its versions (mobile).
const (
	Feature        = "feature"
	Environment    = "environment"
	Changed        = "changed"
	Version        = "version"
	OutsideVersion = "outside_version"
	BasedOn        = "based_on"
)

// An Infisical identity and folder (secrets/infisical).
const (
	Identity   = "identity"
	ExpiresIn  = "expires_in"
	Project    = "project"
	SecretPath = "secret_path"
	Count      = "count"
	Imports    = "imports"
)

// Redis pub/sub of lock releases (locks/redislock).
const (
	Channel = "channel"
	Waiters = "waiters"
)
