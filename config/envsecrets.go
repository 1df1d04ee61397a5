package config

import (
	"fmt"
	"slices"
)

// EnvSecretPrefix is prepended to the keys of the built-in "env" secret source: a pipeline's
// { source: env, key: DB_PASSWORD } reads ORCH_SECRET_DB_PASSWORD from the daemon's
// environment, and never the daemon's own settings.
const EnvSecretPrefix = "ORCH_SECRET_"

// MissingEnvSecrets reports every env-source secret a pipeline reads whose variable
// (EnvSecretPrefix + key) getenv does not return, one problem per env var naming the
// pipeline file, the field and the variable to set. A run of the pipeline would fail in
// Phase 1 on each of them. Values are never read beyond "set or not".
func MissingEnvSecrets(p *Pipeline, getenv func(string) string) Problems {
	var out Problems
	for i, s := range p.Services {
		for j, e := range s.Env {
			if e.Secret == nil || e.Secret.Source != EnvSource {
				continue
			}
			if name := EnvSecretPrefix + e.Secret.Key; getenv(name) == "" {
				out = append(out, Problem{File: p.File, Field: fmt.Sprintf("services[%d].env[%d].secret", i, j),
					Message: fmt.Sprintf("%s is not set in this environment: a run would fail in Phase 1 (set it where the daemon runs)", name)})
			}
		}
	}
	return out
}

// MissingEnvSecretsAll is MissingEnvSecrets over several pipelines, in name order.
func MissingEnvSecretsAll(pipelines map[string]*Pipeline, getenv func(string) string) Problems {
	names := make([]string, 0, len(pipelines))
	for n := range pipelines {
		names = append(names, n)
	}
	slices.Sort(names)
	var out Problems
	for _, n := range names {
		out = append(out, MissingEnvSecrets(pipelines[n], getenv)...)
	}
	return out
}
