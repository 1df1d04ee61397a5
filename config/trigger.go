package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/deploy-orchestrator/orchestrator/internal/version"
)

// Limits on trigger parameters.
const (
	maxParams          = 50
	maxParamValueBytes = 1024
	maxTriggerField    = 128
)

var (
	buildPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	commitPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._\-/]*$`) // Coolify's git_commit_sha rule
)

// Validate checks the parameters of a trigger: build (letters, digits, '.', '_', '-'),
// image_tag (ImageTagPattern), commit (Coolify's commit rule), app_version (a version, as
// internal/version reads it: the rule the mobile step's never-downgrade compares with), and params (names matching ^[A-Za-z_][A-Za-z0-9_]{0,63}$, at most 50,
// values of at most 1024 bytes without control characters). Empty fields are allowed: a
// pipeline that references one fails in Resolve.
//
// Errors: Problems with Field set to the JSON field ("build", "params.KEY", ...); values are
// not shown.
func (t Trigger) Validate() error {
	c := &problems{}
	if t.Build != "" && !buildPattern.MatchString(t.Build) {
		c.add("build", "want letters, digits, '.', '_' or '-' (at most 64)")
	}
	if t.ImageTag != "" && !ImageTagPattern.MatchString(t.ImageTag) {
		c.add("image_tag", "not a valid image tag (Coolify rule %s)", ImageTagPattern)
	}
	if t.Commit != "" && (len(t.Commit) > maxTriggerField || !commitPattern.MatchString(t.Commit)) {
		c.add("commit", "not a valid commit (Coolify rule %s, at most %d characters)", commitPattern, maxTriggerField)
	}
	if t.AppVersion != "" {
		if _, err := version.Parse(t.AppVersion); err != nil || len(t.AppVersion) > maxTriggerField || strings.IndexFunc(t.AppVersion, func(r rune) bool {
			return unicode.IsSpace(r) || unicode.IsControl(r)
		}) >= 0 {
			c.add("app_version", "want a version such as 2.4.0 or 2.4.0-beta.1 (at most %d characters)", maxTriggerField)
		}
	}
	if len(t.Params) > maxParams {
		c.add("params", "more than %d params", maxParams)
	}
	for _, k := range sortedKeys(t.Params) {
		if !paramKeyPattern.MatchString(k) {
			c.add("params."+k, "param name does not match %s", paramKeyPattern)
		}
		if v := t.Params[k]; len(v) > maxParamValueBytes || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			c.add("params."+k, "want at most %d bytes without control characters", maxParamValueBytes)
		}
	}
	return c.list.Err()
}

// lookup returns the value a trigger reference stands for.
func (t Trigger) lookup(ref string) (string, error) {
	name, ok := strings.CutPrefix(ref, triggerRef)
	if !ok {
		return "", fmt.Errorf("unknown reference %s", showRef(ref))
	}
	var v string
	switch name {
	case "build":
		v = t.Build
	case "image_tag":
		v = t.ImageTag
	case "commit":
		v = t.Commit
	case "app_version":
		v = t.AppVersion
	default:
		key, ok := strings.CutPrefix(name, "params.")
		if !ok {
			return "", fmt.Errorf("unknown reference %s", showRef(ref))
		}
		p, ok := t.Params[key]
		if !ok || p == "" {
			return "", fmt.Errorf("the trigger has no param %q (referenced as %s)", key, showRef(ref))
		}
		return p, nil
	}
	if v == "" {
		return "", fmt.Errorf("the trigger has no %s (referenced as %s)", name, showRef(ref))
	}
	return v, nil
}

// Resolve returns a copy of the pipeline with every ${trigger.…} reference filled from t and
// every $${ escape turned into ${, ready for one run. The receiver is not changed. Resolved
// image tags must match ImageTagPattern and resolved health URLs must be http(s) URLs.
//
// Resolve validates t too (Trigger.Validate), so its answer lists every problem at once.
//
// Errors: Problems naming the pipeline's file and the field path of every reference that t
// can't fill, a build that is not a whole number when the pipeline says order: build, (a missing param, an empty image tag: empty counts as missing) and every
// resolved value that is invalid. Trigger values are not shown.
func (p *Pipeline) Resolve(t Trigger) (*Pipeline, error) {
	q := p.Clone()
	v := &validator{problems: &problems{file: p.File}, fromEnv: map[string]bool{}}
	// The trigger's own problems first, then what the pipeline needs of it: all in one list.
	if err := t.Validate(); err != nil {
		for _, pr := range AsProblems(err) {
			v.add(pr.Field, "%s", pr.Message)
		}
	}
	if p.Order == OrderBuild && !IsBuildNumber(t.Build) {
		v.add("build", "the pipeline orders its runs by build (order: build): want a whole number")
	}
	ok := true
	fill := func(field, s string) string {
		out, err := expandRefs(s, false, t.lookup)
		if err != nil {
			v.add(field, "%v", err)
			ok = false
			return s
		}
		ok = true
		return out
	}
	for i := range q.Services {
		s := &q.Services[i]
		field := fmt.Sprintf("services[%d]", i)
		if s.ImageTag != "" {
			s.ImageTag = fill(field+".image_tag", s.ImageTag)
			if ok && !ImageTagPattern.MatchString(s.ImageTag) {
				v.add(field+".image_tag", "resolves to an invalid image tag (Coolify rule %s)", ImageTagPattern)
			}
		}
		for j := range s.Env {
			e := &s.Env[j]
			if e.Secret == nil {
				e.Value = Secret(fill(fmt.Sprintf("%s.env[%d].value", field, j), e.Value.Reveal()))
			}
		}
		if h := s.Health.HTTP; h != nil {
			if h.URL = fill(field+".health.http.url", h.URL); ok {
				v.httpURL(field+".health.http.url", h.URL)
			}
		}
	}
	for i := range q.Mobile {
		m := &q.Mobile[i]
		for _, k := range sortedKeys(m.Set) {
			field := fmt.Sprintf("mobile[%d].set.%s", i, k)
			// never_downgrade compares versions: a value that is not one would fail the
			// step after both phases deployed, so it is refused here, by the same rule.
			if m.Set[k] = fill(field, m.Set[k]); ok && m.NeverDowngrade {
				if _, err := version.Parse(m.Set[k]); err != nil {
					v.add(field, "resolves to something that is not a version, which never_downgrade cannot compare")
				}
			}
		}
	}
	if len(v.list) > 0 {
		return nil, v.list
	}
	return q, nil
}

// Clone returns a deep copy of the pipeline.
func (p *Pipeline) Clone() *Pipeline {
	q := *p
	if p.Secrets != nil {
		q.Secrets = make(map[string]SecretSource, len(p.Secrets))
		for k, s := range p.Secrets {
			if s.Infisical != nil {
				in := *s.Infisical
				s.Infisical = &in
			}
			q.Secrets[k] = s
		}
	}
	q.Services = slices.Clone(p.Services)
	for i := range q.Services {
		s := &q.Services[i]
		s.Env = slices.Clone(s.Env)
		for j := range s.Env {
			if r := s.Env[j].Secret; r != nil {
				rc := *r
				s.Env[j].Secret = &rc
			}
		}
		if h := s.Health.HTTP; h != nil {
			hc := *h
			s.Health.HTTP = &hc
		}
	}
	q.Mobile = slices.Clone(p.Mobile)
	for i := range q.Mobile {
		q.Mobile[i].Set = maps.Clone(q.Mobile[i].Set)
	}
	q.Locks.Phase.Backoff = slices.Clone(p.Locks.Phase.Backoff)
	q.Locks.Service.Backoff = slices.Clone(p.Locks.Service.Backoff)
	return &q
}
