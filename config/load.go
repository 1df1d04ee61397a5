package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/v2"
)

// LoadPipelineFile loads and validates one pipeline file. getenv resolves ${NAME}
// references (pass os.Getenv). The pipeline's name defaults to the file's base name without
// extension.
//
// Errors: Problems listing everything wrong with the file (unreadable, invalid YAML, unknown
// fields, unset variables, invalid values), each naming the file and the field.
func LoadPipelineFile(path string, getenv func(string) string) (*Pipeline, error) {
	return loadPipeline(readSource(path), getenv)
}

// LoadPipelineBytes is LoadPipelineFile on data already read; file names it in problems and
// gives the default pipeline name.
//
// Errors: Problems, as for LoadPipelineFile.
func LoadPipelineBytes(file string, data []byte, getenv func(string) string) (*Pipeline, error) {
	return loadPipeline(parseSource(file, data), getenv)
}

// loadPipeline loads and validates the pipeline of a file read and parsed (or the problems
// that kept it from being parsed).
func loadPipeline(src source, getenv func(string) string) (*Pipeline, error) {
	if src.raw == nil {
		return nil, src.problems
	}
	file, raw := src.path, src.raw
	c := &problems{file: file}
	x := &loadExpander{getenv: getenv, runtime: pipelineRuntime, fromEnv: map[string]bool{}}
	walkStrings(raw, "", c, x.expand)
	// Values whose ${NAME} could not be filled are not checked again.
	unexpanded := slices.Clone(c.list)
	checkKeys(raw, reflect.TypeFor[Pipeline](), "", c)
	checkEnvEntries(raw, c)
	pipelineDefaults(raw)

	var p Pipeline
	decodeProblems := decodeTree(raw, &p, c)
	p.File = file
	if p.Name == "" {
		p.Name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	applyPipelineDefaults(&p, x.fromEnv)

	v := &validator{problems: &problems{file: file}, fromEnv: x.fromEnv}
	v.pipeline(&p)
	c.list = append(c.list, withoutShadowed(v.list, append(decodeProblems, unexpanded...))...)
	if len(c.list) > 0 {
		sortByField(c.list, reflect.TypeFor[Pipeline]())
		return nil, c.list
	}
	return &p, nil
}

// LoadPipelines loads every *.yaml and *.yml file directly in dir (hidden files skipped),
// keyed by pipeline name. It loads all of them even when some fail: the map holds those that
// loaded, and the error lists the problems of the others.
//
// Errors: Problems: an unreadable directory, every problem of every file, and two files
// defining the same pipeline name.
//
// A daemon config among them (see source.isDaemon) is one problem saying so, instead of every
// daemon key reported as an unknown pipeline field.
func LoadPipelines(dir string, getenv func(string) string) (map[string]*Pipeline, error) {
	files, err := configFiles(dir)
	if err != nil {
		return nil, Problems{{File: dir, Message: "read pipelines directory: " + unwrapPathError(err)}}
	}
	srcs := make([]source, len(files))
	for i, path := range files {
		srcs[i] = readDirSource(dir, path)
	}
	return loadPipelineSources(srcs, getenv)
}

// configFiles lists the *.yaml and *.yml files directly in dir, hidden ones left out, in name
// order.
func configFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		ext := filepath.Ext(name)
		if e.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		out = append(out, filepath.Join(dir, name))
	}
	return out, nil
}

// loadPipelineSources is LoadPipelines on files already read and parsed.
func loadPipelineSources(srcs []source, getenv func(string) string) (map[string]*Pipeline, error) {
	out := map[string]*Pipeline{}
	var all Problems
	for _, src := range srcs {
		// Classified before loading, which adds a pipeline's defaults to the tree.
		daemon := src.isDaemon()
		p, err := loadPipeline(src, getenv)
		if err != nil {
			if daemon {
				all = append(all, Problem{File: src.path, Message: "is a daemon config (its top-level keys are the daemon's), not a pipeline: " +
					"keep it out of the pipelines directory and give it to serve with --config"})
				continue
			}
			all = append(all, AsProblems(err)...)
			continue
		}
		if prev, dup := out[p.Name]; dup {
			all = append(all, Problem{File: src.path, Field: "name", Message: fmt.Sprintf("pipeline %q is already defined in %s", p.Name, prev.File)})
			continue
		}
		out[p.Name] = p
	}
	return out, all.Err()
}

// source is a config file read and parsed once: its tree, or the problems that kept it from
// having one (unreadable, too large, invalid YAML, nested too deep), as every loader reports
// them. Telling a daemon config from a pipeline (isDaemon) and loading the file both use it,
// so each file is read and parsed once. Loading changes the tree: load a source once, and
// classify it before.
type source struct {
	path string
	// raw is the parsed tree; nil when the file could not be read or parsed (problems).
	raw      map[string]any
	problems Problems
}

// readSource reads and parses the config file at path, a file named on its own: a symbolic
// link is followed wherever it leads (the operator named it).
func readSource(path string) source {
	data, err := readFile(path)
	if err != nil {
		return source{path: path, problems: Problems{{File: path, Message: err.Error()}}}
	}
	return parseSource(path, data)
}

// readDirSource reads and parses the config file at path, found in directory dir: a symbolic
// link that leads out of dir is refused, its target unread. Whoever can add a link to the
// pipelines directory must not make the daemon read, and quote back, a file from elsewhere.
func readDirSource(dir, path string) source {
	if err := linkStaysIn(dir, path); err != nil {
		return source{path: path, problems: Problems{{File: path, Message: err.Error()}}}
	}
	return readSource(path)
}

// linkStaysIn returns nil unless path is a symbolic link whose target, every link resolved,
// lies outside dir (resolved too) or cannot be resolved.
func linkStaysIn(dir, path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return errors.New("read: " + unwrapPathError(err))
	}
	if fi.Mode()&os.ModeSymlink == 0 {
		return nil
	}
	const refused = "is a symbolic link that leads out of its directory; refused, unread (copy the file in, or link to a file inside the directory)"
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return errors.New("read: " + unwrapPathError(err))
	}
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return errors.New("is a symbolic link that leads nowhere readable: " + unwrapPathError(err))
	}
	rel, err := filepath.Rel(realDir, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return errors.New(refused)
	}
	return nil
}

// parseSource parses data, read from file.
func parseSource(file string, data []byte) source {
	c := &problems{file: file}
	raw, ok := parseYAML(data, c)
	if !ok {
		return source{path: file, problems: c.list}
	}
	return source{path: file, raw: raw}
}

// readFile reads a config file of at most maxFileSize bytes. Only a regular file is read: it
// is opened without blocking (O_NONBLOCK: opening a FIFO nobody writes to would wait for a
// writer forever, and no signal interrupts it) and refused, unread, when fstat says it is
// anything else (a FIFO, a device, a socket, a directory).
func readFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, errors.New("read: " + unwrapPathError(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, errors.New("read: " + unwrapPathError(err))
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("is not a regular file (%s); only regular files are read as config", fileKind(st.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, errors.New("read: " + unwrapPathError(err))
	}
	return data, nil
}

// fileKind names the kind of a file that is not a regular one.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "not a plain file"
}

// unwrapPathError drops the path os errors repeat (the problem names the file already).
func unwrapPathError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// maxDepth bounds how deeply a file may nest; the deepest real field is about six levels
// down. It keeps absurd inputs from costing time in the passes over the tree.
const maxDepth = 20

// parseYAML parses a file's bytes with koanf's YAML parser and loads the tree into koanf,
// which normalizes its keys to strings.
func parseYAML(data []byte, c *problems) (map[string]any, bool) {
	if len(data) > maxFileSize {
		c.add("", "file is larger than %d bytes", maxFileSize)
		return nil, false
	}
	tree, err := yaml.Parser().Unmarshal(data)
	if err != nil {
		c.add("", "invalid YAML: %s", yamlError(err))
		return nil, false
	}
	if tooDeep(tree, 0) {
		c.add("", "nested deeper than %d levels", maxDepth)
		return nil, false
	}
	ko := koanf.New(".")
	// Delimiter "" keeps keys such as "ios.latest_version" whole.
	if err := ko.Load(confmap.Provider(tree, ""), nil); err != nil {
		c.add("", "invalid YAML: %v", err)
		return nil, false
	}
	raw := ko.Raw()
	if raw == nil {
		raw = map[string]any{}
	}
	return raw, true
}

// yamlTypeError matches the part of a YAML type error that quotes the value it could not
// decode ("cannot unmarshal !!str `passwor...` into map[string]interface {}").
var yamlTypeError = regexp.MustCompile("cannot unmarshal !!(\\w+)(?: `[^`]*`)? into [^\n]*")

// yamlQuoted matches what else a YAML error may quote of the file (an anchor, a key).
var yamlQuoted = regexp.MustCompile("`[^`]*`|'[^']*'|\"[^\"]*\"")

// yamlToken matches a quoted YAML token the parser expected or found: punctuation only.
var yamlToken = regexp.MustCompile("^.[^A-Za-z0-9]{1,3}.$")

// yamlError describes a YAML parser error by its line and what is wrong, without the file's
// text it quotes: the file may be no config at all (a secret, a shadow file).
func yamlError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	msg = yamlTypeError.ReplaceAllStringFunc(msg, func(m string) string {
		tag := yamlTypeError.FindStringSubmatch(m)[1]
		return "want a mapping of fields, got " + yamlKind(tag)
	})
	msg = yamlQuoted.ReplaceAllStringFunc(msg, func(q string) string {
		if yamlToken.MatchString(q) {
			return q // the parser's own token, such as ',' or ']'
		}
		return "(text not shown)"
	})
	lines := strings.Split(msg, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "; ")
}

// yamlKind names the kind of a YAML tag (str, seq, …).
func yamlKind(tag string) string {
	switch tag {
	case "str":
		return "a string"
	case "seq":
		return "a list"
	case "int":
		return "an integer"
	case "float":
		return "a number"
	case "bool":
		return "true or false"
	case "null":
		return "nothing"
	case "map":
		return "a mapping"
	}
	return "a value of another kind"
}

// tooDeep reports whether v nests more than maxDepth levels below depth.
func tooDeep(v any, depth int) bool {
	if depth > maxDepth {
		return true
	}
	switch t := v.(type) {
	case map[string]any:
		for _, e := range t {
			if tooDeep(e, depth+1) {
				return true
			}
		}
	case map[any]any:
		for _, e := range t {
			if tooDeep(e, depth+1) {
				return true
			}
		}
	case []any:
		for _, e := range t {
			if tooDeep(e, depth+1) {
				return true
			}
		}
	}
	return false
}

// decodeTree decodes a checked raw tree into out through koanf and returns the problems it
// found (also added to c).
func decodeTree(raw map[string]any, out any, c *problems) Problems {
	ko := koanf.New(".")
	// Delimiter "" keeps keys such as "ios.latest_version" whole.
	if err := ko.Load(confmap.Provider(raw, ""), nil); err != nil {
		c.add("", "load: %v", err)
		return c.list
	}
	before := len(c.list)
	decode(ko, out, c)
	return slices.Clone(c.list[before:])
}

// withoutShadowed drops validation problems about fields that already failed to decode (a
// field of the wrong type decodes as its zero value, which would be reported again as
// "is required").
func withoutShadowed(list, decoded Problems) Problems {
	if len(decoded) == 0 {
		return list
	}
	var out Problems
	for _, p := range list {
		shadowed := false
		for _, d := range decoded {
			if d.Field == "" || p.Field == d.Field || strings.HasPrefix(p.Field, d.Field+".") ||
				strings.HasPrefix(p.Field, d.Field+"[") || strings.HasPrefix(d.Field, p.Field+".") {
				shadowed = true
				break
			}
		}
		if !shadowed {
			out = append(out, p)
		}
	}
	return out
}
