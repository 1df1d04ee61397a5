package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
)

// Problem is one thing wrong with a configuration file. It never holds a secret or a value
// read from the environment.
type Problem struct {
	File    string // path of the file ("" for environment or flags)
	Field   string // field path, e.g. "services[2].uuid"; "" for the file as a whole
	Message string // what is wrong, lowercase
	// Trigger is the trigger field the problem is about ("image_tag", "params.region"), set by
	// Resolve where a trigger value is invalid or missing for a reference: the field a front
	// door names. "" for problems of the file itself.
	Trigger string
	// Refused says the trigger's value is well formed, but the pipeline refuses what it would
	// do (orchestrator.FieldError.Refused): a front door answers 422 when every problem is one.
	Refused bool
}

// String returns "file: field: what is wrong", leaving out the parts that are empty.
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteString(": ")
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Problems is every problem found; it is the error type LoadPipelineFile, LoadPipelines,
// LoadDaemon and Validate return when a configuration is invalid. Use errors.As to get it.
type Problems []Problem

// Error lists the problems one per line.
func (ps Problems) Error() string { return strings.Join(ps.Lines(), "\n") }

// Lines returns the problems as "file: field: what is wrong" lines.
func (ps Problems) Lines() []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// Is makes Problems match orchestrator.ErrInvalid.
func (ps Problems) Is(target error) bool { return target == orchestrator.ErrInvalid }

// As converts ps to orchestrator.FieldErrors (errors.As), each naming the problem's Trigger
// field when it has one and its Field otherwise.
func (ps Problems) As(target any) bool {
	t, ok := target.(*orchestrator.FieldErrors)
	if !ok {
		return false
	}
	es := make(orchestrator.FieldErrors, len(ps))
	for i, p := range ps {
		field := p.Field
		if p.Trigger != "" {
			field = p.Trigger
		}
		es[i] = &orchestrator.FieldError{Field: field, Reason: p.Message, Refused: p.Refused}
	}
	*t = es
	return true
}

// Err returns ps as an error, or nil when there are none.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// AsProblems extracts the Problems in err (possibly wrapped); a non-nil error of another kind
// becomes a single Problem with its text.
func AsProblems(err error) Problems {
	if err == nil {
		return nil
	}
	var ps Problems
	if errors.As(err, &ps) {
		return ps
	}
	return Problems{{Message: err.Error()}}
}

// problems collects the problems of one file.
type problems struct {
	file string
	list Problems
}

func (c *problems) add(field, format string, args ...any) {
	c.put(Problem{File: c.file, Field: field, Message: fmt.Sprintf(format, args...)})
}

// addTrigger adds a problem at field that is about the trigger's field trigger.
func (c *problems) addTrigger(field, trigger, format string, args ...any) {
	c.put(Problem{File: c.file, Field: field, Trigger: trigger, Message: fmt.Sprintf(format, args...)})
}

// addRefused adds a refusal (Problem.Refused) at field about the trigger's field trigger.
func (c *problems) addRefused(field, trigger, format string, args ...any) {
	c.put(Problem{File: c.file, Field: field, Trigger: trigger, Refused: true, Message: fmt.Sprintf(format, args...)})
}

// put adds p, its field path made safe to show (safeField), unless the same problem is
// listed already.
func (c *problems) put(p Problem) {
	p.Field = safeField(p.Field)
	if !slices.Contains(c.list, p) {
		c.list = append(c.list, p)
	}
}

// keySegment is a part of a field path that looks like a field name or a map key a file
// means as one (a param, a mobile set path), with its list indices.
var keySegment = regexp.MustCompile(`^[A-Za-z0-9_-]{0,64}(\[\d+\])*$`)

// hiddenKey stands in a field path for a key that is not shown.
const hiddenKey = "(key not shown)"

// safeField returns a field path with every part that does not look like a field name
// replaced by hiddenKey. A field path holds the file's keys, and a file that is no config (a
// shadow file linked in, a secret pasted alone) has its content in its keys: a line such as
// "root:$6$…:19000:0:99999:7:::" is a YAML key. A problem names the key, never the content.
func safeField(path string) string {
	if path == "" {
		return ""
	}
	parts := strings.Split(path, ".")
	for i, part := range parts {
		if !keySegment.MatchString(part) {
			parts[i] = hiddenKey
		}
	}
	return strings.Join(parts, ".")
}

// sortByField orders one file's problems the way its fields are declared in t (which is the
// order the samples and most files are written in), list entries by index, unknown fields
// after known ones. The sort is stable, so problems on one field keep their order.
func sortByField(ps Problems, t reflect.Type) {
	keys := make(map[string][]int, len(ps))
	for _, p := range ps {
		if _, ok := keys[p.Field]; !ok {
			keys[p.Field] = fieldOrder(t, p.Field)
		}
	}
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return slices.Compare(keys[a.Field], keys[b.Field])
	})
}

// unknownOrder sorts unknown fields after every declared one.
const unknownOrder = 1 << 20

// fieldOrder turns a field path such as "services[2].env[0].key" into the declaration
// indices and list indices along it.
func fieldOrder(t reflect.Type, path string) []int {
	var out []int
	for path != "" {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Slice:
			end := strings.IndexByte(path, ']')
			if !strings.HasPrefix(path, "[") || end < 0 {
				return append(out, unknownOrder)
			}
			n, err := strconv.Atoi(path[1:end])
			if err != nil {
				return append(out, unknownOrder)
			}
			out = append(out, n)
			path, t = strings.TrimPrefix(path[end+1:], "."), t.Elem()
		case reflect.Struct:
			name := path
			if i := strings.IndexAny(path, ".["); i >= 0 {
				name = path[:i]
			}
			path = strings.TrimPrefix(path[len(name):], ".")
			idx, ft := fieldIndex(t, name)
			out = append(out, idx)
			if ft == nil {
				return out
			}
			t = ft
		default: // a map key or a leaf: the rest does not order
			return out
		}
	}
	return out
}

// fieldIndex returns the declaration index and type of the field tagged name.
func fieldIndex(t reflect.Type, name string) (int, reflect.Type) {
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("koanf"), ","); tag == name {
			return i, t.Field(i).Type
		}
	}
	return unknownOrder, nil
}
