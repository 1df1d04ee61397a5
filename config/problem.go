package config

import (
	"errors"
	"fmt"
	"strings"
)

// Problem is one thing wrong with a configuration file. It never holds a secret or a value
// read from the environment.
type Problem struct {
	File    string // path of the file ("" for environment or flags)
	Field   string // field path, e.g. "services[2].uuid"; "" for the file as a whole
	Message string // what is wrong, lowercase
}

// String returns "file: field: what is wrong", leaving out the parts that are empty.
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteString(": ")
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Problems is every problem found; it is the error type LoadPipelineFile, LoadPipelines,
// LoadDaemon and Validate return when a configuration is invalid. Use errors.As to get it.
type Problems []Problem

// Error lists the problems one per line.
func (ps Problems) Error() string { return strings.Join(ps.Lines(), "\n") }

// Lines returns the problems as "file: field: what is wrong" lines.
func (ps Problems) Lines() []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// Err returns ps as an error, or nil when there are none.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// AsProblems extracts the Problems in err (possibly wrapped); a non-nil error of another kind
// becomes a single Problem with its text.
func AsProblems(err error) Problems {
	if err == nil {
		return nil
	}
	var ps Problems
	if errors.As(err, &ps) {
		return ps
	}
	return Problems{{Message: err.Error()}}
}

// problems collects the problems of one file.
type problems struct {
	file string
	list Problems
}

func (c *problems) add(field, format string, args ...any) {
	c.list = append(c.list, Problem{File: c.file, Field: field, Message: fmt.Sprintf(format, args...)})
}
