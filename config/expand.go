package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
)

// envNamePattern is what ${NAME} may name in the daemon's environment.
var envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Prefixes of the references kept for run time.
const (
	triggerRef = "trigger."
	payloadRef = "payload."
)

// errUnterminated is returned for a "${" without its closing brace.
var errUnterminated = errors.New("unterminated ${ (write $${ for a literal ${)")

// expandRefs returns s with every ${ref} replaced by fn(ref). "$${" is an escaped "${": it is
// kept as "$${" when keepEscapes is set (so a later pass still sees it as escaped) and turned
// into "${" otherwise. fn may return "${"+ref+"}" to keep a reference for a later pass.
func expandRefs(s string, keepEscapes bool, fn func(ref string) (string, error)) (string, error) {
	return expandRefsAfter(s, keepEscapes, func(_, ref string) (string, error) { return fn(ref) })
}

// expandRefsAfter is expandRefs whose fn is also given the text written before the reference
// (the escapes and the values before it already expanded): where in the result its value
// lands.
func expandRefsAfter(s string, keepEscapes bool, fn func(before, ref string) (string, error)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			if keepEscapes {
				b.WriteString("$${")
			} else {
				b.WriteString("${")
			}
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", errUnterminated
			}
			ref := s[i+2 : i+2+end]
			out, err := fn(b.String(), ref)
			if err != nil {
				return "", err
			}
			b.WriteString(out)
			i += 2 + end + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

// keep returns the reference text unchanged, for a later pass.
func keep(ref string) string { return "${" + ref + "}" }

// showRef quotes a reference for an error message, clipped so garbage stays readable. A
// reference is file text, never a value.
func showRef(ref string) string {
	const max = 40
	if len(ref) > max {
		ref = ref[:max] + "…"
	}
	return strconv.Quote("${" + ref + "}")
}

// checkTriggerRef reports whether ref (without "${" and "}") is a trigger reference Resolve
// knows how to fill.
func checkTriggerRef(ref string) error {
	name, ok := strings.CutPrefix(ref, triggerRef)
	if !ok {
		return fmt.Errorf("%s is not a trigger reference", showRef(ref))
	}
	if key, ok := strings.CutPrefix(name, "params."); ok {
		if !orchestrator.ParamNamePattern.MatchString(key) {
			return fmt.Errorf("%s: a trigger param name must match %s", showRef(ref), orchestrator.ParamNamePattern)
		}
		return nil
	}
	if _, ok := (orchestrator.Trigger{}).Value(name); !ok {
		return fmt.Errorf("unknown trigger reference %s (known: ${trigger.build}, ${trigger.image_tag}, ${trigger.commit}, ${trigger.app_version}, ${trigger.params.KEY})", showRef(ref))
	}
	return nil
}

// loadExpander resolves ${NAME} from the environment while a file is loaded.
type loadExpander struct {
	getenv func(string) string
	// runtime says which kind of run-time reference (triggerRef or payloadRef) a field path
	// may keep, or "" when it may keep none.
	runtime func(path string) string
	// fromEnv records the field paths whose value came (partly) from the environment, so
	// that no problem ever shows those values.
	fromEnv map[string]bool
}

// expand resolves one string found at path.
func (x *loadExpander) expand(path, s string) (string, error) {
	allowed := x.runtime(path)
	return expandRefs(s, allowed != "", func(ref string) (string, error) {
		switch {
		case strings.HasPrefix(ref, triggerRef):
			if allowed != triggerRef {
				return "", fmt.Errorf("trigger reference %s is not allowed here (only in image_tag, env values, health.http.url and mobile set values)", showRef(ref))
			}
			if err := checkTriggerRef(ref); err != nil {
				return "", err
			}
			return keep(ref), nil
		case strings.HasPrefix(ref, payloadRef):
			if allowed != payloadRef {
				return "", fmt.Errorf("payload reference %s is not allowed here (only in webhook rule trigger values)", showRef(ref))
			}
			if err := checkPayloadRef(ref); err != nil {
				return "", err
			}
			return keep(ref), nil
		case envNamePattern.MatchString(ref):
			v := x.getenv(ref)
			if v == "" {
				return "", fmt.Errorf("environment variable %s is not set", ref)
			}
			x.fromEnv[path] = true
			if allowed != "" {
				// The field is expanded again at run time: the value must stay literal.
				v = strings.ReplaceAll(v, "${", "$${")
			}
			return v, nil
		default:
			return "", fmt.Errorf("malformed reference %s (use ${NAME} for an environment variable, $${ for a literal ${)", showRef(ref))
		}
	})
}

// checkPayloadRef checks a ${payload.a.b} reference's syntax.
func checkPayloadRef(ref string) error {
	rest := strings.TrimPrefix(ref, payloadRef)
	for seg := range strings.SplitSeq(rest, ".") {
		if seg == "" || strings.ContainsAny(seg, " \t\n{}$") {
			return fmt.Errorf("malformed payload reference %s (use ${payload.field.subfield})", showRef(ref))
		}
	}
	return nil
}

// walkStrings visits every string value of a decoded YAML tree, replacing it by what fn
// returns, and reports fn's errors as problems at the value's field path. Map keys are
// visited in sorted order so problems come out in a stable order.
func walkStrings(v any, path string, c *problems, fn func(path, s string) (string, error)) any {
	switch t := v.(type) {
	case string:
		out, err := fn(path, t)
		if err != nil {
			c.add(path, "%v", err)
			return t
		}
		return out
	case map[string]any:
		for _, k := range sortedKeys(t) {
			t[k] = walkStrings(t[k], joinPath(path, k), c, fn)
		}
		return t
	case []any:
		for i := range t {
			t[i] = walkStrings(t[i], fmt.Sprintf("%s[%d]", path, i), c, fn)
		}
		return t
	default:
		return v
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// indexPattern matches the list indices of a field path, to compare paths by shape.
var indexPattern = regexp.MustCompile(`\[\d+\]`)

// pathShape turns "services[2].env[0].value" into "services[].env[].value".
func pathShape(path string) string { return indexPattern.ReplaceAllString(path, "[]") }

// pipelineRuntime says which pipeline fields keep trigger references for Resolve.
func pipelineRuntime(path string) string {
	switch shape := pathShape(path); {
	case shape == "services[].image_tag",
		shape == "services[].env[].value",
		shape == "services[].health.http.url",
		strings.HasPrefix(shape, "mobile[].set."):
		return triggerRef
	}
	return ""
}

// daemonRuntimePattern matches the daemon fields that keep payload references.
var daemonRuntimePattern = regexp.MustCompile(`^webhooks\.[a-z]+\.rules\[\]\.trigger\.`)

// daemonRuntime says which daemon fields keep payload references for WebhookRule.TriggerFor.
func daemonRuntime(path string) string {
	if daemonRuntimePattern.MatchString(pathShape(path)) {
		return payloadRef
	}
	return ""
}
