// Package secrets is where Phase 1 gets the secret values it writes into a service's
// environment: from literal values in the pipeline file, from the daemon's own environment, or
// from Infisical (package secrets/infisical).
//
// A Source answers one question, "what are the values of these keys?", in one call, so a
// source backed by a remote service can serve many keys with one request. A Resolver sits
// above the sources for the length of one run: it groups the references it is given by
// source, asks each source once per batch, takes one snapshot of a source that can list
// everything at once (a Snapshotter, such as an Infisical folder), and remembers what it got
// until the run ends.
//
// Values never print their contents. Their String, GoString, Format, LogValue, MarshalJSON and
// MarshalText methods show key names only, so a Values that reaches a log line, an error or an
// API response by mistake leaks no secret. Errors name the missing key and the source, never a
// value.
package secrets

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
)

// redacted stands in for every secret value that is printed or encoded.
const redacted = "[redacted]"

// Values is an immutable set of secret values by key. The zero value is empty and ready to
// use. Values can be copied freely; copies share the same read-only data.
//
// Printing, logging or encoding a Values shows its key names and never a value. The map lives
// in a closure, which fmt prints as an address whatever the verb, so even a struct that holds a
// Values in an unexported field (where fmt cannot call its methods) prints no value.
type Values struct {
	m func() map[string]string // nil for the zero Values
}

// data returns the map (nil for the zero Values). Callers must not modify it.
func (v Values) data() map[string]string {
	if v.m == nil {
		return nil
	}
	return v.m()
}

// NewValues returns Values holding a copy of m.
func NewValues(m map[string]string) Values {
	if len(m) == 0 {
		return Values{}
	}
	c := maps.Clone(m)
	return Values{m: func() map[string]string { return c }}
}

// Get returns the value of key and whether it is present. An empty value that is present is
// reported as present.
func (v Values) Get(key string) (string, bool) {
	s, ok := v.data()[key]
	return s, ok
}

// Len is the number of keys.
func (v Values) Len() int {
	return len(v.data())
}

// Keys returns the key names, sorted.
func (v Values) Keys() []string {
	if v.m == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(v.data()))
}

// Pick returns the values of keys, in a new Values, and the keys that are absent, in the
// order asked (each once).
func (v Values) Pick(keys []string) (Values, []string) {
	out := make(map[string]string, len(keys))
	var missing []string
	for _, k := range keys {
		if _, seen := out[k]; seen || slices.Contains(missing, k) {
			continue
		}
		if s, ok := v.Get(k); ok {
			out[k] = s
		} else {
			missing = append(missing, k)
		}
	}
	return NewValues(out), missing
}

// String shows the key names and hides the values.
func (v Values) String() string { return describe("secrets.Values", v.Keys()) }

// describe renders "typ{name: [redacted], …}".
func describe(typ string, names []string) string {
	var b strings.Builder
	b.WriteString(typ)
	b.WriteString("{")
	for i, k := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteString(": ")
		b.WriteString(redacted)
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String, so %#v hides the values too.
func (v Values) GoString() string { return v.String() }

// Format prints String for every verb (%s, %v, %+v, %#v, %q, %x, …), so no verb reveals a
// value.
func (v Values) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(v.String())) }

// LogValue makes slog show the key names only.
func (v Values) LogValue() slog.Value { return slog.StringValue(v.String()) }

// MarshalJSON encodes every value as "[redacted]".
func (v Values) MarshalJSON() ([]byte, error) {
	out := make(map[string]string, v.Len())
	for _, k := range v.Keys() {
		out[k] = redacted
	}
	return json.Marshal(out)
}

// MarshalText is String, for encoders that prefer text.
func (v Values) MarshalText() ([]byte, error) { return []byte(v.String()), nil }
