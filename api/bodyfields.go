package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"regexp"
	"slices"

	"github.com/deploy-orchestrator/orchestrator"
)

// A body whose fields are checked one by one, so that an answer names every field of a wrong
// type (and every unknown one) at once, instead of the first the JSON decoder met.

// bodyField is one field a body may carry: its JSON name, where its value goes, and what
// kind of value it wants (for the problem: "want a string").
type bodyField struct {
	name string
	dst  any
	want string
}

// stringField, boolField, buildField and paramsField are the kinds of field bodies carry.
func stringField(name string, dst *string) bodyField {
	return bodyField{name: name, dst: dst, want: "a string"}
}

func boolField(name string, dst *bool) bodyField {
	return bodyField{name: name, dst: dst, want: "a boolean"}
}

func buildField(dst *buildText) bodyField {
	return bodyField{name: "build", dst: dst, want: "a string or a whole number"}
}

func paramsField(dst *map[string]string) bodyField {
	return bodyField{name: "params", dst: dst, want: "an object of strings"}
}

// decodeFields decodes the fields of a JSON object (its members, raw) into fields. It returns a
// problem for every field whose value is of the wrong type (the field keeps its zero value)
// and, when strict, for every field the body names that is not one of fields. The problems
// are in the order of fields, unknown fields last (by name). A param of the wrong type is
// named "params.KEY".
func decodeFields(raw map[string]json.RawMessage, strict bool, fields ...bodyField) orchestrator.FieldErrors {
	var es orchestrator.FieldErrors
	known := map[string]bool{}
	for _, f := range fields {
		known[f.name] = true
		v, ok := raw[f.name]
		if !ok || isNull(v) {
			continue
		}
		if m, isMap := f.dst.(*map[string]string); isMap {
			es = append(es, decodeParams(f.name, v, m)...)
			continue
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			es = append(es, orchestrator.Fieldf(f.name, "got a JSON %s, want %s", jsonKindOf(v), f.want))
		}
	}
	if strict {
		var unknown []string
		for k := range raw {
			if !known[k] {
				unknown = append(unknown, k)
			}
		}
		slices.Sort(unknown)
		for _, k := range unknown {
			es = append(es, orchestrator.Fieldf(truncate(k, 64), "unknown field"))
		}
	}
	return es
}

// decodeParams decodes an object of strings into m, naming each value of the wrong type.
func decodeParams(name string, v json.RawMessage, m *map[string]string) orchestrator.FieldErrors {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil {
		return orchestrator.FieldErrors{orchestrator.Fieldf(name, "got a JSON %s, want an object of strings", jsonKindOf(v))}
	}
	var es orchestrator.FieldErrors
	out := make(map[string]string, len(raw))
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		var s string
		if err := json.Unmarshal(raw[k], &s); err != nil {
			es = append(es, orchestrator.Fieldf(name+"."+truncate(k, 64), "got a JSON %s, want a string", jsonKindOf(raw[k])))
			continue
		}
		out[k] = s
	}
	*m = out
	return es
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// jsonKindOf names the kind of a JSON value as a client thinks of it.
func jsonKindOf(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "value"
	}
	switch v[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// buildText is a trigger's build as a body carries it: a string, or a whole number (CI tools
// often send build numbers as numbers), taken as its decimal text exactly as written. It
// marshals as a string, so a trigger's digest (triggerBody.digest) is the same for "1004"
// and 1004.
type buildText string

// integerText is a JSON number that is a whole number, as written (no fraction, no exponent).
var integerText = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

var errNotBuild = errors.New("want a string or a whole number")

func (b *buildText) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*b = buildText(s)
		return nil
	}
	if isNull(data) {
		return nil
	}
	if !integerText.Match(data) {
		return errNotBuild
	}
	*b = buildText(data)
	return nil
}
