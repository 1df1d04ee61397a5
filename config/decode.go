package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/v2"
)

// maxFileSize caps a configuration file; anything larger is refused before parsing.
const maxFileSize = 1 << 20

var durationType = reflect.TypeFor[time.Duration]()

// decodeHook converts what YAML, the environment and flags produce into the config's field
// types. Its errors never quote the value: it may have come from the environment.
func decodeHook(from, to reflect.Type, data any) (any, error) {
	if to == durationType {
		switch v := data.(type) {
		case string:
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return nil, errors.New("invalid duration (write a number with a unit, e.g. 30s or 10m)")
			}
			return d, nil
		case int, int64, uint64:
			if reflect.ValueOf(v).IsZero() {
				return time.Duration(0), nil
			}
			return nil, errors.New("a duration needs a unit (e.g. 30s or 10m)")
		case float64:
			return nil, errors.New("a duration needs a unit (e.g. 30s or 10m)")
		}
		return data, nil
	}
	switch to.Kind() {
	case reflect.String:
		switch v := data.(type) {
		case int:
			return strconv.Itoa(v), nil
		case int64:
			return strconv.FormatInt(v, 10), nil
		case uint64:
			return strconv.FormatUint(v, 10), nil
		case bool:
			return strconv.FormatBool(v), nil
		case float64:
			return nil, errors.New("want a string, got a number with a fraction: quote it so it is kept as written")
		}
	case reflect.Int, reflect.Int64:
		if s, ok := data.(string); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return nil, errors.New("want an integer")
			}
			return n, nil
		}
	case reflect.Float64:
		if s, ok := data.(string); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil {
				return nil, errors.New("want a number")
			}
			return f, nil
		}
	case reflect.Bool:
		if s, ok := data.(string); ok {
			b, err := strconv.ParseBool(strings.TrimSpace(s))
			if err != nil {
				return nil, errors.New("want true or false")
			}
			return b, nil
		}
	}
	return data, nil
}

// decode unmarshals ko's whole tree into out with the config's hooks, adding a problem per
// field that could not be decoded. Unknown keys are found before, by checkKeys.
func decode(ko *koanf.Koanf, out any, c *problems) {
	err := ko.UnmarshalWithConf("", out, koanf.UnmarshalConf{
		Tag: "koanf",
		DecoderConfig: &mapstructure.DecoderConfig{
			DecodeHook:       mapstructure.DecodeHookFuncType(decodeHook),
			WeaklyTypedInput: false,
			ZeroFields:       false,
			Squash:           false,
		},
	})
	for _, e := range leafErrors(err) {
		field, msg := "", ""
		var de *mapstructure.DecodeError
		if errors.As(e, &de) {
			field, msg = de.Name(), describeDecodeError(de.Unwrap())
		} else {
			msg = describeDecodeError(e)
		}
		c.put(Problem{File: c.file, Field: field, Message: msg})
	}
}

// leafErrors flattens joined errors: mapstructure joins one error per field, sometimes
// inside a DecodeError of the enclosing field.
func leafErrors(err error) []error {
	if err == nil {
		return nil
	}
	var children []error
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		children = e.Unwrap()
	case *mapstructure.DecodeError:
		if j, ok := e.Unwrap().(interface{ Unwrap() []error }); ok {
			children = j.Unwrap()
		}
	case interface{ Unwrap() error }:
		// Decode wraps several errors as "decoding failed due to the following error(s)".
		if inner, isJoin := e.Unwrap().(interface{ Unwrap() []error }); isJoin {
			children = inner.Unwrap()
		}
	}
	if children == nil {
		return []error{err}
	}
	var out []error
	for _, e := range children {
		out = append(out, leafErrors(e)...)
	}
	return out
}

// describeDecodeError turns a mapstructure error into a message that names the expected
// and found kinds, never the value.
func describeDecodeError(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "must be an array or slice"):
		return "want a list, got " + afterGot(msg)
	case strings.Contains(msg, "expected a map or struct"), strings.Contains(msg, "needs a map with string keys"):
		return "want a mapping, got " + afterGot(msg)
	}
	var ute *mapstructure.UnconvertibleTypeError
	if errors.As(err, &ute) {
		return fmt.Sprintf("want %s, got %s", kindName(ute.Expected.Type()), valueKind(ute.Value))
	}
	var pe *mapstructure.ParseError
	if errors.As(err, &pe) {
		return "want " + kindName(pe.Expected.Type())
	}
	return msg
}

// afterGot names the kind a mapstructure message says it got.
func afterGot(msg string) string {
	_, got, ok := strings.Cut(msg, "got ")
	if !ok {
		return "something else"
	}
	got = strings.Trim(got, `"'`)
	switch got {
	case "int", "int64", "uint64":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "float64":
		return "a number"
	case "slice":
		return "a list"
	case "map":
		return "a mapping"
	}
	return "a " + got
}

func kindName(t reflect.Type) string {
	if t == durationType {
		return "a duration (e.g. 30s)"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	case reflect.Pointer:
		return kindName(t.Elem())
	}
	return t.String()
}

func valueKind(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case bool:
		return "true or false"
	case int, int64, uint64:
		return "an integer"
	case float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	case time.Time:
		return "a timestamp (quote it to keep it as text)"
	}
	return "a " + reflect.TypeOf(v).Kind().String()
}

// checkKeys reports every key of raw (a decoded YAML tree) that has no field in t, with its
// field path and the known keys at that level. It only recurses where the shapes agree;
// decode reports shape mismatches.
func checkKeys(raw any, t reflect.Type, path string, c *problems) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if t == durationType {
			return
		}
		m, ok := raw.(map[string]any)
		if !ok {
			return
		}
		fields := structFields(t)
		for _, k := range sortedKeys(m) {
			f, ok := fields[k]
			if !ok {
				c.add(joinPath(path, k), "unknown field (known here: %s)", strings.Join(sortedKeys(fields), ", "))
				continue
			}
			checkKeys(m[k], f, joinPath(path, k), c)
		}
	case reflect.Slice:
		if l, ok := raw.([]any); ok {
			for i, e := range l {
				checkKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), c)
			}
		}
	case reflect.Map:
		if m, ok := raw.(map[string]any); ok {
			for _, k := range sortedKeys(m) {
				checkKeys(m[k], t.Elem(), joinPath(path, k), c)
			}
		}
	}
}

// structFields maps the koanf tag names of t's fields to their types ("-" excluded), those
// of a struct field tagged ",squash" among them.
func structFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("koanf"), ",")
		if opts == "squash" && f.Type.Kind() == reflect.Struct {
			maps.Copy(out, structFields(f.Type))
			continue
		}
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		out[name] = f.Type
	}
	return out
}

// setDefault sets m[path...] to v when that key is absent or null, creating the maps on the
// way. It leaves m alone when an intermediate value is present but not a mapping (decode
// reports that).
func setDefault(m map[string]any, v any, path ...string) {
	for _, k := range path[:len(path)-1] {
		next, present := m[k]
		if !present || next == nil {
			nm := map[string]any{}
			m[k] = nm
			m = nm
			continue
		}
		nm, ok := next.(map[string]any)
		if !ok {
			return
		}
		m = nm
	}
	last := path[len(path)-1]
	if cur, ok := m[last]; !ok || cur == nil {
		m[last] = v
	}
}
