package config

import (
	"os"
	"reflect"
)

// Validate checks configuration files the way the daemon loads them and returns every
// problem found, in the order of paths; it is what `orchestrator validate FILE…` prints (one
// Problem.String() per line) before exiting non-zero. Each path may be:
//   - a pipeline file;
//   - a daemon config file (recognized by its top-level keys: listen, redis_url, tokens,
//     webhooks, …), which is checked together with the pipelines directory it names and its
//     webhook rules' pipeline names;
//   - a directory, checked as a pipelines directory.
//
// getenv resolves ${NAME} references (pass os.Getenv); an unset variable is a problem.
func Validate(getenv func(string) string, paths ...string) Problems {
	problems, _ := ValidateWithWarnings(getenv, paths...)
	return problems
}

// ValidateWithWarnings is Validate, plus warnings about what would fail at run time in this
// environment although the files are valid: env-source secrets that are not set (see
// MissingEnvSecrets).
func ValidateWithWarnings(getenv func(string) string, paths ...string) (problems, warnings Problems) {
	for _, p := range paths {
		probs, pipelines := validatePath(getenv, p)
		problems = append(problems, probs...)
		warnings = append(warnings, MissingEnvSecretsAll(pipelines, getenv)...)
	}
	return problems, warnings
}

// validatePath checks one path and returns its problems and the pipelines it loaded.
func validatePath(getenv func(string) string, path string) (Problems, map[string]*Pipeline) {
	st, err := os.Stat(path)
	if err != nil {
		return Problems{{File: path, Message: unwrapPathError(err)}}, nil
	}
	if st.IsDir() {
		ps, err := LoadPipelines(path, getenv)
		return AsProblems(err), ps
	}
	if !isDaemonFile(path) {
		p, err := LoadPipelineFile(path, getenv)
		if err != nil {
			return AsProblems(err), nil
		}
		return nil, map[string]*Pipeline{p.Name: p}
	}
	d, err := LoadDaemon(path, getenv, nil)
	if err != nil {
		return AsProblems(err), nil
	}
	pipelines, err := LoadPipelines(d.PipelinesDir, getenv)
	out := AsProblems(err)
	if err == nil {
		out = append(out, AsProblems(d.CheckRules(pipelines))...)
	}
	return out, pipelines
}

// isDaemonFile reports whether a file's top-level keys are a daemon config's rather than a
// pipeline's. Keys both kinds have (coolify) decide nothing. A file that can't be read or
// parsed counts as a pipeline, whose loader then reports why.
func isDaemonFile(path string) bool {
	data, err := readFile(path)
	if err != nil {
		return false
	}
	raw, ok := parseYAML(data, &problems{})
	if !ok {
		return false
	}
	daemonKeys := structFields(reflect.TypeFor[Daemon]())
	pipelineKeys := structFields(reflect.TypeFor[Pipeline]())
	daemon := false
	for k := range raw {
		_, inPipeline := pipelineKeys[k]
		_, inDaemon := daemonKeys[k]
		switch {
		case inPipeline && !inDaemon:
			return false
		case inDaemon && !inPipeline:
			daemon = true
		}
	}
	return daemon
}
