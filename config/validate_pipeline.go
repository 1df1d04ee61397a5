package config

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
)

// Patterns the definitions are checked against.
var (
	// EnvKeyPattern is Coolify's rule for env var keys (at most 255 characters).
	EnvKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)
	// PipelineNamePattern is what a pipeline name may be (it appears in URLs and holder IDs).
	PipelineNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	// UUIDPattern is what a Coolify resource UUID may be here (it becomes a lock key).
	UUIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	// FeatureNamePattern is what a Flagsmith feature name may be here (it becomes a lock key).
	FeatureNamePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,149}$`)

	stepNamePattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	sourceNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	setPathSegment    = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

const (
	maxEnvKeyLength  = 255
	maxCommentLength = 256
	maxRetries       = 100
)

// Coolify status parts (state[:health]); see the Coolify notes.
var (
	coolifyStates = []string{"running", "starting", "restarting", "degraded", "paused", "exited"}
	coolifyHealth = []string{"healthy", "unhealthy", "unknown"}
)

// reservedUUIDs would collide with the phase lock keys.
var reservedUUIDs = map[string]bool{"phase1": true, "phase2": true}

// validator checks one decoded file. fromEnv holds the field paths whose values came from the
// environment: their values are never shown.
type validator struct {
	*problems
	fromEnv map[string]bool
}

// show quotes a value for a message, unless it came from the environment.
func (v *validator) show(field, value string) string {
	if v.fromEnv[field] {
		return "(value from the environment)"
	}
	const max = 80
	if len(value) > max {
		value = value[:max] + "…"
	}
	return strconv.Quote(value)
}

func (v *validator) required(field, value string) bool {
	if strings.TrimSpace(value) == "" {
		v.add(field, "is required")
		return false
	}
	return true
}

func (v *validator) pattern(field, value string, re *regexp.Regexp) {
	if !re.MatchString(value) {
		v.add(field, "%s does not match %s", v.show(field, value), re)
	}
}

// httpURL checks an absolute http(s) URL. The parser's error is never shown: it quotes the URL.
func (v *validator) httpURL(field, value string) *url.URL {
	if !v.required(field, value) {
		return nil
	}
	u, err := url.Parse(value)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(field, "want an absolute http:// or https:// URL")
		return nil
	}
	if u.User != nil {
		v.add(field, "must not carry credentials; use the token field")
		return nil
	}
	return u
}

func (v *validator) positive(field string, d time.Duration) {
	if d <= 0 {
		v.add(field, "must be a positive duration")
	}
}

// oneOf checks an enum value.
func oneOf[T ~string](v *validator, field string, value T, allowed ...T) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	v.add(field, "%s is not one of: %s", v.show(field, string(value)), strings.Join(names, ", "))
}

// pipelineDefaults fills, in the raw tree, the defaults that zero values can't express
// (booleans that default to true, integers for which 0 is meaningful).
func pipelineDefaults(raw map[string]any) {
	setDefault(raw, int64(DefaultMaxBuildAhead), "max_build_ahead")
	if l, ok := raw["locks"]; ok && l != nil {
		if _, isMap := l.(map[string]any); !isMap {
			return
		}
	}
	setDefault(raw, DefaultPhaseBudget.MaxRetries, "locks", "phase", "max_retries")
	setDefault(raw, DefaultServiceBudget.MaxRetries, "locks", "service", "max_retries")
}

// checkEnvEntries reports env entries that set neither or both of value and secret; the
// decoded EnvVar can't tell `value: ""` from no value.
func checkEnvEntries(raw map[string]any, c *problems) {
	svcs, _ := raw["services"].([]any)
	for i, s := range svcs {
		svc, _ := s.(map[string]any)
		envs, _ := svc["env"].([]any)
		for j, e := range envs {
			env, ok := e.(map[string]any)
			if !ok {
				continue
			}
			_, hasValue := env["value"]
			sec, hasSecret := env["secret"]
			hasSecret = hasSecret && sec != nil
			field := fmt.Sprintf("services[%d].env[%d]", i, j)
			switch {
			case hasValue && hasSecret:
				c.add(field, "set either value or secret, not both")
			case !hasValue && !hasSecret:
				c.add(field, "set value (a literal, may be \"\") or secret (a source and key)")
			}
		}
	}
}

// applyPipelineDefaults fills the defaults expressed by zero values. A name defaulted from a
// value that came from the environment is marked as such in fromEnv.
func applyPipelineDefaults(p *Pipeline, fromEnv map[string]bool) {
	for i := range p.Services {
		s := &p.Services[i]
		if s.Name == "" {
			s.Name = s.UUID
			f := fmt.Sprintf("services[%d]", i)
			fromEnv[f+".name"] = fromEnv[f+".uuid"]
		}
		if s.Kind == "" {
			s.Kind = KindApplication
		}
		if s.DeployTimeout == 0 {
			s.DeployTimeout = DefaultDeployTimeout
		}
		if s.CancelTimeout == 0 {
			s.CancelTimeout = DefaultCancelTimeout
		}
		if h := s.Health.HTTP; h != nil {
			if h.ExpectStatus == 0 {
				h.ExpectStatus = 200
			}
			if h.Timeout == 0 {
				h.Timeout = DefaultHealthTimeout
			}
		}
		if vc := s.Health.Version; vc != nil {
			if vc.Expect == "" {
				vc.Expect = "${trigger.image_tag}"
			}
			if vc.Timeout == 0 {
				vc.Timeout = DefaultHealthTimeout
			}
		}
		if h := &s.Health; h.CoolifyStatus != "" && h.StatusTimeout == 0 {
			h.StatusTimeout = DefaultHealthTimeout
			if h.HTTP != nil {
				h.StatusTimeout = h.HTTP.Timeout
			}
		}
	}
	for _, src := range p.Secrets {
		if src.Infisical != nil && src.Infisical.Path == "" {
			src.Infisical.Path = "/"
		}
	}
	for i := range p.Mobile {
		m := &p.Mobile[i]
		if m.Name == "" {
			m.Name = m.Feature
			f := fmt.Sprintf("mobile[%d]", i)
			fromEnv[f+".name"] = fromEnv[f+".feature"]
		}
		if m.When == "" {
			m.When = WhenAfterPhase2
		}
	}
	l := &p.Locks
	if l.TTL == 0 {
		l.TTL = DefaultLockTTL
	}
	for _, b := range []struct {
		b   *Budget
		def Budget
	}{{&l.Phase, DefaultPhaseBudget}, {&l.Service, DefaultServiceBudget}} {
		if b.b.Timeout == 0 {
			b.b.Timeout = b.def.Timeout
		}
		if len(b.b.Backoff) == 0 {
			b.b.Backoff = DefaultBackoff()
		}
	}
	if l.OnFrozen == "" {
		l.OnFrozen = OnFrozenWait
	}
	if p.Phase2.Parallel == 0 {
		p.Phase2.Parallel = 1
	}
	if p.OnFailure == "" {
		p.OnFailure = OnFailureRollback
	}
	if p.Concurrency == "" {
		p.Concurrency = ConcurrencyQueue
	}
	applyNotifyDefaults(p.Notify)
	applyStatusesDefaults(p.Statuses, p.Name)
	applyAnalysisDefaults(p.Analysis)
}

// pipeline checks a decoded pipeline whose defaults are applied.
func (v *validator) pipeline(p *Pipeline) {
	if v.required("name", p.Name) {
		v.pattern("name", p.Name, PipelineNamePattern)
	}
	if u := v.httpURL("coolify.url", p.Coolify.URL); u != nil {
		if strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/api/v1") {
			v.add("coolify.url", "drop the /api/v1 suffix: the client appends it")
		}
		if u.RawQuery != "" || u.Fragment != "" {
			v.add("coolify.url", "must not have a query or fragment")
		}
	}
	if !p.Coolify.Token.IsSet() {
		v.add("coolify.token", "is required")
	}

	for _, name := range sortedKeys(p.Secrets) {
		v.secretSource("secrets."+name, name, p.Secrets[name])
	}

	if len(p.Services) == 0 && len(p.Mobile) == 0 {
		v.add("services", "a pipeline needs at least one service or mobile step")
	}
	uuids := map[string]int{}
	names := map[string]int{}
	for i := range p.Services {
		field := fmt.Sprintf("services[%d]", i)
		s := &p.Services[i]
		v.service(field, s, p.Secrets)
		if s.UUID != "" {
			if j, dup := uuids[s.UUID]; dup {
				v.add(field+".uuid", "duplicate service UUID %s (also services[%d].uuid)", v.show(field+".uuid", s.UUID), j)
			} else {
				uuids[s.UUID] = i
			}
		}
		if s.Name != "" {
			// Two services with one UUID are reported once, as duplicate UUIDs.
			if j, dup := names[s.Name]; dup && p.Services[j].UUID != s.UUID {
				v.add(field+".name", "duplicate service name %s (also services[%d].name)", v.show(field+".name", s.Name), j)
			} else if !dup {
				names[s.Name] = i
			}
		}
	}

	mnames := map[string]int{}
	for i := range p.Mobile {
		field := fmt.Sprintf("mobile[%d]", i)
		m := &p.Mobile[i]
		v.mobile(field, m)
		if j, dup := mnames[m.Name]; dup && m.Name != "" {
			v.add(field+".name", "duplicate mobile step name %s (also mobile[%d].name)", v.show(field+".name", m.Name), j)
		} else {
			mnames[m.Name] = i
		}
	}

	v.waves(p)
	v.locks("locks", &p.Locks)
	oneOf(v, "on_failure", p.OnFailure, OnFailureRollback, OnFailureRollbackFailed, OnFailureHalt)
	oneOf(v, "concurrency", p.Concurrency, ConcurrencyQueue, ConcurrencySupersede)
	if p.Order != "" {
		oneOf(v, "order", p.Order, OrderBuild, OrderCreated, OrderNone)
	}
	if p.MaxBuildAhead < 0 {
		v.add("max_build_ahead", "must not be negative (0 turns the check off)")
	}
	v.notify("notify", p.Notify)
	v.statuses("statuses", p.Statuses)
	v.analysis(p)
	v.windows("windows", p.Windows)
	v.approvals("approvals", p.Approvals)
	if p.Environment != "" {
		v.pattern("environment", p.Environment, PipelineNamePattern)
	}

	// Every key the run takes must lie in its mutator's namespace and in no other.
	for i, s := range p.Services {
		v.lockKey(fmt.Sprintf("services[%d].uuid", i), s.LockKey(), orchestrator.NamespaceCoolify)
	}
	for i, m := range p.Mobile {
		v.lockKey(fmt.Sprintf("mobile[%d].feature", i), m.LockKey(), orchestrator.NamespaceMobile)
	}
}

// lockKey checks that key, made from field's value, lies in namespace ns and in no other
// registered one.
func (v *validator) lockKey(field, key, ns string) {
	if got := orchestrator.NamespaceOf(key); got != ns {
		shown := strconv.Quote(key)
		if v.fromEnv[field] {
			shown = "made from a value from the environment"
		}
		v.add(field, "lock key %s falls outside its namespace %q", shown, ns)
	}
}

func (v *validator) secretSource(field, name string, src SecretSource) {
	if name == EnvSource {
		v.add(field, "%q is the built-in source for the daemon's environment and can't be redefined", EnvSource)
	} else if !sourceNamePattern.MatchString(name) {
		v.add(field, "source name does not match %s", sourceNamePattern)
	}
	if src.Infisical == nil {
		v.add(field, "set exactly one source kind (infisical)")
		return
	}
	in := src.Infisical
	f := field + ".infisical"
	v.httpURL(f+".url", in.URL)
	v.required(f+".client_id", in.ClientID)
	if !in.ClientSecret.IsSet() {
		v.add(f+".client_secret", "is required")
	}
	v.required(f+".project_id", in.ProjectID)
	v.required(f+".environment", in.Environment)
	if !strings.HasPrefix(in.Path, "/") {
		v.add(f+".path", "must start with /")
	}
}

func (v *validator) service(field string, s *Service, sources map[string]SecretSource) {
	if v.required(field+".uuid", s.UUID) {
		v.pattern(field+".uuid", s.UUID, UUIDPattern)
		if reservedUUIDs[s.UUID] {
			v.add(field+".uuid", "%s is reserved: its lock key would be a phase lock", v.show(field+".uuid", s.UUID))
		}
	}
	if s.Name != "" {
		v.pattern(field+".name", s.Name, stepNamePattern)
	}
	oneOf(v, field+".kind", s.Kind, KindApplication, KindService)
	if s.ImageTag != "" {
		if s.Kind == KindService {
			v.add(field+".image_tag", "a Coolify service (kind: service) has no image tag; leave it empty")
		} else {
			v.imageTagTemplate(field+".image_tag", s.ImageTag)
		}
	}
	keys := map[string]int{}
	for j := range s.Env {
		ef := fmt.Sprintf("%s.env[%d]", field, j)
		e := &s.Env[j]
		v.env(ef, e, sources)
		if e.Key != "" {
			if k, dup := keys[e.Key]; dup {
				v.add(ef+".key", "duplicate env key %s (also %s.env[%d].key)", v.show(ef+".key", e.Key), field, k)
			} else {
				keys[e.Key] = j
			}
		}
	}
	v.health(field+".health", &s.Health)
	v.positive(field+".deploy_timeout", s.DeployTimeout)
	v.positive(field+".cancel_timeout", s.CancelTimeout)
}

// imageTagTemplate checks an image tag that may still hold trigger references: the literal
// parts must be valid tag characters. Resolve checks the whole tag again.
func (v *validator) imageTagTemplate(field, tag string) {
	probe, err := expandRefs(tag, false, func(string) (string, error) { return "x", nil })
	if err != nil || !orchestrator.ImageTagPattern.MatchString(probe) {
		v.add(field, "%s is not a valid image tag (Coolify rule %s)", v.show(field, tag), orchestrator.ImageTagPattern)
	}
}

func (v *validator) env(field string, e *EnvVar, sources map[string]SecretSource) {
	if v.required(field+".key", e.Key) {
		if len(e.Key) > maxEnvKeyLength || !EnvKeyPattern.MatchString(e.Key) {
			v.add(field+".key", "%s is not a valid env key (Coolify rule %s, at most %d characters)", v.show(field+".key", e.Key), EnvKeyPattern, maxEnvKeyLength)
		}
	}
	if r := e.Secret; r != nil {
		sf := field + ".secret"
		if v.required(sf+".source", r.Source) && r.Source != EnvSource {
			if _, ok := sources[r.Source]; !ok {
				v.add(sf+".source", "unknown secret source %s (define it under secrets, or use %q for the daemon's environment)", v.show(sf+".source", r.Source), EnvSource)
			}
		}
		if v.required(sf+".key", r.Key) && r.Source == EnvSource && !envNamePattern.MatchString(r.Key) {
			v.add(sf+".key", "%s is not an environment variable name", v.show(sf+".key", r.Key))
		}
	}
	if e.Comment != nil && len(*e.Comment) > maxCommentLength {
		v.add(field+".comment", "is longer than %d characters", maxCommentLength)
	}
}

// urlTemplate checks a URL that may hold trigger references: the references may only come
// after its host (so a trigger never chooses the scheme, host or port), and the URL must be
// an http(s) URL.
func (v *validator) urlTemplate(field, raw string) {
	probe, err := expandRefs(raw, false, func(string) (string, error) { return "x", nil })
	if err == nil {
		err = checkURLRefs(raw)
	}
	if err != nil {
		v.add(field, "%v", err)
		return
	}
	v.httpURL(field, probe)
}

func (v *validator) health(field string, h *Health) {
	if st := h.CoolifyStatus; st != "" {
		state, health, hasHealth := strings.Cut(st, ":")
		if !slices.Contains(coolifyStates, state) || (hasHealth && !slices.Contains(coolifyHealth, health)) {
			v.add(field+".coolify_status", "%s is not a Coolify status (state %s, optionally :%s)",
				v.show(field+".coolify_status", st), strings.Join(coolifyStates, "|"), strings.Join(coolifyHealth, "|"))
		}
		v.positive(field+".status_timeout", h.StatusTimeout)
	}
	if c := h.HTTP; c != nil {
		f := field + ".http"
		v.urlTemplate(f+".url", c.URL)
		if c.ExpectStatus < 100 || c.ExpectStatus > 599 {
			v.add(f+".expect_status", "must be an HTTP status between 100 and 599")
		}
		v.positive(f+".timeout", c.Timeout)
	}
	if c := h.Version; c != nil {
		f := field + ".version"
		v.urlTemplate(f+".url", c.URL)
		if c.Field != "" && c.Header != "" {
			v.add(f+".header", "set field (a JSON field of the body) or header, not both")
		}
		if _, err := expandRefs(c.Expect, false, func(string) (string, error) { return "x", nil }); err != nil {
			v.add(f+".expect", "%v", err)
		}
		v.positive(f+".timeout", c.Timeout)
	}
}

func (v *validator) mobile(field string, m *MobileStep) {
	if v.required(field+".feature", m.Feature) {
		v.pattern(field+".feature", m.Feature, FeatureNamePattern)
	}
	if m.Name != "" {
		v.pattern(field+".name", m.Name, stepNamePattern)
	}
	v.httpURL(field+".flagsmith.url", m.Flagsmith.URL)
	if !m.Flagsmith.APIKey.IsSet() {
		v.add(field+".flagsmith.api_key", "is required")
	}
	v.required(field+".flagsmith.environment", m.Flagsmith.Environment)
	oneOf(v, field+".when", m.When, WhenAfterPhase2, WhenBeforePhase1, WhenAfterVerified)
	if len(m.Set) == 0 {
		v.add(field+".set", "is required: name at least one path to set")
	}
	for _, path := range sortedKeys(m.Set) {
		for seg := range strings.SplitSeq(path, ".") {
			if !setPathSegment.MatchString(seg) {
				v.add(field+".set", "path %q: want dot-separated names of letters, digits, _ and -", path)
				break
			}
		}
	}
}

func (v *validator) locks(field string, l *LockPolicy) {
	if l.TTL < time.Second {
		v.add(field+".ttl", "must be at least 1s")
	}
	v.budget(field+".phase", &l.Phase)
	v.budget(field+".service", &l.Service)
	oneOf(v, field+".on_frozen", l.OnFrozen, OnFrozenWait, OnFrozenFail)
}

func (v *validator) budget(field string, b *Budget) {
	v.positive(field+".timeout", b.Timeout)
	if b.MaxRetries < 0 || b.MaxRetries > maxRetries {
		v.add(field+".max_retries", "must be between 0 and %d", maxRetries)
	}
	if len(b.Backoff) > maxRetries {
		v.add(field+".backoff", "has more than %d entries", maxRetries)
	}
	for i, d := range b.Backoff {
		if d < 0 {
			v.add(fmt.Sprintf("%s.backoff[%d]", field, i), "must not be negative")
		}
	}
}
