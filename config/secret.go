package config

import (
	"fmt"
	"io"
	"log/slog"
)

// redacted is what a Secret shows instead of its value.
const redacted = "[redacted]"

// Secret is a string that must never be shown: tokens, webhook secrets, passwords inside URLs,
// environment-variable values. Every textual form of it (String, GoString, fmt verbs, slog,
// JSON, text and YAML marshaling) prints "[redacted]", or "" when it is empty so that "not set"
// stays visible. Reveal returns the value for the one place that must send it.
type Secret string

// Reveal returns the secret's value. Call it only where the value is sent to the system that
// needs it, never to build a log line, an error or a report.
func (s Secret) Reveal() string { return string(s) }

// IsSet reports whether the secret holds a non-empty value.
func (s Secret) IsSet() bool { return s != "" }

func (s Secret) shown() string {
	if s == "" {
		return ""
	}
	return redacted
}

// String returns "[redacted]" (or "" when empty).
func (s Secret) String() string { return s.shown() }

// GoString returns the redacted form quoted, for %#v.
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.shown()) }

// Format prints the redacted form for every fmt verb, so %s, %v, %q, %x and %d can't leak it.
func (s Secret) Format(f fmt.State, verb rune) {
	switch verb {
	case 'q':
		fmt.Fprintf(f, "%q", s.shown())
	default:
		_, _ = io.WriteString(f, s.shown())
	}
}

// LogValue makes slog print the redacted form.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.shown()) }

// MarshalText returns the redacted form; it also covers JSON and YAML encoders.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.shown()), nil }

// MarshalJSON returns the redacted form as a JSON string.
func (s Secret) MarshalJSON() ([]byte, error) { return fmt.Appendf(nil, "%q", s.shown()), nil }
