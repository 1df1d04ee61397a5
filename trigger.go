package orchestrator

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Trigger is what asks for a run and with which parameters. The API decodes the body of
// POST /v1/pipelines/{name}/runs straight into it, the webhooks and the CLI build one, config
// fills a pipeline's ${trigger.…} references from it, and the run stores it (runs.Run.Trigger):
// the JSON tags are the stored and the API's shape.
type Trigger struct {
	Build      string            `json:"build,omitempty"`
	ImageTag   string            `json:"image_tag,omitempty"`
	Commit     string            `json:"commit,omitempty"`
	AppVersion string            `json:"app_version,omitempty"`
	Params     map[string]string `json:"params,omitempty"`
	// By says who or what triggered the run: "api:<token name>", "webhook:github:<delivery>",
	// "cli:<user>". Set by the front door, never by the client.
	By string `json:"by"`
	// IdempotencyKey, when set, makes the run store return the existing run of the same
	// pipeline created with the same key instead of a second run. Callers keep their keys in
	// separate namespaces ("api:<client's key>", "webhook:<provider>:<body digest>"), so one
	// kind of caller cannot take another's key in advance. Set by the front door.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// IdempotencyHash is the digest of the request that carried IdempotencyKey; it is stored
	// with the key. A create with the key and another hash is refused instead of answering a
	// run started for different parameters. Set by the front door.
	IdempotencyHash string `json:"idempotency_hash,omitempty"`
	// Rollback asks for this build on purpose even when a newer one is on the services: the
	// run passes the stale-build guard and is recorded (with By and Reason) as a rollback in
	// the run and the audit.
	Rollback bool `json:"rollback,omitempty"`
	// Reason says why the caller asks for the run, a rollback above all (free text, shown in
	// the run and the audit).
	Reason string `json:"reason,omitempty"`
	// AllowBuildAhead lets a build further ahead of the pipeline's newest than its
	// max_build_ahead through (see config.Pipeline.MaxBuildAhead). Set by the front door for
	// an admin who asks for it (the API's admin token), never from a webhook.
	AllowBuildAhead bool `json:"allow_build_ahead,omitempty"`
	// Origin is what asked for the run (CI job, person, repository, delivery), for people
	// and the places they look; see Origin.
	Origin Origin `json:"origin,omitzero"`
}

// Limits on a trigger's values (bytes). Commit and app_version share one limit, 128: the
// API's old 256 was never reachable, the engine refused anything over 128.
const (
	MaxTextLen       = 256  // build, image_tag and reason (build and image_tag have tighter patterns)
	MaxCommitLen     = 128  // commit and app_version
	MaxParams        = 50   // number of params
	MaxParamNameLen  = 64   // a param's name
	MaxParamValueLen = 1024 // a param's value
)

// MaxBuildNumber is the largest build a trigger may carry as a whole number: 18 digits (one
// under 10^18; leading zeros do not count), room for any CI's counter and for timestamps
// such as 20261203052652. Builds order runs (a pipeline's order: build), so a larger one
// would be newer than every build that could follow, and each of them would be stale.
const MaxBuildNumber = 999_999_999_999_999_999

// maxBuildDigits is MaxBuildNumber's number of digits.
const maxBuildDigits = 18

var (
	// ImageTagPattern is Coolify's rule for docker_registry_image_tag.
	ImageTagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	// ParamNamePattern is what a trigger param may be called (and ${trigger.params.NAME} name).
	ParamNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

	buildPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	commitPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._\-/]*$`) // Coolify's git_commit_sha rule
)

// Validate is every rule for a trigger's values, checked where a trigger arrives (API,
// webhooks, CLI) and again when the engine resolves a pipeline with it. First each value as
// text (CheckText: valid UTF-8, no control characters, build, image_tag and reason at most
// MaxTextLen bytes, commit and app_version at most MaxCommitLen; at most MaxParams params,
// names of at most MaxParamNameLen bytes, values of at most MaxParamValueLen); then, for the
// fields whose text passed, each field's rule: build (letters, digits, '.', '_', '-', at
// most 64; as a whole number at most MaxBuildNumber), image_tag (ImageTagPattern), commit (Coolify's commit rule), app_version (a
// version, ParseVersion: the rule the mobile step's never-downgrade compares with), param
// names (ParamNamePattern); and the origin's (Origin: repo RepoPattern, URLs http or https,
// traceparent W3C's). Empty fields are allowed: a
// pipeline that references one fails in config's Resolve.
//
// Errors: FieldErrors listing every problem, each naming the JSON field ("build",
// "params.KEY", ...); values are not shown.
func (t Trigger) Validate() error {
	var es FieldErrors
	bad := map[string]bool{}
	add := func(fe *FieldError) {
		if fe != nil {
			es = append(es, fe)
			bad[fe.Field] = true
		}
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"build", t.Build, MaxTextLen}, {"image_tag", t.ImageTag, MaxTextLen}, {"commit", t.Commit, MaxCommitLen},
		{"app_version", t.AppVersion, MaxCommitLen}, {"reason", t.Reason, MaxTextLen},
	} {
		add(checkText(f.name, f.v, f.max))
	}
	if len(t.Params) > MaxParams {
		add(Fieldf("params", "at most %d parameters", MaxParams))
	}
	var names []string // the param names that are valid text, for the pattern below
	for _, k := range slices.Sorted(maps.Keys(t.Params)) {
		if fe := checkText("params", k, MaxParamNameLen); fe != nil {
			add(Fieldf("params", "a parameter name %s", fe.Reason))
			continue
		}
		names = append(names, k)
		add(checkText("params."+k, t.Params[k], MaxParamValueLen))
	}

	rule := func(field string, broken bool, format string, args ...any) {
		if broken && !bad[field] {
			add(Fieldf(field, format, args...))
		}
	}
	rule("build", t.Build != "" && !buildPattern.MatchString(t.Build), "want letters, digits, '.', '_' or '-' (at most 64)")
	rule("build", buildTooLarge(t.Build), "a build number is at most 999 999 999 999 999 999 (MaxBuildNumber)")
	rule("image_tag", t.ImageTag != "" && !ImageTagPattern.MatchString(t.ImageTag), "not a valid image tag (Coolify rule %s)", ImageTagPattern)
	rule("commit", t.Commit != "" && !commitPattern.MatchString(t.Commit),
		"not a valid commit (Coolify rule %s, at most %d characters)", commitPattern, MaxCommitLen)
	if t.AppVersion != "" {
		_, err := ParseVersion(t.AppVersion)
		rule("app_version", err != nil || strings.IndexFunc(t.AppVersion, unicode.IsSpace) >= 0,
			"want a version such as 2.4.0 or 2.4.0-beta.1 (at most %d characters)", MaxCommitLen)
	}
	for _, k := range names {
		rule("params."+k, !ParamNamePattern.MatchString(k), "param name does not match %s", ParamNamePattern)
	}
	es = append(es, t.Origin.problems()...)
	return es.Err()
}

// buildTooLarge reports whether build is a whole number (decimal digits only) above
// MaxBuildNumber.
func buildTooLarge(build string) bool {
	if build == "" || strings.TrimLeft(build, "0123456789") != "" {
		return false
	}
	return len(strings.TrimLeft(build, "0")) > maxBuildDigits
}

// CheckText is the rule for a free-text value a request carries: at most max bytes, valid
// UTF-8, no control characters. It returns nil or a *FieldError naming field.
func CheckText(field, v string, max int) error {
	if fe := checkText(field, v, max); fe != nil {
		return fe
	}
	return nil
}

func checkText(field, v string, max int) *FieldError {
	switch {
	case len(v) > max:
		return Fieldf(field, "longer than %d bytes", max)
	case !utf8.ValidString(v):
		return Fieldf(field, "not valid UTF-8")
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return Fieldf(field, "holds a control character")
	}
	return nil
}

// Value returns the value of a trigger field a pipeline may reference ("build", "image_tag",
// "commit", "app_version", "params.KEY") and whether the name is one of those. An unset
// field or param is "".
func (t Trigger) Value(name string) (string, bool) {
	switch name {
	case "build":
		return t.Build, true
	case "image_tag":
		return t.ImageTag, true
	case "commit":
		return t.Commit, true
	case "app_version":
		return t.AppVersion, true
	}
	if key, ok := strings.CutPrefix(name, "params."); ok {
		return t.Params[key], true
	}
	return "", false
}
