package mobile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
)

// ErrChange: a change cannot be applied to the current value (wrong JSON type, a path
// through a non-object, an unparseable version). The step fails without writing.
var ErrChange = errors.New("change does not apply")

// Change sets one field of a feature's JSON document, or the whole value.
type Change struct {
	// Path names the field by dotted path, e.g. "ios.latest_version". Missing objects on the
	// way are created. An empty Path replaces the whole value, which must keep its JSON type
	// (an integer feature takes an integer, a boolean feature a boolean, a string feature a
	// string).
	Path string `json:"path"`
	// Value is the new value: anything encoding/json encodes (a string, a number, a bool, a
	// map, nil).
	Value any `json:"value"`
	// NeverDowngrade keeps a version from going down: when both the current and the new
	// value are versions and the new one is lower, the change is skipped (and reported in
	// Result.Skipped). Versions are compared numerically segment by segment ("2.10.0" >
	// "2.9.1"; "2.4" == "2.4.0"; a leading "v" and build metadata are ignored; a pre-release
	// is lower than its release). A value that is not a version fails the step.
	NeverDowngrade bool `json:"never_downgrade,omitempty"`
}

func (c Change) String() string {
	b, _ := json.Marshal(c.Value)
	p := c.Path
	if p == "" {
		p = "(value)"
	}
	return p + "=" + string(b)
}

// Skipped is a change the never-downgrade rule left out.
type Skipped struct {
	Path    string `json:"path"`
	Current string `json:"current"`
	Wanted  string `json:"wanted"`
}

// apply returns cur with changes applied, the changes skipped by the never-downgrade rule,
// and whether the result differs from cur.
func apply(cur Value, changes []Change) (Value, []Skipped, bool, error) {
	var whole, fields []Change
	for _, c := range changes {
		if c.Path == "" {
			whole = append(whole, c)
		} else {
			fields = append(fields, c)
		}
	}
	if len(whole) > 0 && len(fields) > 0 {
		return Value{}, nil, false, fmt.Errorf("%w: a change of the whole value cannot be mixed with field changes", ErrChange)
	}
	if len(whole) > 0 {
		return applyWhole(cur, whole)
	}
	return applyFields(cur, fields)
}

func applyWhole(cur Value, changes []Change) (Value, []Skipped, bool, error) {
	next := cur
	var skipped []Skipped
	for _, c := range changes {
		v, err := valueOf(c.Value)
		if err != nil {
			return Value{}, nil, false, fmt.Errorf("%w: %s: %v", ErrChange, c, err)
		}
		if next.Kind != KindNull && v.Kind != next.Kind {
			return Value{}, nil, false, fmt.Errorf("%w: %s: the feature holds a %s, the change is a %s (the type is kept)", ErrChange, c, next.Kind, v.Kind)
		}
		if c.NeverDowngrade && next.Kind == KindString && v.Kind == KindString && next.Str != "" {
			lower, err := versionLess(v.Str, next.Str)
			if err != nil {
				return Value{}, nil, false, fmt.Errorf("%w: %s: %v", ErrChange, c, err)
			}
			if lower {
				skipped = append(skipped, Skipped{Path: c.Path, Current: next.Str, Wanted: v.Str})
				continue
			}
		}
		next = v
	}
	return next, skipped, next != cur, nil
}

// valueOf converts a change's whole-value Go value into a Value.
func valueOf(x any) (Value, error) {
	b, err := json.Marshal(x)
	if err != nil {
		return Value{}, err
	}
	var v Value
	if err := v.UnmarshalJSON(b); err != nil {
		return Value{}, fmt.Errorf("a whole feature value must be a string, an integer, a boolean or null")
	}
	return v, nil
}

func applyFields(cur Value, changes []Change) (Value, []Skipped, bool, error) {
	if len(changes) == 0 {
		return cur, nil, false, nil
	}
	var doc *object
	switch {
	case cur.Kind == KindNull || (cur.Kind == KindString && strings.TrimSpace(cur.Str) == ""):
		doc = &object{vals: map[string]any{}}
	case cur.Kind == KindString:
		d, err := parseDocument(cur.Str)
		if err != nil {
			return Value{}, nil, false, fmt.Errorf("%w: the feature value is not a JSON object: %v", ErrChange, err)
		}
		doc = d
	default:
		return Value{}, nil, false, fmt.Errorf("%w: the feature holds a %s, not a JSON document", ErrChange, cur.Kind)
	}
	before := doc.encode()
	var skipped []Skipped
	for _, c := range changes {
		s, err := doc.set(c)
		if err != nil {
			return Value{}, nil, false, fmt.Errorf("%w: %s: %v", ErrChange, c, err)
		}
		if s != nil {
			skipped = append(skipped, *s)
		}
	}
	after := doc.encode()
	if cur.Kind == KindString && after == before {
		return cur, skipped, false, nil
	}
	return StringValue(after), skipped, true, nil
}

// object is a JSON object that keeps its keys in document order, so a write changes only
// what the step changed. Values are *object, []any, json.Number, string, bool or nil.
type object struct {
	keys []string
	vals map[string]any
}

func parseDocument(text string) (*object, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	v, err := decodeAny(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON document")
	}
	o, ok := v.(*object)
	if !ok {
		return nil, errors.New("the JSON text is not an object")
	}
	return o, nil
}

func decodeAny(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := decodeAny(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := dec.Token() // '}'
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := decodeAny(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token() // ']'
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// encode renders the document compactly, keys in document order, without escaping HTML
// characters (the text is stored, not embedded in a page).
func (o *object) encode() string {
	var b bytes.Buffer
	writeJSON(&b, o)
	return b.String()
}

func writeJSON(b *bytes.Buffer, v any) {
	switch t := v.(type) {
	case *object:
		b.WriteByte('{')
		for i, k := range t.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, k)
			b.WriteByte(':')
			writeJSON(b, t.vals[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, e)
		}
		b.WriteByte(']')
	case json.Number:
		b.WriteString(t.String())
	case string:
		enc := json.NewEncoder(b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(t)       // a string always encodes
		b.Truncate(b.Len() - 1) // Encode's newline
	case bool:
		b.WriteString(strconv.FormatBool(t))
	default:
		b.WriteString("null")
	}
}

// set applies one field change; it returns a Skipped when the never-downgrade rule keeps
// the current value.
func (o *object) set(c Change) (*Skipped, error) {
	segs := strings.Split(c.Path, ".")
	for _, s := range segs {
		if s == "" {
			return nil, errors.New("empty segment in the path")
		}
	}
	raw, err := json.Marshal(c.Value)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	nv, err := decodeAny(dec)
	if err != nil {
		return nil, err
	}
	if c.NeverDowngrade {
		if curRaw, ok := o.get(segs); ok && curRaw != nil {
			cur, ok1 := curRaw.(string)
			want, ok2 := nv.(string)
			if !ok1 || !ok2 {
				return nil, errors.New("never-downgrade compares versions written as JSON strings")
			}
			lower, err := versionLess(want, cur)
			if err != nil {
				return nil, err
			}
			if lower {
				return &Skipped{Path: c.Path, Current: cur, Wanted: want}, nil
			}
		}
	}
	return nil, o.putPath(segs, nv)
}

func (o *object) put(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func versionLess(a, b string) (bool, error) {
	c, err := orchestrator.CompareVersions(a, b)
	return c < 0, err
}
