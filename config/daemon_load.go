package config

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
)

// envOverrides maps each ORCH_* environment variable to the config key it sets.
var envOverrides = map[string]string{
	"ORCH_LISTEN":                 "listen",
	"ORCH_REDIS_URL":              "redis_url",
	"ORCH_STATE_DIR":              "state_dir",
	"ORCH_PIPELINES_DIR":          "pipelines_dir",
	"ORCH_TRIGGER_TOKEN":          "tokens.trigger",
	"ORCH_ADMIN_TOKEN":            "tokens.admin",
	"ORCH_READ_TOKEN":             "tokens.read",
	"ORCH_PUBLIC_READ":            "public_read",
	"ORCH_GITHUB_WEBHOOK_SECRET":  "webhooks.github.secret",
	"ORCH_GITLAB_WEBHOOK_TOKEN":   "webhooks.gitlab.secret",
	"ORCH_GENERIC_WEBHOOK_SECRET": "webhooks.generic.secret",
	"ORCH_LOG_LEVEL":              "log.level",
	"ORCH_LOG_FORMAT":             "log.format",
	"ORCH_SHUTDOWN_GRACE":         "shutdown_grace",
	"ORCH_LIVENESS_TTL":           "liveness_ttl",
	"ORCH_MAX_BODY_BYTES":         "max_body_bytes",
	"ORCH_LOCKS_MIN_REPLICAS":     "locks.min_replicas",
	"ORCH_LOCKS_REPLICA_TIMEOUT":  "locks.replica_timeout",
	"ORCH_COOLIFY_RATE_LIMIT":     "coolify.rate_limit",
}

// WebhookSecretEnv is the environment variable that sets provider's webhook secret
// (webhooks.<provider>.secret), e.g. ORCH_GITLAB_WEBHOOK_TOKEN.
func WebhookSecretEnv(p Provider) string {
	for env, key := range envOverrides {
		if key == "webhooks."+string(p)+".secret" {
			return env
		}
	}
	return ""
}

// EnvOverrides returns the ORCH_* environment variables LoadDaemon reads, each mapped to the
// config key it sets (dotted, e.g. ORCH_ADMIN_TOKEN → tokens.admin). A set, non-empty
// variable wins over the config file; flags win over both.
func EnvOverrides() map[string]string {
	out := make(map[string]string, len(envOverrides))
	for k, v := range envOverrides {
		out[k] = v
	}
	return out
}

// EnvFor returns the ORCH_* variable that sets the config key (dotted, e.g. tokens.admin →
// ORCH_ADMIN_TOKEN), or "" when none does.
func EnvFor(key string) string {
	for k, v := range envOverrides {
		if v == key {
			return k
		}
	}
	return ""
}

// daemonFlags are the flags AddFlags registers: name → config key and usage.
var daemonFlags = []struct{ name, key, usage string }{
	{"listen", "listen", "HTTP listen address (default " + DefaultListen + ")"},
	{"redis-url", "redis_url", "Redis URL; selects the Redis backend (default: embedded SQLite in the state dir)"},
	{"state-dir", "state_dir", "directory for the embedded backend and local state (default " + DefaultStateDir + ")"},
	{"pipelines-dir", "pipelines_dir", "directory of pipeline files (default " + DefaultPipelinesDir + ")"},
	{"log-level", "log.level", "log level: debug, info, warn or error (default info)"},
	{"log-format", "log.format", "log format: auto, json or text (default auto)"},
}

// AddFlags registers the daemon config flags LoadDaemon reads from fs: --listen,
// --redis-url, --state-dir, --pipelines-dir, --log-level, --log-format, and --public-read.
// Their defaults are empty: LoadDaemon applies a flag only when it was set on the command
// line.
func AddFlags(fs *pflag.FlagSet) {
	for _, f := range daemonFlags {
		fs.String(f.name, "", f.usage)
	}
	fs.Bool("public-read", false, "serve read endpoints and the dashboard without a token")
}

// AddFlagSubset registers only the named daemon config flags (see AddFlags), for commands
// that read part of the daemon config: `locks` and `runs` need only --redis-url and
// --state-dir, so their --help lists only those.
func AddFlagSubset(fs *pflag.FlagSet, names ...string) {
	for _, f := range daemonFlags {
		if slices.Contains(names, f.name) {
			fs.String(f.name, "", f.usage)
		}
	}
}

// flagKey returns the config key a flag sets, or "" for flags that are not config.
func flagKey(name string) string {
	if name == "public-read" {
		return "public_read"
	}
	for _, f := range daemonFlags {
		if f.name == name {
			return f.key
		}
	}
	return ""
}

// daemonDefaults is the bottom layer of the daemon config.
func daemonDefaults() map[string]any {
	return map[string]any{
		"listen":        DefaultListen,
		"state_dir":     DefaultStateDir,
		"pipelines_dir": DefaultPipelinesDir,
		"public_read":   false,
		"rate_limits": map[string]any{
			"trigger": map[string]any{"per_second": DefaultTriggerRate.PerSecond, "burst": DefaultTriggerRate.Burst},
			"webhook": map[string]any{"per_second": DefaultWebhookRate.PerSecond, "burst": DefaultWebhookRate.Burst},
		},
		"coolify":        map[string]any{"rate_limit": DefaultCoolifyRateLimit},
		"log":            map[string]any{"level": "info", "format": "auto"},
		"shutdown_grace": DefaultShutdownGrace.String(),
		"liveness_ttl":   DefaultLivenessTTL.String(),
		"locks":          map[string]any{"min_replicas": 0, "replica_timeout": DefaultReplicaTimeout.String()},
		"max_body_bytes": int64(DefaultMaxBodyBytes),
		"connections":    map[string]any{"max": DefaultMaxConns, "per_client": DefaultMaxConnsPerClient},
		"retention": map[string]any{"max_age": DefaultRetentionMaxAge.String(), "max_runs": DefaultRetentionMaxRuns,
			"interval": DefaultRetentionInterval.String()},
	}
}

// LoadDaemon builds the daemon config from, in rising precedence: defaults, the YAML file at
// path (skipped when path is ""), the ORCH_* variables getenv returns (see EnvOverrides) and
// the flags of fs that were set on the command line (see AddFlags; fs may be nil). ${NAME}
// references in the file are resolved with getenv. Relative state_dir and pipelines_dir
// values from the file are taken relative to the file's directory; those from defaults,
// environment or flags relative to the working directory.
//
// Errors: Problems listing everything wrong, each naming the file (or the ORCH_* variable
// or flag that set the field), the field path and what is wrong.
func LoadDaemon(path string, getenv func(string) string, fs *pflag.FlagSet) (*Daemon, error) {
	if path == "" {
		return loadDaemon(source{}, getenv, fs)
	}
	return loadDaemon(readSource(path), getenv, fs)
}

// loadDaemon is LoadDaemon on the file already read and parsed (src.path "": no file).
func loadDaemon(src source, getenv func(string) string, fs *pflag.FlagSet) (*Daemon, error) {
	path := src.path
	c := &problems{file: path}
	ko := koanf.New(".")
	if err := ko.Load(confmap.Provider(daemonDefaults(), "."), nil); err != nil {
		c.add("", "load defaults: %v", err)
		return nil, c.list
	}
	fromFile := map[string]bool{}
	fromEnv := map[string]bool{}
	// unexpanded are the problems of values whose ${NAME} could not be filled: those values
	// are not checked again (an unset ${ADMIN_TOKEN} is not also "too short").
	var unexpanded Problems
	if path != "" {
		raw := src.raw
		if raw == nil {
			return nil, src.problems
		}
		x := &loadExpander{getenv: getenv, runtime: daemonRuntime, fromEnv: fromEnv}
		walkStrings(raw, "", c, x.expand)
		unexpanded = slices.Clone(c.list)
		checkKeys(raw, reflect.TypeFor[Daemon](), "", c)
		for _, k := range []string{"state_dir", "pipelines_dir"} {
			_, fromFile[k] = raw[k]
		}
		if err := ko.Load(confmap.Provider(raw, ""), nil); err != nil {
			c.add("", "load: %v", err)
			return nil, c.list
		}
	}

	origin, err := loadOverrides(ko, getenv, fs, fromFile, fromEnv)
	if err != nil {
		c.add("", "%v", err)
		return nil, c.list
	}

	var d Daemon
	decoded := &problems{file: path}
	decode(ko, &d, decoded)
	d.File, d.fromEnv = path, fromEnv
	if path != "" {
		dir := filepath.Dir(path)
		if fromFile["state_dir"] && d.StateDir != "" && !filepath.IsAbs(d.StateDir) {
			d.StateDir = filepath.Join(dir, d.StateDir)
		}
		if fromFile["pipelines_dir"] && d.PipelinesDir != "" && !filepath.IsAbs(d.PipelinesDir) {
			d.PipelinesDir = filepath.Join(dir, d.PipelinesDir)
		}
	}

	applyNotifyDefaults(d.Notify)
	v := &validator{problems: &problems{file: path}, fromEnv: fromEnv}
	v.daemon(&d)
	c.list = append(c.list, decoded.list...)
	c.list = append(c.list, withoutShadowed(v.list, append(decoded.list, unexpanded...))...)
	sortByField(c.list, reflect.TypeFor[Daemon]())
	for i := range c.list {
		if o, ok := origin[c.list[i].Field]; ok {
			c.list[i].File = o
		}
	}
	if len(c.list) > 0 {
		return nil, c.list
	}
	return &d, nil
}

// loadOverrides loads the ORCH_* variables and then the flags set over what ko holds, noting
// in fromFile and fromEnv where each key came from, and returns, per key, the variable or flag
// that set it last (origin).
func loadOverrides(ko *koanf.Koanf, getenv func(string) string, fs *pflag.FlagSet, fromFile, fromEnv map[string]bool) (map[string]string, error) {
	origin := map[string]string{}
	environ := func() []string {
		var out []string
		for _, name := range sortedKeys(envOverrides) {
			if v := getenv(name); v != "" {
				out = append(out, name+"="+v)
			}
		}
		return out
	}
	err := ko.Load(env.Provider(".", env.Opt{
		EnvironFunc: environ,
		TransformFunc: func(k, v string) (string, any) {
			key := envOverrides[k]
			origin[key] = k
			fromFile[key] = false
			fromEnv[key] = true
			return key, v
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("load environment: %w", err)
	}
	if fs != nil {
		err := ko.Load(posflag.ProviderWithValue(fs, ".", ko, func(name, value string) (string, any) {
			key := flagKey(name)
			if key == "" {
				return "", nil
			}
			if f := fs.Lookup(name); f != nil && f.Changed {
				origin[key] = "--" + name
				fromFile[key] = false
			}
			return key, value
		}), nil)
		if err != nil {
			return nil, fmt.Errorf("load flags: %w", err)
		}
	}

	return origin, nil
}

// Accepted log settings.
var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"auto", "json", "text"}
)

// redisSchemes are the redis_url schemes: standalone or Sentinel (redis, rediss, unix) and
// Cluster (redis+cluster, rediss+cluster).
var redisSchemes = []string{"redis", "rediss", "unix", "redis+cluster", "rediss+cluster"}

func (v *validator) daemon(d *Daemon) {
	if _, port, err := net.SplitHostPort(d.Listen); err != nil || !validPort(port) {
		v.add("listen", "%s: want host:port (e.g. 127.0.0.1:8080 or :8080)", v.show("listen", d.Listen))
	}
	if d.RedisURL.IsSet() {
		u, err := url.Parse(d.RedisURL.Reveal())
		switch {
		case err != nil:
			v.add("redis_url", "not a URL (want redis://[:password@]host:port/db, rediss://…, unix:///path, redis://sentinel:26379/0?master_name=NAME or redis+cluster://host:port)")
		case !slices.Contains(redisSchemes, u.Scheme):
			v.add("redis_url", "scheme must be one of %s", strings.Join(redisSchemes, ", "))
		case u.Scheme != "unix" && u.Host == "":
			v.add("redis_url", "has no host")
		case u.Scheme == "unix" && u.Path == "":
			v.add("redis_url", "has no socket path")
		}
	}
	switch {
	case d.Locks.MinReplicas < 0:
		v.add("locks.min_replicas", "must not be negative")
	case d.Locks.MinReplicas > 0 && !d.RedisURL.IsSet():
		v.add("locks.min_replicas", "needs the Redis backend (redis_url): the embedded backend has no replicas")
	}
	v.positive("locks.replica_timeout", d.Locks.ReplicaTimeout)
	v.required("state_dir", d.StateDir)
	v.required("pipelines_dir", d.PipelinesDir)

	v.tokens(d.Tokens)
	v.oidc(d.OIDC)
	v.environments(d.Environments)
	v.rate("rate_limits.trigger", d.RateLimits.Trigger)
	v.rate("rate_limits.webhook", d.RateLimits.Webhook)
	if r := d.Coolify.RateLimit; r != 0 && r < MinCoolifyRateLimit {
		v.add("coolify.rate_limit", "%d: want Coolify's API_RATE_LIMIT in requests per minute per user, at least %d (or 0 to turn pacing off)",
			r, MinCoolifyRateLimit)
	}

	if d.PublicURL != "" {
		if u := v.httpURL("public_url", d.PublicURL); u != nil && (u.RawQuery != "" || u.Fragment != "") {
			v.add("public_url", "must not have a query or fragment")
		}
	}
	v.notify("notify", d.Notify)

	for _, p := range []Provider{ProviderGitHub, ProviderGitLab, ProviderGeneric} {
		if w := d.Webhooks.For(p); w != nil {
			v.webhook(p, "webhooks."+string(p), w)
		}
	}

	if !slices.Contains(logLevels, d.Log.Level) {
		v.add("log.level", "%s is not one of: %s", v.show("log.level", d.Log.Level), strings.Join(logLevels, ", "))
	}
	if !slices.Contains(logFormats, d.Log.Format) {
		v.add("log.format", "%s is not one of: %s", v.show("log.format", d.Log.Format), strings.Join(logFormats, ", "))
	}
	v.positive("shutdown_grace", d.ShutdownGrace)
	v.positive("liveness_ttl", d.LivenessTTL)
	if d.MaxBodyBytes <= 0 {
		v.add("max_body_bytes", "must be positive")
	}
	// A check that depends on another value is made only when that value is valid: an
	// invalid connections.max is reported once, not again through per_client's bound.
	switch {
	case d.Connections.Max < 1:
		v.add("connections.max", "must be at least 1")
		if d.Connections.PerClient < 1 {
			v.add("connections.per_client", "must be at least 1")
		}
	case d.Connections.PerClient < 1 || d.Connections.PerClient > d.Connections.Max:
		v.add("connections.per_client", "must be between 1 and connections.max (%d)", d.Connections.Max)
	}
	if d.Retention.MaxAge < 0 {
		v.add("retention.max_age", "must not be negative (0 keeps runs of any age)")
	}
	if d.Retention.MaxRuns < 0 {
		v.add("retention.max_runs", "must not be negative (0 keeps any number of runs)")
	}
	v.positive("retention.interval", d.Retention.Interval)
	v.hosts(d)
}

// hosts checks the trusted proxies and the allowed hosts.
func (v *validator) hosts(d *Daemon) {
	for i, e := range d.TrustedProxies {
		if _, err := ParseTrustedProxies([]string{e}); err != nil {
			f := fmt.Sprintf("trusted_proxies[%d]", i)
			v.add(f, "%s is neither an IP address nor a CIDR (e.g. 10.0.0.1 or 10.0.0.0/8)", v.show(f, e))
		}
	}
	for i, h := range d.AllowedHosts {
		f := fmt.Sprintf("allowed_hosts[%d]", i)
		if h != "*" && !hostPattern.MatchString(h) {
			v.add(f, "%s is not a host name or IP address without port or scheme (e.g. orchestrator.internal), or *", v.show(f, h))
		}
	}
}

// hostPattern is the shape of an allowed_hosts entry: a DNS name or an IP address, no port.
var hostPattern = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$|^[0-9a-fA-F:]+$`)

// sourcePattern is the shape of a GitHub event or GitLab pipeline source name.
var sourcePattern = regexp.MustCompile(`^[a-z][a-z_]{0,63}$`)

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 0 && n <= 65535
}

// secretStrength checks a token or webhook secret, when set.
func (v *validator) secretStrength(field string, s Secret) {
	if !s.IsSet() {
		return
	}
	tok := s.Reveal()
	distinct := map[rune]bool{}
	for _, r := range tok {
		distinct[r] = true
	}
	lower := strings.ToLower(tok)
	switch {
	case len(tok) < MinTokenLength:
		v.add(field, "is shorter than %d characters; generate one with `openssl rand -hex 32`", MinTokenLength)
	case slices.ContainsFunc(placeholderMarks, func(m string) bool { return strings.Contains(lower, m) }):
		v.add(field, "is a placeholder the repository ships (.env.example's change-me-…), known to anyone who read it; "+
			"generate one with `openssl rand -hex 32`")
	case len(distinct) < MinTokenDistinct:
		v.add(field, "has fewer than %d distinct characters, too easy to guess; generate one with `openssl rand -hex 32`", MinTokenDistinct)
	}
	if strings.ContainsFunc(s.Reveal(), func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		v.add(field, "contains whitespace or control characters")
	}
}

func (v *validator) rate(field string, r Rate) {
	if r.PerSecond < 0 {
		v.add(field+".per_second", "must not be negative (0 turns the limit off)")
	}
	if r.PerSecond > 0 && r.Burst < 1 {
		v.add(field+".burst", "must be at least 1 when per_second is set")
	}
}

func (v *validator) webhook(p Provider, field string, w *Webhook) {
	v.secretStrength(field+".secret", w.Secret)
	if len(w.Rules) > 0 && !w.Secret.IsSet() {
		v.add(field+".secret", "is required when rules are given: without it every delivery is refused")
	}
	for i := range w.Rules {
		rf := field + ".rules[" + strconv.Itoa(i) + "]"
		r := &w.Rules[i]
		for _, m := range []struct{ name, pattern string }{
			{"repository", r.Repository}, {"branch", r.Branch}, {"workflow", r.Workflow}, {"event", r.Event},
		} {
			if _, err := path.Match(m.pattern, ""); err != nil {
				v.add(rf+"."+m.name, "%s is not a valid glob pattern", v.show(rf+"."+m.name, m.pattern))
			}
		}
		for j, src := range r.Sources {
			sf := fmt.Sprintf("%s.sources[%d]", rf, j)
			switch {
			case p == ProviderGeneric:
				v.add(sf, "generic events have no source; list sources only in github and gitlab rules")
			case NeverDeploys(p, src):
				v.add(sf, "%s pipelines never deploy (they run a merge request's code, maybe a fork's)", v.show(sf, src))
			case !sourcePattern.MatchString(src):
				v.add(sf, "%s is not a source name (a-z and '_', e.g. %s)", v.show(sf, src), strings.Join(DefaultSources(p), ", "))
			}
		}
		if v.required(rf+".pipeline", r.Pipeline) {
			v.pattern(rf+".pipeline", r.Pipeline, PipelineNamePattern)
		}
		for _, k := range sortedKeys(r.Trigger.Params) {
			if !orchestrator.ParamNamePattern.MatchString(k) {
				v.add(rf+".trigger.params."+k, "param name does not match %s", orchestrator.ParamNamePattern)
			}
		}
	}
}

// CheckRules reports every webhook rule whose pipeline is not among pipelines (as loaded by
// LoadPipelines from d.PipelinesDir).
//
// Errors: Problems naming d.File and the rule's field path.
func (d *Daemon) CheckRules(pipelines map[string]*Pipeline) error {
	v := &validator{problems: &problems{file: d.File}, fromEnv: d.fromEnv}
	for _, p := range []Provider{ProviderGitHub, ProviderGitLab, ProviderGeneric} {
		w := d.Webhooks.For(p)
		if w == nil {
			continue
		}
		for i, r := range w.Rules {
			if _, ok := pipelines[r.Pipeline]; !ok {
				f := "webhooks." + string(p) + ".rules[" + strconv.Itoa(i) + "].pipeline"
				v.add(f, "no pipeline %s in %s", v.show(f, r.Pipeline), d.PipelinesDir)
			}
		}
	}
	return v.list.Err()
}

// tokens checks the API tokens: each strong enough, no two the same, named tokens with a
// valid, unique name and a known role.
func (v *validator) tokens(t Tokens) {
	type entry struct {
		field string
		s     Secret
	}
	tokens := []entry{{"tokens.trigger", t.Trigger}, {"tokens.admin", t.Admin}, {"tokens.read", t.Read}}
	names := map[string]string{}
	for k, s := range map[string]Secret{"trigger": t.Trigger, "admin": t.Admin, "read": t.Read} {
		if s.IsSet() {
			names[k] = "tokens." + k
		}
	}
	for i, n := range t.Named {
		f := fmt.Sprintf("tokens.named[%d]", i)
		switch {
		case !validTokenName(n.Name):
			v.add(f+".name", "%s is not a token name: use 1 to 64 lowercase letters, digits, '-' or '_'", v.show(f+".name", n.Name))
		case names[n.Name] != "":
			v.add(f+".name", "%q is already the name of %s", n.Name, names[n.Name])
		default:
			names[n.Name] = f
		}
		if !slices.Contains(Roles, n.Role) {
			v.add(f+".role", "%s is not a role: use %s", v.show(f+".role", string(n.Role)), roleList())
		}
		if !n.Token.IsSet() {
			v.add(f+".token", "is required")
		}
		tokens = append(tokens, entry{f + ".token", n.Token})
	}
	for i, t := range tokens {
		v.secretStrength(t.field, t.s)
		for _, u := range tokens[:i] {
			if t.s.IsSet() && t.s == u.s {
				v.add(t.field, "must differ from %s", u.field)
			}
		}
	}
}

// validTokenName reports whether name is 1 to 64 of [a-z0-9_-].
func validTokenName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// roleList is "viewer, deployer, approver or admin".
func roleList() string {
	s := make([]string, len(Roles))
	for i, r := range Roles {
		s[i] = string(r)
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
