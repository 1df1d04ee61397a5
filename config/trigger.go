package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
)

// lookup returns the value a trigger reference stands for. A value the trigger lacks is a
// *orchestrator.FieldError naming the trigger's field ("image_tag", "params.region"): the
// field a front door names in its answer.
func lookup(t orchestrator.Trigger, ref string) (string, error) {
	name, ok := strings.CutPrefix(ref, triggerRef)
	if !ok {
		return "", fmt.Errorf("unknown reference %s", showRef(ref))
	}
	v, ok := t.Value(name)
	if !ok {
		return "", fmt.Errorf("unknown reference %s", showRef(ref))
	}
	if v == "" {
		if key, isParam := strings.CutPrefix(name, "params."); isParam {
			return "", orchestrator.Fieldf(name, "the trigger has no param %q (referenced as %s)", key, showRef(ref))
		}
		return "", orchestrator.Fieldf(name, "the trigger has no %s (referenced as %s)", name, showRef(ref))
	}
	return v, nil
}

// Resolve returns a copy of the pipeline with every ${trigger.…} reference filled from t and
// every $${ escape turned into ${, ready for one run. The receiver is not changed. Resolved
// image tags must match orchestrator.ImageTagPattern and resolved health URLs must be http(s) URLs
// on the scheme, host and port their file names: each value in a health URL is escaped for
// the part it lands in (url.PathEscape in the path and the fragment, url.QueryEscape in the
// query), so it stays one path segment or one query value.
//
// Resolve validates t too (orchestrator.Trigger.Validate), so its answer lists every problem
// at once.
//
// Errors: Problems naming the pipeline's file and the field path of the references that t
// can't fill, a build that is not a whole number when the pipeline says order: build, (a missing param, an empty image tag: empty counts as missing) and every
// resolved value that is invalid; and, as refusals (Problem.Refused), each trigger value that
// would reach Coolify as part of a shared-variable reference in an env value whose entry
// does not allow it (EnvVar.AllowSharedRefsFromTrigger). Trigger values are not shown.
// Each problem about the trigger itself, or about a reference it can't fill, carries the
// trigger's field (Problem.Trigger), which the front doors name; each trigger field has one
// problem, on the first place that needs it, its message naming the other places.
func (p *Pipeline) Resolve(t orchestrator.Trigger) (*Pipeline, error) {
	q := p.Clone()
	rs := &resolution{t: t, v: &validator{problems: &problems{file: p.File}, fromEnv: map[string]bool{}},
		named: map[string]int{}, also: map[string][]string{}, ok: true}
	// The trigger's own problems first, then what the pipeline needs of it: all in one list,
	// each trigger field named once.
	for _, fe := range orchestrator.AsFieldErrors(t.Validate()) {
		rs.addTrigger(fe.Field, fe.Field, "%s", fe.Reason)
	}
	if p.Order == OrderBuild && !IsBuildNumber(t.Build) {
		rs.addTrigger("build", "build", "the pipeline orders its runs by build (order: build): want a whole number")
	}
	for i := range q.Services {
		rs.service(fmt.Sprintf("services[%d]", i), &q.Services[i])
	}
	for i := range q.Mobile {
		rs.mobile(fmt.Sprintf("mobile[%d]", i), &q.Mobile[i])
	}
	v := rs.v
	for trigger, fields := range rs.also {
		v.list[rs.named[trigger]].Message += "; also needed by " + strings.Join(fields, ", ")
	}
	if len(v.list) > 0 {
		return nil, v.list
	}
	return q, nil
}

// resolution is one Resolve: the trigger, the problems found so far, and per trigger field
// the problem that names it (a value several places reference is one problem, on the first
// place, naming the others in also).
type resolution struct {
	t     orchestrator.Trigger
	v     *validator
	named map[string]int // trigger field → index of its problem in v.list
	also  map[string][]string
	ok    bool // the last fill filled every reference
}

// addTrigger records a problem of trigger field trigger, found at field, once per field.
func (rs *resolution) addTrigger(field, trigger, format string, args ...any) {
	if i, ok := rs.named[trigger]; ok {
		if rs.v.list[i].Field != field && !slices.Contains(rs.also[trigger], field) {
			rs.also[trigger] = append(rs.also[trigger], field)
		}
		return
	}
	rs.named[trigger] = len(rs.v.list)
	rs.v.addTrigger(field, trigger, format, args...)
}

// fillWith fills s's references, each value passed through esc with the text before it and
// the reference. Every trigger value the string lacks is named, not only the first; then s
// is returned as it is and ok is false.
func (rs *resolution) fillWith(field, s string, esc func(before, ref, val string) string) string {
	var missing []*orchestrator.FieldError
	out, err := expandRefsAfter(s, false, func(before, ref string) (string, error) {
		val, err := lookup(rs.t, ref)
		var fe *orchestrator.FieldError
		if errors.As(err, &fe) {
			missing = append(missing, fe)
			return "", nil
		}
		return esc(before, ref, val), err
	})
	for _, fe := range missing {
		rs.addTrigger(field, fe.Field, "%s", fe.Reason)
	}
	if err != nil {
		rs.v.add(field, "%v", err)
	}
	if err != nil || len(missing) > 0 {
		rs.ok = false
		return s
	}
	rs.ok = true
	return out
}

// fill is fillWith with the values as they are.
func (rs *resolution) fill(field, s string) string {
	return rs.fillWith(field, s, func(_, _, val string) string { return val })
}

// url fills a URL's references, each value escaped for the part of the URL it lands in; the
// result must name the scheme, host and port the file names (a file loaded refuses
// references that could reach them; a pipeline built in code is checked here).
func (rs *resolution) url(field, raw string) string {
	err := checkURLRefs(raw)
	if err != nil {
		rs.v.add(field, "%v", err)
	}
	out := rs.fillWith(field, raw, func(before, _, val string) string { return escapeForURLPart(urlPartAfter(before), val) })
	if rs.ok && err == nil && rs.v.httpURL(field, out) != nil {
		probe, _ := expandRefs(raw, false, func(string) (string, error) { return "x", nil })
		if !sameOrigin(probe, out) {
			rs.v.add(field, "resolves to another scheme, host or port than the file names")
		}
	}
	return out
}

// service resolves one service: its image tag, env values and health URLs.
func (rs *resolution) service(field string, s *Service) {
	if s.ImageTag != "" {
		s.ImageTag = rs.fill(field+".image_tag", s.ImageTag)
		if rs.ok && !orchestrator.ImageTagPattern.MatchString(s.ImageTag) {
			rs.v.add(field+".image_tag", "resolves to an invalid image tag (Coolify rule %s)", orchestrator.ImageTagPattern)
		}
	}
	for j := range s.Env {
		if s.Env[j].Secret == nil {
			rs.envValue(field, j, &s.Env[j])
		}
	}
	if h := s.Health.HTTP; h != nil {
		h.URL = rs.url(field+".health.http.url", h.URL)
	}
	if c := s.Health.Version; c != nil {
		c.URL = rs.url(field+".health.version.url", c.URL)
		c.Expect = rs.fill(field+".health.version.expect", c.Expect)
	}
}

// envValue resolves env entry j of a service, and refuses each trigger value that would
// reach Coolify as part of a shared-variable reference, unless the entry allows it.
func (rs *resolution) envValue(field string, j int, e *EnvVar) {
	f := fmt.Sprintf("%s.env[%d].value", field, j)
	var spans []span
	e.Value = Secret(rs.fillWith(f, e.Value.Reveal(), func(before, ref, val string) string {
		spans = append(spans, span{start: len(before), end: len(before) + len(val), ref: ref})
		return val
	}))
	if !rs.ok || e.AllowSharedRefsFromTrigger {
		return
	}
	refs, scopes := triggerSharedRefs(e.Value.Reveal(), spans)
	for k, ref := range refs {
		trigger := strings.TrimPrefix(ref, triggerRef)
		if _, named := rs.named[trigger]; named {
			continue // its value is refused already
		}
		rs.named[trigger] = len(rs.v.list)
		rs.v.addRefused(f, trigger, "the trigger's %s would reach Coolify as part of a {{%s.…}} shared-variable reference, "+
			"which Coolify replaces with that shared variable when it builds: a trigger may not choose one "+
			"(allow_shared_refs_from_trigger: true on %s.env[%d] allows it for this variable)", trigger, scopes[k], field, j)
	}
}

// mobile resolves one mobile step's values. never_downgrade compares versions: a value that
// is not one would fail the step after both phases deployed, so it is refused here, by the
// same rule.
func (rs *resolution) mobile(field string, m *MobileStep) {
	for _, k := range sortedKeys(m.Set) {
		f := field + ".set." + k
		if m.Set[k] = rs.fill(f, m.Set[k]); rs.ok && m.NeverDowngrade {
			if _, err := orchestrator.ParseVersion(m.Set[k]); err != nil {
				rs.v.add(f, "resolves to something that is not a version, which never_downgrade cannot compare")
			}
		}
	}
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
		if c := s.Health.Version; c != nil {
			vc := *c
			s.Health.Version = &vc
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
