package analysis

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/VictoriaMetrics/metricsql"
)

// Placeholders a query may use. PerService ones make the check run once per service.
const (
	Service  = "service"   // the service's name in the pipeline
	UUID     = "uuid"      // the service's Coolify UUID
	Pipeline = "pipeline"  // the pipeline's name
	RunID    = "run"       // the run's ID
	ImageTag = "image_tag" // the service's image tag (the trigger's for a release-wide check)
	Build    = "build"     // the trigger's build
)

// Placeholders lists every placeholder, in the order the docs give them.
var Placeholders = []string{Service, UUID, Pipeline, RunID, ImageTag, Build}

var placeholderRE = regexp.MustCompile(`\{\{\s*([A-Za-z_]*)\s*\}\}`)

// regexMatcherRE finds a placeholder right after a regular-expression label matcher.
var regexMatcherRE = regexp.MustCompile(`[=!]~\s*\{\{`)

// Uses returns the placeholders q uses, each once, in order of first use.
func Uses(q string) []string {
	var out []string
	for _, m := range placeholderRE.FindAllStringSubmatch(q, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// PerService reports whether q names a service ({{service}} or {{uuid}}): such a check runs
// once for each service deployed, the others once per analysis.
func PerService(q string) bool {
	u := Uses(q)
	return slices.Contains(u, Service) || slices.Contains(u, UUID)
}

// CheckQuery checks a query template without a server: every placeholder is known and stands
// where its value may not be read as a pattern, and the query, with each placeholder
// replaced by a string, parses. The parser is MetricsQL's, a superset of PromQL: a query
// it accepts may still be refused by Prometheus, which the engine asks before a run writes
// anything (Validate).
func CheckQuery(q string) error {
	if strings.TrimSpace(q) == "" {
		return fmt.Errorf("is empty")
	}
	for _, name := range Uses(q) {
		if !slices.Contains(Placeholders, name) {
			return fmt.Errorf("unknown placeholder {{%s}}; want one of %s", name, strings.Join(Placeholders, ", "))
		}
	}
	if regexMatcherRE.MatchString(q) {
		return fmt.Errorf("a placeholder after =~ or !~ would be read as a regular expression; use = or !=")
	}
	vals := map[string]string{}
	for _, p := range Placeholders {
		vals[p] = "x"
	}
	r, err := Render(q, vals)
	if err != nil {
		return err
	}
	if _, err := metricsql.Parse(r); err != nil {
		return fmt.Errorf("does not parse: %v", err)
	}
	return nil
}

// Render replaces every placeholder of q by its value from vals as a double-quoted PromQL
// string literal (PromQL reads Go's escapes in one), so no value can add PromQL of its own.
// A placeholder without a value is an error.
func Render(q string, vals map[string]string) (string, error) {
	var missing []string
	out := placeholderRE.ReplaceAllStringFunc(q, func(m string) string {
		name := placeholderRE.FindStringSubmatch(m)[1]
		v, ok := vals[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return strconv.Quote(v)
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("no value for {{%s}}", strings.Join(missing, "}}, {{"))
	}
	return out, nil
}
