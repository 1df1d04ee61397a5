package secrets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Source resolves secret keys to values.
//
// Fetch returns the values of keys, all of them, in one call; a remote source makes one round
// trip per call however many keys are asked. It returns an error wrapping ErrMissing (a
// *MissingError that names the absent keys and the source) when any key is absent, the
// context's error when ctx ends first, and the source's own error otherwise (for example
// *infisical.APIError). Errors never contain a value. Fetch with no keys returns empty Values.
// Implementations are safe for concurrent use.
type Source interface {
	Fetch(ctx context.Context, keys []string) (Values, error)
}

// ErrMissing is matched (errors.Is) by every error that reports an absent key.
var ErrMissing = errors.New("secret not found")

// MissingError reports keys that a source does not have. It names the keys and the source,
// never a value.
type MissingError struct {
	// Source describes where the keys were looked up, e.g. `environment (prefix "ORCH_")` or
	// `infisical project "p1" environment "prod" path "/api"`.
	Source string
	// Keys are the absent keys, in the order they were asked.
	Keys []string
}

func (e *MissingError) Error() string {
	noun := "key"
	if len(e.Keys) != 1 {
		noun = "keys"
	}
	return fmt.Sprintf("%s: %s %s not found", e.Source, noun, strings.Join(e.Keys, ", "))
}

// Is makes errors.Is(err, ErrMissing) true.
func (e *MissingError) Is(target error) bool { return target == ErrMissing }

// Literal is a Source of values written in the pipeline file. It is a value type: build it
// with NewLiteral and share it freely.
type Literal struct {
	vals Values
}

// NewLiteral returns a Source serving a copy of m.
func NewLiteral(m map[string]string) Literal { return Literal{vals: NewValues(m)} }

// Fetch returns the requested keys. It returns a *MissingError (ErrMissing) naming the keys
// the pipeline does not define, or ctx's error if ctx has already ended.
func (l Literal) Fetch(ctx context.Context, keys []string) (Values, error) {
	if err := ctx.Err(); err != nil {
		return Values{}, err
	}
	got, missing := l.vals.Pick(keys)
	if len(missing) > 0 {
		return Values{}, &MissingError{Source: "pipeline literal values", Keys: missing}
	}
	return got, nil
}

// String names the source and its keys, never a value.
func (l Literal) String() string { return "secrets.Literal(" + strings.Join(l.vals.Keys(), ", ") + ")" }

// Env is a Source that reads the daemon's environment through a getenv function (os.Getenv in
// production, a map in tests), never the process environment directly.
//
// The key K is read from the variable Prefix+K. A prefix such as "ORCH_SECRET_" keeps pipeline
// files from reading arbitrary variables of the daemon (its admin token, its Redis password):
// set one in production. A variable that is unset or empty counts as missing, since getenv
// cannot tell the two apart.
type Env struct {
	getenv func(string) string
	prefix string
}

// NewEnv returns a Source reading prefix+key through getenv. getenv must not be nil.
func NewEnv(getenv func(string) string, prefix string) Env {
	return Env{getenv: getenv, prefix: prefix}
}

// Fetch returns the requested keys. It returns a *MissingError (ErrMissing) naming every key
// whose variable is unset or empty, or ctx's error if ctx has already ended.
func (e Env) Fetch(ctx context.Context, keys []string) (Values, error) {
	if err := ctx.Err(); err != nil {
		return Values{}, err
	}
	out := make(map[string]string, len(keys))
	var missing []string
	for _, k := range keys {
		if _, seen := out[k]; seen {
			continue
		}
		if v := e.getenv(e.prefix + k); v != "" {
			out[k] = v
		} else if !slices.Contains(missing, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return Values{}, &MissingError{Source: e.String(), Keys: missing}
	}
	return NewValues(out), nil
}

// String describes the source: "environment" and its prefix.
func (e Env) String() string {
	if e.prefix == "" {
		return "environment"
	}
	return fmt.Sprintf("environment (prefix %q)", e.prefix)
}
