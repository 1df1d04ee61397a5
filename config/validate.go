package config

import (
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
)

// Validate checks configuration files the way the daemon loads them and returns every
// problem found, in the order of paths; it is what `orchestrator validate FILE…` prints (one
// Problem.String() per line) before exiting non-zero. Each path may be:
//   - a pipeline file;
//   - a daemon config file (recognized by its top-level keys: listen, redis_url, tokens,
//     webhooks, …), which is checked together with the pipelines directory it names and its
//     webhook rules' pipeline names;
//   - a directory: each *.yaml and *.yml file directly in it is classified and checked as
//     above, and the pipeline files among them together, as a pipelines directory (two
//     defining one name is a problem).
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
	problems, warnings, _ = ValidateAll(getenv, paths...)
	return problems, warnings
}

// ValidateAll is ValidateWithWarnings, plus notes: what is worth knowing about the pipelines
// and wrong in no way, the service UUIDs several of them deploy (SharedServices, over every
// pipeline the paths hold).
func ValidateAll(getenv func(string) string, paths ...string) (problems, warnings, notes Problems) {
	seen := map[string]bool{}
	all := map[string]*Pipeline{}
	for _, p := range paths {
		probs, loaded := validatePath(getenv, p)
		// A daemon config and the directory it names may both be given (or a directory
		// holding both): report each problem once.
		for _, pr := range probs {
			if !seen[pr.String()] {
				seen[pr.String()] = true
				problems = append(problems, pr)
			}
		}
		for _, pipelines := range loaded {
			for _, w := range MissingEnvSecretsAll(pipelines, getenv) {
				if !seen[w.String()] {
					seen[w.String()] = true
					warnings = append(warnings, w)
				}
			}
			for name, pl := range pipelines {
				if all[name] == nil {
					all[name] = pl
				}
			}
		}
	}
	return problems, warnings, SharedServices(all)
}

// SharedServices notes each service UUID that several of pipelines deploy, naming them, the
// name each gives it and its file. That is allowed: the stale-build guard compares each
// pipeline's builds with its own only (docs/guarantees.md, promise 4), and between the pipelines the last
// to deploy wins, one at a time under the service's lock.
func SharedServices(pipelines map[string]*Pipeline) Problems {
	type use struct{ pipeline, name, file string }
	uses := map[string][]use{}
	for _, name := range slices.Sorted(maps.Keys(pipelines)) {
		p := pipelines[name]
		for _, s := range p.Services {
			uses[s.UUID] = append(uses[s.UUID], use{name, s.Name, p.File})
		}
	}
	var out Problems
	for _, uuid := range slices.Sorted(maps.Keys(uses)) {
		us := uses[uuid]
		if len(us) < 2 {
			continue
		}
		by := make([]string, len(us))
		for i, u := range us {
			by[i] = fmt.Sprintf("%s (as %s", u.pipeline, u.name)
			if u.file != "" {
				by[i] += ", " + u.file
			}
			by[i] += ")"
		}
		out = append(out, Problem{Message: fmt.Sprintf("service UUID %s is deployed by %d pipelines: %s; each pipeline's builds are "+
			"compared with its own only, and between them the last to deploy wins", uuid, len(us), strings.Join(by, ", "))})
	}
	return out
}

// validatePath checks one path and returns its problems and the pipelines it loaded (one
// map per pipelines directory or file).
func validatePath(getenv func(string) string, path string) (Problems, []map[string]*Pipeline) {
	st, err := os.Stat(path)
	if err != nil {
		return Problems{{File: path, Message: unwrapPathError(err)}}, nil
	}
	if st.IsDir() {
		return validateDir(getenv, path)
	}
	probs, pipelines := validateSource(getenv, readSource(path))
	return probs, []map[string]*Pipeline{pipelines}
}

// validateDir checks the files of a directory as validatePath checks each file: the daemon
// configs as daemon configs, the pipelines together as LoadPipelines loads them. Each file is
// read and parsed once, then classified and checked from that.
func validateDir(getenv func(string) string, dir string) (Problems, []map[string]*Pipeline) {
	files, err := configFiles(dir)
	if err != nil {
		return Problems{{File: dir, Message: "read directory: " + unwrapPathError(err)}}, nil
	}
	var pipelineSrcs, daemons []source
	for _, path := range files {
		src := readDirSource(dir, path)
		if src.isDaemon() {
			daemons = append(daemons, src)
		} else {
			pipelineSrcs = append(pipelineSrcs, src)
		}
	}
	pipelines, err := loadPipelineSources(pipelineSrcs, getenv)
	out, loaded := AsProblems(err), []map[string]*Pipeline{pipelines}
	for _, src := range daemons {
		probs, ps := validateSource(getenv, src)
		out = append(out, probs...)
		loaded = append(loaded, ps)
	}
	return out, loaded
}

// validateSource checks one file, a pipeline or a daemon config (isDaemon), and returns its
// problems and the pipelines it loaded.
func validateSource(getenv func(string) string, src source) (Problems, map[string]*Pipeline) {
	if !src.isDaemon() {
		p, err := loadPipeline(src, getenv)
		if err != nil {
			return AsProblems(err), nil
		}
		return nil, map[string]*Pipeline{p.Name: p}
	}
	d, err := loadDaemon(src, getenv, nil)
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

// isDaemon reports whether a file's top-level keys are a daemon config's rather than a
// pipeline's. Keys both kinds have (coolify) decide nothing. A file that can't be read or
// parsed counts as a pipeline, whose loader then reports why.
func (s source) isDaemon() bool {
	raw := s.raw
	if raw == nil {
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
