package config

import (
	"slices"
	"strings"
	"unicode"
)

// Coolify replaces {{team.KEY}}, {{project.KEY}} and {{environment.KEY}} in an env value by
// that shared variable's value when it builds and deploys (its SHARED_VARIABLE_TYPES; white
// space inside the braces does not matter). A trigger value that reached Coolify as such a
// reference would copy a shared variable (a team's database password) into the variable the
// pipeline sets, a public web app's build-time env included. Resolve refuses it, unless the
// env entry opts in (EnvVar.AllowSharedRefsFromTrigger).

// sharedRefScopes are the scopes of Coolify's shared variables.
var sharedRefScopes = []string{"team", "project", "environment"}

// span is the place [start, end) of a trigger value in a resolved string, and its reference.
type span struct {
	start, end int
	ref        string
}

// sharedRef is a shared-variable reference found in a value: its place and its scope.
type sharedRef struct {
	start, end int
	scope      string
}

// sharedRefs returns every text of s that Coolify could take for a shared-variable
// reference: "{{", a scope and a dot (white space and case aside), up to the next "}}".
// It looks from every "{{", so references that overlap ("{{{{team.X}}") are all found.
func sharedRefs(s string) []sharedRef {
	var out []sharedRef
	for i := 0; ; {
		j := strings.Index(s[i:], "{{")
		if j < 0 {
			return out
		}
		start := i + j
		end := strings.Index(s[start+2:], "}}")
		if end < 0 {
			return out
		}
		inner := strings.ToLower(strings.Map(func(r rune) rune {
			if unicode.IsSpace(r) {
				return -1
			}
			return r
		}, s[start+2:start+2+end]))
		for _, scope := range sharedRefScopes {
			if strings.HasPrefix(inner, scope+".") {
				out = append(out, sharedRef{start: start, end: start + 2 + end + 2, scope: scope})
				break
			}
		}
		i = start + 1
	}
}

// triggerSharedRefs returns, for the resolved value s whose trigger values lie at spans, the
// trigger references whose value is part of a shared-variable reference, each once, with the
// scope of the first reference it is part of. A reference made only of the file's own text
// (the operator's) is not one of them.
func triggerSharedRefs(s string, spans []span) (refs, scopes []string) {
	for _, r := range sharedRefs(s) {
		for _, sp := range spans {
			if sp.start < r.end && r.start < sp.end && !slices.Contains(refs, sp.ref) {
				refs = append(refs, sp.ref)
				scopes = append(scopes, r.scope)
			}
		}
	}
	return refs, scopes
}
