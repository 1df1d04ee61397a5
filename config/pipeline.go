package config

import (
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
)

// Pipeline is one pipeline definition: a Coolify instance, the services to sync and deploy
// there, optional mobile steps, lock budgets and policies. Load it with LoadPipelineFile or
// LoadPipelines; every loaded Pipeline has passed validation and has its defaults filled in.
//
// Fields that take trigger placeholders (Service.ImageTag, EnvVar.Value, HTTPCheck.URL and
// MobileStep.Set values) hold their text as written, with ${trigger.…} and $${ escapes, until
// Resolve fills them for one run. The engine works on resolved copies only.
type Pipeline struct {
	// Name identifies the pipeline (URL path segment, lock holder prefix). It defaults to the
	// file's base name without extension and must match ^[a-z0-9][a-z0-9_-]{0,62}$.
	Name        string `koanf:"name"`
	Description string `koanf:"description"`
	// Coolify is the one instance every service of this pipeline lives on.
	Coolify Coolify `koanf:"coolify"`
	// Secrets are named secret sources env vars may read from. The name "env" is built in
	// (the daemon's own environment) and can't be redefined.
	Secrets  map[string]SecretSource `koanf:"secrets"`
	Services []Service               `koanf:"services"`
	Mobile   []MobileStep            `koanf:"mobile"`
	Locks    LockPolicy              `koanf:"locks"`
	// Phase2 says how many services of one wave Phase 2 deploys at once (see Waves).
	Phase2 Phase2Policy `koanf:"phase2"`
	// OnFailure says what a failure after Phase 1 does (default OnFailureRollback).
	OnFailure OnFailure `koanf:"on_failure"`
	// Concurrency says how runs of this pipeline queue (default ConcurrencyQueue).
	Concurrency Concurrency `koanf:"concurrency"`
	// Order says which of two builds is newer (see Order). Empty: OrderBuild when the
	// trigger's build is a number, else OrderNone.
	Order Order `koanf:"order"`
	// MaxBuildAhead bounds how far a run's build, ordered by build, may be ahead of the
	// newest build the pipeline is known to have (its marks on its services, its runs not
	// ended): a build more than this ahead is refused at submit, unless it is a rollback or an
	// admin allows it (Trigger.AllowBuildAhead). A mistaken build far ahead would otherwise
	// make every later build stale until a rollback. Default DefaultMaxBuildAhead; 0 turns
	// the check off (for builds that are timestamps or instance-wide IDs, such as GitLab's
	// pipeline id).
	MaxBuildAhead int64 `koanf:"max_build_ahead"`
	// Notify says where this pipeline's notifications go; nil means the daemon's default.
	Notify *Notify `koanf:"notify"`
	// Statuses says which Git hosts show the pipeline's runs as deployments; nil: none.
	Statuses *Statuses `koanf:"statuses"`
	// Analysis, when set, verifies the release with metric checks after it serves.
	Analysis *Analysis `koanf:"analysis"`
	// Windows are the deploy windows (nil: a run may go ahead at any time).
	Windows *Windows `koanf:"windows"`
	// Approvals, when set, make each run wait for people to approve its plan before Phase 1.
	Approvals *Approvals `koanf:"approvals"`
	// Environment names the daemon config's environment whose windows and approvals the
	// pipeline takes where it has none of its own (Daemon.ApplyEnvironments).
	Environment string `koanf:"environment"`

	// File is the path the pipeline was loaded from ("" when built in code).
	File string `koanf:"-"`
}

// Coolify names a Coolify instance.
type Coolify struct {
	// URL is the instance's base URL (scheme and host, optional path prefix); the client
	// appends /api/v1.
	URL string `koanf:"url"`
	// Token is the API token ("<id>|<secret>"); it needs read, write and deploy abilities
	// (and read:sensitive to compare env values).
	Token Secret `koanf:"token"`
}

// SecretSource is a named place secrets come from. Exactly one kind is set.
type SecretSource struct {
	Infisical *Infisical `koanf:"infisical"`
}

// Infisical reads secrets of one project environment and folder with a machine identity
// (Universal Auth).
type Infisical struct {
	URL          string `koanf:"url"` // e.g. https://eu.infisical.com
	ClientID     string `koanf:"client_id"`
	ClientSecret Secret `koanf:"client_secret"`
	ProjectID    string `koanf:"project_id"`
	Environment  string `koanf:"environment"` // environment slug, e.g. "prod"
	Path         string `koanf:"path"`        // secret folder, default "/"
}

// EnvSource is the built-in secret source name that reads the daemon's own environment.
const EnvSource = "env"

// ServiceKind is the kind of Coolify resource a service is.
type ServiceKind string

// Service kinds.
const (
	// KindApplication is a Coolify application (/applications/{uuid}); it has an image tag and
	// env vars with build-time/runtime flags.
	KindApplication ServiceKind = "application"
	// KindService is a Coolify service (docker compose, /services/{uuid}); it has no image tag
	// and its env vars take no build-time/runtime flags.
	KindService ServiceKind = "service"
)

// Service is one Coolify resource the pipeline syncs and deploys.
type Service struct {
	// Name is the step name, unique in the pipeline (holder IDs, reports); defaults to UUID.
	Name string `koanf:"name"`
	// UUID is the Coolify resource UUID. Unique in the pipeline; the lock key is "coolify:<uuid>".
	UUID string `koanf:"uuid"`
	// Kind defaults to KindApplication.
	Kind ServiceKind `koanf:"kind"`
	// ImageTag is the docker_registry_image_tag Phase 1 sets; empty means "leave the tag as it
	// is". Takes trigger placeholders; after Resolve it matches orchestrator.ImageTagPattern.
	ImageTag string `koanf:"image_tag"`
	// Env are the variables Phase 1 syncs, in order. Keys are unique per service.
	Env    []EnvVar `koanf:"env"`
	Health Health   `koanf:"health"`
	// DeployTimeout bounds waiting for one deployment to end (default DefaultDeployTimeout);
	// a deployment still running then is canceled.
	DeployTimeout time.Duration `koanf:"deploy_timeout"`
	// CancelTimeout bounds how long a run goes on canceling a deployment of its own that did
	// not end (a cancel Coolify refused, or whose answer was lost) before it gives up on it
	// (default DefaultCancelTimeout): nothing is written to the application meanwhile, and a
	// deployment still queued or in progress then fails the run, naming it.
	CancelTimeout time.Duration `koanf:"cancel_timeout"`
	// Wave is the Phase-2 wave the service deploys in (0 or more, default 0); wave n+1 starts
	// when every service of wave n is deployed. A loaded pipeline holds the effective wave:
	// for a service with After, one more than the latest wave After names, unless the file
	// names a later one.
	Wave int `koanf:"wave"`
	// After names services (by Name) that must be deployed before this one: it deploys in a
	// later wave than each of them. Unknown names, cycles and a Wave that is not later are
	// refused at load.
	After []string `koanf:"after"`
}

// DefaultMaxBuildAhead is Pipeline.MaxBuildAhead when the file names none: far more than
// the builds a CI counter (a GitHub run_number, a GitLab iid, a Jenkins BUILD_NUMBER) moves
// between two deploys.
const DefaultMaxBuildAhead = 10_000

// DefaultDeployTimeout is Service.DeployTimeout when the file names none.
const DefaultDeployTimeout = 10 * time.Minute

// DefaultCancelTimeout is Service.CancelTimeout when the file names none.
const DefaultCancelTimeout = 2 * time.Minute

// EnvVar is one environment variable to sync. Exactly one of Value and Secret is set (an
// explicitly empty value: `value: ""`).
//
// The flags and the comment are pointers: nil means the entry does not mention it. For a
// variable that exists already, what the entry leaves out keeps its current value on Coolify
// (the engine sends the current one, because Coolify's PATCH resets what is omitted); a new
// variable gets Coolify's defaults for what is left out (is_buildtime and is_runtime true, the
// other flags false, no comment). Services take no is_buildtime/is_runtime.
type EnvVar struct {
	// Key matches EnvKeyPattern.
	Key string `koanf:"key"`
	// Value is a literal. It may hold trigger placeholders, and Coolify's own {{...}} shared
	// variable references, which pass through untouched (those of the file; a trigger value
	// may make one only with AllowSharedRefsFromTrigger). Held as a Secret: env values are
	// never logged.
	Value Secret `koanf:"value"`
	// Secret, if set, says where the value comes from at run time.
	Secret *SecretRef `koanf:"secret"`

	IsBuildtime *bool `koanf:"is_buildtime"`
	IsRuntime   *bool `koanf:"is_runtime"`
	IsLiteral   *bool `koanf:"is_literal"`
	IsMultiline *bool `koanf:"is_multiline"`
	IsShownOnce *bool `koanf:"is_shown_once"`
	// Comment is Coolify's env comment (at most 256 characters); `comment: ""` clears it.
	Comment *string `koanf:"comment"`
	// AllowSharedRefsFromTrigger lets a trigger value reach Coolify, in this variable, as a
	// shared-variable reference ({{team.KEY}}, {{project.KEY}}, {{environment.KEY}}), which
	// Coolify replaces by the shared variable when it builds. Without it Resolve refuses such a
	// trigger (a 422 naming the trigger's field): whoever holds the trigger token could
	// otherwise copy any shared variable, a team's secrets included, into this one. Not sent
	// to Coolify.
	AllowSharedRefsFromTrigger bool `koanf:"allow_shared_refs_from_trigger"`
}

// SecretRef points at one secret: a key in a source named under Pipeline.Secrets, or in the
// daemon's environment when Source is EnvSource.
type SecretRef struct {
	Source string `koanf:"source"`
	Key    string `koanf:"key"`
}

// Health is the check run after a deployment ends. Both parts are optional; an empty Health
// checks nothing beyond the deployment's own status.
type Health struct {
	// CoolifyStatus is the status the resource must reach: "running:healthy" matches exactly,
	// "running" matches "running" and any "running:<health>". Empty: don't check.
	CoolifyStatus string `koanf:"coolify_status"`
	// StatusTimeout is how long, after the deployment finished, Coolify's status may take to
	// match CoolifyStatus before the service counts as unhealthy (default: the HTTP check's
	// timeout when there is one, else DefaultHealthTimeout).
	StatusTimeout time.Duration `koanf:"status_timeout"`
	// HTTP, if set, is polled until it answers ExpectStatus or its timeout passes.
	HTTP *HTTPCheck `koanf:"http"`
	// Version, if set, is polled until the service shows the version the run deployed:
	// Coolify can report a deployment finished while the old container keeps serving.
	Version *VersionCheck `koanf:"version"`
}

// VersionCheck is a version probe: after the deployment and the other checks, a GET of URL
// must show Expect, read from a JSON field of the body (Field, a dotted path), a response
// header (Header), or the whole body (neither; surrounding white space trimmed), before
// Timeout passes.
type VersionCheck struct {
	// URL takes trigger placeholders, under the same rules as health.http.url.
	URL    string `koanf:"url"`
	Field  string `koanf:"field"`
	Header string `koanf:"header"`
	// Expect is the version to see (trigger placeholders; default "${trigger.image_tag}").
	Expect string `koanf:"expect"`
	// Timeout is the probe's deadline (default DefaultHealthTimeout).
	Timeout time.Duration `koanf:"timeout"`
}

// StatusOK reports whether a Coolify status string (e.g. "running:unknown") satisfies
// CoolifyStatus. An empty CoolifyStatus accepts anything.
func (h Health) StatusOK(status string) bool {
	want := h.CoolifyStatus
	if want == "" || status == want {
		return true
	}
	return !strings.Contains(want, ":") && strings.HasPrefix(status, want+":")
}

// HTTPCheck is an HTTP health check.
type HTTPCheck struct {
	// URL takes trigger placeholders.
	URL string `koanf:"url"`
	// ExpectStatus defaults to 200.
	ExpectStatus int `koanf:"expect_status"`
	// Timeout is the whole check's deadline (default DefaultHealthTimeout).
	Timeout time.Duration `koanf:"timeout"`
}

// DefaultHealthTimeout is HTTPCheck.Timeout when the file names none.
const DefaultHealthTimeout = 30 * time.Second

// MobileWhen says when a mobile step runs.
type MobileWhen string

// Mobile step timings.
const (
	WhenAfterPhase2  MobileWhen = "after_phase2" // default: after every service is deployed
	WhenBeforePhase1 MobileWhen = "before_phase1"
	// WhenAfterVerified runs the step once the analysis after the last wave succeeded: the
	// mobile app hears of the new version only once its services are proven. It needs an
	// analysis block.
	WhenAfterVerified MobileWhen = "after_verified"
)

// MobileStep is a read-modify-write of one Flagsmith feature value (a JSON document such as
// version_state) under the lock key "mobile:flagsmith:<feature>".
type MobileStep struct {
	// Name is the step name, unique among the pipeline's mobile steps; defaults to Feature.
	Name      string    `koanf:"name"`
	Flagsmith Flagsmith `koanf:"flagsmith"`
	// Feature is the Flagsmith feature name; it matches FeatureNamePattern.
	Feature string `koanf:"feature"`
	// When defaults to WhenAfterPhase2 (or WhenBeforePhase1, WhenAfterVerified).
	When MobileWhen `koanf:"when"`
	// Set maps dotted paths inside the feature's JSON document (e.g. "ios.latest_version") to
	// the values to write there. Values take trigger placeholders.
	Set map[string]string `koanf:"set"`
	// NeverDowngrade refuses to replace a value with a lower version (dotted numeric
	// comparison) and leaves it as it is.
	NeverDowngrade bool `koanf:"never_downgrade"`
}

// Flagsmith names a Flagsmith project environment.
type Flagsmith struct {
	URL string `koanf:"url"` // e.g. https://api.flagsmith.com
	// APIKey is an organisation (Master) API key, sent as "Authorization: Api-Key <key>".
	APIKey Secret `koanf:"api_key"`
	// Environment is the environment's client-side API key used in Admin API paths.
	Environment string `koanf:"environment"`
}

// OnFrozen says what a run does when it meets a lock frozen by an operator.
type OnFrozen string

// Frozen-lock policies.
const (
	OnFrozenWait OnFrozen = "wait" // default: wait within the lock budget
	OnFrozenFail OnFrozen = "fail" // fail at once (locks.Request.FailOnFrozen)
)

// LockPolicy holds the pipeline's lease TTL and acquire budgets.
type LockPolicy struct {
	// TTL is every lease's time to live (default 10m); the heartbeat renews at TTL/3.
	TTL time.Duration `koanf:"ttl"`
	// Phase is the budget for coolify:phase1 and coolify:phase2 (default 60s, 3 retries).
	Phase Budget `koanf:"phase"`
	// Service is the budget for coolify:<uuid> and mobile keys (default 30s, 2 retries).
	Service  Budget   `koanf:"service"`
	OnFrozen OnFrozen `koanf:"on_frozen"`
}

// Budget bounds an Acquire: 1+MaxRetries attempts of at most Timeout each, with Backoff[i]
// slept after attempt i (the last entry repeats). It converts field for field to
// locks.Budget.
type Budget struct {
	Timeout    time.Duration   `koanf:"timeout"`
	MaxRetries int             `koanf:"max_retries"`
	Backoff    []time.Duration `koanf:"backoff"`
}

// Defaults of LockPolicy, equal to the locks package's defaults.
var (
	DefaultLockTTL       = 10 * time.Minute
	DefaultPhaseBudget   = Budget{Timeout: 60 * time.Second, MaxRetries: 3, Backoff: DefaultBackoff()}
	DefaultServiceBudget = Budget{Timeout: 30 * time.Second, MaxRetries: 2, Backoff: DefaultBackoff()}
)

// DefaultBackoff returns a fresh copy of the default pauses between attempts (1s, 2s, 4s).
func DefaultBackoff() []time.Duration {
	return []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
}

// OnFailure says what a failure after Phase 1 (in Phase 2, or in a mobile step after it)
// does. A failure in Phase 1 always restores what Phase 1 wrote.
type OnFailure string

// Failure policies.
const (
	// OnFailureRollback returns the whole release: every service this run changed goes back
	// to what it had before the run, in reverse wave order (deployed and failed services are
	// restored and their previous config redeployed; services synced but not deployed are
	// restored), and the Flagsmith keys the run changed are put back (those a person changed
	// since are kept). No mixed release.
	OnFailureRollback OnFailure = "rollback"
	// OnFailureRollbackFailed restores and redeploys only the failed services, and restores
	// the services synced but not deployed; the services this run deployed keep its config,
	// and Flagsmith is left as it is (a mixed release, asked for by name).
	OnFailureRollbackFailed OnFailure = "rollback-failed"
	// OnFailureHalt stops and leaves everything as it is, with a report.
	OnFailureHalt OnFailure = "halt"
)

// Concurrency says how runs of one pipeline queue.
type Concurrency string

// Concurrency policies.
const (
	// ConcurrencyQueue runs them in FIFO order.
	ConcurrencyQueue Concurrency = "queue"
	// ConcurrencySupersede lets a newer pending run (not yet in Phase 1) replace the older
	// pending ones, on every daemon sharing the store; a run already in a phase is never
	// replaced. "Newer" follows the pipeline's Order.
	ConcurrencySupersede Concurrency = "supersede"
)

// LockKey is the service's lock key.
func (s Service) LockKey() string { return orchestrator.ServiceLockKey(s.UUID) }

// LockKey is the mobile step's lock key.
func (m MobileStep) LockKey() string { return orchestrator.MobileLockKey(m.Feature) }

// LockKeys returns every key a run of the pipeline may take: the phase keys, one per service
// and one per mobile feature, without duplicates, in that order.
func (p *Pipeline) LockKeys() []string {
	keys := []string{orchestrator.Phase1Key, orchestrator.Phase2Key}
	seen := map[string]bool{orchestrator.Phase1Key: true, orchestrator.Phase2Key: true}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, s := range p.Services {
		add(s.LockKey())
	}
	for _, m := range p.Mobile {
		add(m.LockKey())
	}
	return keys
}

// Service returns the service with the given UUID, or nil.
func (p *Pipeline) Service(uuid string) *Service {
	for i := range p.Services {
		if p.Services[i].UUID == uuid {
			return &p.Services[i]
		}
	}
	return nil
}
