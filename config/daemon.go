package config

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
)

// Daemon is the daemon's configuration: where it listens, which backend holds locks and runs,
// the API tokens, the CI webhooks and where pipelines live. LoadDaemon builds it from defaults,
// a YAML file, ORCH_* environment variables and command-line flags, in that order of
// precedence (later wins).
type Daemon struct {
	// Listen is the HTTP address (default DefaultListen).
	Listen string `koanf:"listen"`
	// RedisURL selects the Redis backend when set: redis://, rediss:// or unix:// for one
	// server, redis://sentinel:port/db?master_name=NAME[&addr=…] for Sentinel,
	// redis+cluster://host:port[?addr=…] for a Cluster (a password may be in it, hence a
	// Secret). Empty means the embedded SQLite backend in StateDir.
	RedisURL Secret `koanf:"redis_url"`
	// Locks are the daemon-wide settings of the lock backend.
	Locks DaemonLocks `koanf:"locks"`
	// StateDir holds the embedded backend's database and other local state (default
	// DefaultStateDir).
	StateDir string `koanf:"state_dir"`
	// PipelinesDir is the directory of pipeline files (default DefaultPipelinesDir).
	PipelinesDir string `koanf:"pipelines_dir"`
	Tokens       Tokens `koanf:"tokens"`
	// OIDC, when set, lets people log in to the dashboard through an OpenID provider.
	OIDC *OIDC `koanf:"oidc"`
	// PublicRead lets read endpoints and the dashboard answer without a token.
	PublicRead bool `koanf:"public_read"`
	// RateLimits apply per client to the trigger and webhook routes.
	RateLimits RateLimits `koanf:"rate_limits"`
	// Coolify holds what applies to every Coolify instance the pipelines name.
	Coolify  CoolifySettings `koanf:"coolify"`
	Webhooks Webhooks        `koanf:"webhooks"`
	Log      Log             `koanf:"log"`
	// ShutdownGrace is how long SIGTERM waits for the current steps (default 30s).
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// LivenessTTL is the TTL of the daemon's liveness lease (DaemonLiveKey): when it expires
	// (the daemon died), another daemon sharing the store takes over its runs (default 15s).
	LivenessTTL time.Duration `koanf:"liveness_ttl"`
	// MaxBodyBytes caps request bodies (default 1 MiB).
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// Connections caps the TCP connections the daemon holds open, per client address and in
	// total; one more is answered 503 and closed at once.
	Connections Connections `koanf:"connections"`
	// TrustedProxies are the addresses (IPs or CIDRs) of reverse proxies whose
	// X-Forwarded-For names the real client. From any other peer the header is ignored.
	TrustedProxies []string `koanf:"trusted_proxies"`
	// AllowedHosts are the host names (without port) a request's Host header may name;
	// others are answered 421. Empty means DefaultAllowedHosts(Listen). "*" allows any.
	AllowedHosts []string `koanf:"allowed_hosts"`
	// PublicURL is the dashboard's address as people reach it (e.g.
	// https://deploy.example.com); notifications link to runs under it. Default: derived
	// from Listen.
	PublicURL string `koanf:"public_url"`
	// Notify is where notifications go for pipelines without their own notify block, and
	// for freezes.
	Notify *Notify `koanf:"notify"`
	// Environments are the deploy windows and approvals pipelines share by naming one.
	Environments map[string]Environment `koanf:"environments"`
	// Retention bounds the run history the store keeps.
	Retention Retention `koanf:"retention"`

	// File is the config file it was loaded from ("" when none).
	File string `koanf:"-"`
	// fromEnv holds the field paths whose values came from the environment, which no
	// problem shows (CheckRules).
	fromEnv map[string]bool
}

// Daemon defaults.
const (
	DefaultListen        = "127.0.0.1:8080"
	DefaultStateDir      = "./.orchestrator"
	DefaultPipelinesDir  = "./pipelines"
	DefaultShutdownGrace = 30 * time.Second
	DefaultLivenessTTL   = 15 * time.Second
	DefaultMaxBodyBytes  = 1 << 20
	// DefaultMaxConns and DefaultMaxConnsPerClient are Connections' defaults.
	DefaultMaxConns          = 1024
	DefaultMaxConnsPerClient = 64
)

// DaemonLocks are the daemon-wide settings of the lock backend (a pipeline's own lock
// budgets are its locks: section).
type DaemonLocks struct {
	// MinReplicas (Redis only; 0, the default, turns it off) makes a grant, a renewal and a
	// fence increment count only once WAIT has confirmed that this many replicas of the
	// master have it. A grant not confirmed within ReplicaTimeout is released and retried
	// within the acquire budget; a renewal not confirmed counts as a failed renewal. It also
	// makes the run store's writes callers rely on (a run's creation, its updates, service
	// marks) count once confirmed; on a Sentinel URL they wait for every replica the
	// sentinels list alive (internal/redisack), so a forced failover does not lose them.
	MinReplicas int `koanf:"min_replicas"`
	// ReplicaTimeout bounds each WAIT for MinReplicas (default DefaultReplicaTimeout).
	ReplicaTimeout time.Duration `koanf:"replica_timeout"`
}

// DefaultReplicaTimeout is DaemonLocks.ReplicaTimeout's default.
const DefaultReplicaTimeout = time.Second

// Retention says how much run history the store keeps: an ended run goes, with its events
// and idempotency key, once it is older than MaxAge or more than MaxRuns runs are newer; a
// run that has not ended is always kept. The daemon prunes every Interval (and at start).
type Retention struct {
	// MaxAge is the age limit (0: none; default DefaultRetentionMaxAge).
	MaxAge time.Duration `koanf:"max_age"`
	// MaxRuns is the count limit (0: none; default DefaultRetentionMaxRuns).
	MaxRuns int `koanf:"max_runs"`
	// Interval is the time between two prunes (default DefaultRetentionInterval).
	Interval time.Duration `koanf:"interval"`
}

// Retention defaults: 90 days and 10 000 runs, checked hourly.
const (
	DefaultRetentionMaxAge   = 90 * 24 * time.Hour
	DefaultRetentionMaxRuns  = 10_000
	DefaultRetentionInterval = time.Hour
)

// Connections caps open TCP connections. A trusted proxy is held only to Max.
type Connections struct {
	Max       int `koanf:"max"`
	PerClient int `koanf:"per_client"`
}

// AllowedHostsOr returns d.AllowedHosts, or DefaultAllowedHosts(d.Listen) when it is empty.
func (d *Daemon) AllowedHostsOr() []string {
	if len(d.AllowedHosts) > 0 {
		return d.AllowedHosts
	}
	return DefaultAllowedHosts(d.Listen)
}

// DefaultAllowedHosts is localhost, 127.0.0.1 and ::1, plus the listen address's host when
// it names one (not 0.0.0.0, :: or empty): a daemon listening on all interfaces and reached
// by another name must list that name in allowed_hosts.
func DefaultAllowedHosts(listen string) []string {
	out := []string{"localhost", "127.0.0.1", "::1"}
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		return out
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return out
	}
	if !slices.Contains(out, host) {
		out = append(out, host)
	}
	return out
}

// ParseTrustedProxies parses trusted_proxies: each entry an IP or a CIDR.
func ParseTrustedProxies(entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, e := range entries {
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
			continue
		}
		ip, err := netip.ParseAddr(e)
		if err != nil {
			return nil, fmt.Errorf("trusted_proxies[%d]: %q is neither an IP address nor a CIDR (e.g. 10.0.0.0/8)", i, e)
		}
		ip = ip.Unmap()
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out, nil
}

// Backend names the lock and run-store backend a Daemon selects.
type Backend string

// Backends.
const (
	BackendRedis    Backend = "redis"
	BackendEmbedded Backend = "sqlite"
)

// Backend returns BackendRedis when RedisURL is set, else BackendEmbedded.
func (d *Daemon) Backend() Backend {
	if d.RedisURL.IsSet() {
		return BackendRedis
	}
	return BackendEmbedded
}

// Tokens are the bearer tokens of the HTTP API. An empty token disables what it guards
// (no trigger without a deployer token, no admin action without an admin token). When set,
// each is at least MinTokenLength characters, of at least MinTokenDistinct distinct ones,
// and no placeholder the repository ships.
//
// Named tokens each carry a name (the subject recorded in run records, cancels and the
// audit log) and one Role. The three shared tokens of earlier versions (trigger, admin,
// read, set also by ORCH_TRIGGER_TOKEN, ORCH_ADMIN_TOKEN and ORCH_READ_TOKEN) keep working:
// each is a named token whose name is its key and whose role is LegacyRoles' (All).
type Tokens struct {
	Trigger Secret `koanf:"trigger"` // the token named "trigger", role deployer
	Admin   Secret `koanf:"admin"`   // the token named "admin", role admin
	Read    Secret `koanf:"read"`    // the token named "read", role viewer
	// Named are the named tokens, each with its own name and role.
	Named []NamedToken `koanf:"named"`
}

// NamedToken is one API token: who presents it (Name) and what it may do (Role).
type NamedToken struct {
	// Name is the subject: lowercase letters, digits, '-' and '_', at most 64 characters,
	// unique among the tokens.
	Name  string `koanf:"name"`
	Role  Role   `koanf:"role"`
	Token Secret `koanf:"token"`
}

// Role is what a subject may do.
type Role string

// Roles, each with the rights of those before it except as said.
const (
	// RoleViewer reads: runs, locks, services, plans' results, the dashboard, the audit log.
	RoleViewer Role = "viewer"
	// RoleDeployer reads, triggers, plans and cancels runs.
	RoleDeployer Role = "deployer"
	// RoleApprover reads and approves or rejects runs that wait for approval; it does not
	// trigger.
	RoleApprover Role = "approver"
	// RoleAdmin may do everything: also force-release, freeze and unfreeze locks.
	RoleAdmin Role = "admin"
)

// Roles lists every role, from the least to the most.
var Roles = []Role{RoleViewer, RoleDeployer, RoleApprover, RoleAdmin}

// LegacyRoles maps the shared tokens' keys (tokens.trigger, tokens.admin, tokens.read) to
// their roles.
var LegacyRoles = map[string]Role{"trigger": RoleDeployer, "admin": RoleAdmin, "read": RoleViewer}

// All returns every configured token: the shared ones (named by their key) first, in the
// order read, trigger, admin, then Named in order. Unset shared tokens are left out.
func (t Tokens) All() []NamedToken {
	var out []NamedToken
	for _, c := range []struct {
		name string
		s    Secret
	}{{"read", t.Read}, {"trigger", t.Trigger}, {"admin", t.Admin}} {
		if c.s.IsSet() {
			out = append(out, NamedToken{Name: c.name, Role: LegacyRoles[c.name], Token: c.s})
		}
	}
	for _, n := range t.Named {
		if n.Token.IsSet() {
			out = append(out, n)
		}
	}
	return out
}

// None reports whether no API token is configured: every route that needs one is closed.
func (t Tokens) None() bool { return len(t.All()) == 0 }

// MinTokenLength is the shortest API token or webhook secret accepted.
const MinTokenLength = 16

// MinTokenDistinct is the fewest distinct characters an API token or webhook secret may
// have: sixteen a's are long enough and no secret. A random hex token of 16 characters has
// about 10.
const MinTokenDistinct = 8

// placeholderMarks mark the placeholder values the repository ships (.env.example's
// change-me-…): whoever read the repository knows them.
var placeholderMarks = []string{"change-me", "changeme", "change_me"}

// RateLimits are the per-client token buckets of the trigger and webhook routes.
type RateLimits struct {
	Trigger Rate `koanf:"trigger"`
	Webhook Rate `koanf:"webhook"`
}

// Rate is a token bucket: PerSecond requests per second on average, bursts of Burst.
// PerSecond 0 turns the limit off.
type Rate struct {
	PerSecond float64 `koanf:"per_second"`
	Burst     int     `koanf:"burst"`
}

// Default rate limits.
var (
	DefaultTriggerRate = Rate{PerSecond: 5, Burst: 20}
	DefaultWebhookRate = Rate{PerSecond: 10, Burst: 50}
)

// CoolifySettings apply to every Coolify instance the pipelines name.
type CoolifySettings struct {
	// RateLimit is the instance's API throttle, Coolify's API_RATE_LIMIT: requests per minute
	// per Coolify user (default DefaultCoolifyRateLimit). Calls to an instance wait for this
	// budget, kept per URL and token (Coolify keys it by the token's user, which no endpoint
	// tells: give tokens of one user each their share), shared by every pipeline of the daemon
	// and, on the Redis backend, by every daemon on that Redis, instead of running into 429
	// answers. 0 turns pacing off; otherwise at least MinCoolifyRateLimit.
	RateLimit int `koanf:"rate_limit"`
}

// Coolify rate limit bounds.
const (
	DefaultCoolifyRateLimit = 200
	// MinCoolifyRateLimit is internal/pacing.MinLimit: below it the budget has no room.
	MinCoolifyRateLimit = 10
)

// Log configures the daemon's slog handler.
type Log struct {
	Level  string `koanf:"level"`  // debug | info (default) | warn | error
	Format string `koanf:"format"` // auto (default: JSON unless stderr is a terminal) | json | text
}

// Provider names a webhook provider.
type Provider string

// Webhook providers.
const (
	ProviderGitHub  Provider = "github"
	ProviderGitLab  Provider = "gitlab"
	ProviderGeneric Provider = "generic"
)

// Webhooks holds one Webhook per provider; a nil one refuses that provider's deliveries.
type Webhooks struct {
	GitHub  *Webhook `koanf:"github"`
	GitLab  *Webhook `koanf:"gitlab"`
	Generic *Webhook `koanf:"generic"`
}

// For returns the provider's webhook config, or nil when it is not configured.
func (w Webhooks) For(p Provider) *Webhook {
	switch p {
	case ProviderGitHub:
		return w.GitHub
	case ProviderGitLab:
		return w.GitLab
	case ProviderGeneric:
		return w.Generic
	}
	return nil
}

// Webhook is one provider's verification secret and mapping rules.
type Webhook struct {
	// Secret is the HMAC-SHA256 key (github: X-Hub-Signature-256; generic: X-Signature-256)
	// or the shared token (gitlab: X-Gitlab-Token). Empty refuses every delivery.
	Secret Secret `koanf:"secret"`
	// Rules are tried in order; the first that matches an event decides the run.
	Rules []WebhookRule `koanf:"rules"`
}

// WebhookRule maps CI events to a pipeline run. Empty match fields match anything; the others
// are glob patterns (path.Match syntax, e.g. "release/*").
type WebhookRule struct {
	Repository string `koanf:"repository"` // "owner/name" (GitHub) or "group/project" path (GitLab)
	Branch     string `koanf:"branch"`     // branch name, without refs/heads/
	// Tag is a glob over a tag's name ("v*"): a rule with it matches only deliveries about a
	// tag (a GitLab tag pipeline), whose ref can then feed app_version.
	Tag      string `koanf:"tag"`
	Workflow string `koanf:"workflow"` // GitHub workflow name, GitLab pipeline source/name
	Event    string `koanf:"event"`    // e.g. workflow_run, push, pipeline
	// Sources are what may have started the CI run, exactly (not patterns): for GitHub the
	// workflow_run's event (default push), for GitLab the pipeline's source (default push,
	// web, schedule, api, trigger, pipeline — not parent_pipeline, a child pipeline, whose
	// parent's own hook follows; merge_request_event is never accepted). A push delivery's source is push. Generic rules take none. See DefaultSources.
	Sources []string `koanf:"sources"`

	// Pipeline is the pipeline to run.
	Pipeline string `koanf:"pipeline"`
	// Trigger holds the run's parameters. Each value may be fixed text or use
	// ${payload.a.b} references into the delivery's JSON body, filled by TriggerFor.
	Trigger TriggerTemplate `koanf:"trigger"`
	// Rollback makes the runs this rule starts rollbacks: they deploy their build even when a
	// newer one is on the services (the stale-build guard lets them pass), recorded as a
	// rollback by the webhook delivery, in the run and the audit.
	Rollback bool `koanf:"rollback"`
}

// TriggerTemplate is a Trigger whose values may hold ${payload.…} references.
type TriggerTemplate struct {
	Build      string            `koanf:"build"`
	ImageTag   string            `koanf:"image_tag"`
	Commit     string            `koanf:"commit"`
	AppVersion string            `koanf:"app_version"`
	Params     map[string]string `koanf:"params"`
}
