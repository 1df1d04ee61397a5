// Package figures is the file format in which the bench programs hand their measurements
// to cmd/benchreport: each run of a program writes one Report as JSON (its -json flag),
// and benchreport aggregates the runs of every program into bench/RESULTS.md, one section
// per program, each figure as its median and range over the runs.
//
// A program joins `make bench` by writing a Report and being listed in the Makefile's
// BENCH_PROGRAMS; it needs nothing else from the others.
package figures

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Report is one run of one bench program.
type Report struct {
	// Section names the program's section in RESULTS.md and orders the sections; Title
	// heads it.
	Section string `json:"section"`
	Title   string `json:"title"`
	// Command reproduces one run, e.g. "cd bench && go run ./cmd/benchlocks".
	Command string `json:"command"`
	// About says, in Markdown, what is measured and how; the last run's text is used.
	About string `json:"about"`
	// Commit is the checked-out commit the run measured, marked when the work tree had
	// changes.
	Commit string `json:"commit"`
	// Started and Ended bound the run; LoadBefore and LoadAfter are the 1-, 5- and
	// 15-minute load averages then.
	Started    time.Time  `json:"started"`
	Ended      time.Time  `json:"ended"`
	LoadBefore [3]float64 `json:"load_before"`
	LoadAfter  [3]float64 `json:"load_after"`
	Figures    []Figure   `json:"figures"`
}

// Figure is one measured number. Figures with the same Table form one Markdown table,
// with a line per Row and a column per Column, in the order they first appear.
type Figure struct {
	Table  string  `json:"table"`
	Row    string  `json:"row"`
	Column string  `json:"column"`
	Unit   string  `json:"unit,omitempty"` // "ms", "µs", "×", "/s", or "" for a count
	Value  float64 `json:"value"`
	// Max, if set, is the goal: the value must be at most Max.
	Max float64 `json:"max,omitempty"`
	// Headline figures are also quoted, as medians, in the summary in docs/benchmarks.md.
	Headline bool `json:"headline,omitempty"`
}

// Start returns a Report whose Commit, Started and LoadBefore are now's.
func Start(section, title, command string) *Report {
	r := &Report{Section: section, Title: title, Command: command, Commit: commit(), Started: time.Now().UTC()}
	r.LoadBefore, _ = LoadAvg()
	return r
}

// commit names the checked-out commit, marked when the work tree has changes.
func commit() string {
	rev, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown (not a git checkout)"
	}
	c := strings.TrimSpace(string(rev))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += " with uncommitted changes"
	}
	return c
}

// Add appends a figure.
func (r *Report) Add(f Figure) { r.Figures = append(r.Figures, f) }

// Finish sets Ended and LoadAfter to now and writes the Report to path as JSON.
func (r *Report) Finish(path string) error {
	r.Ended = time.Now().UTC()
	r.LoadAfter, _ = LoadAvg()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write figures: %w", err)
	}
	return nil
}

// Read reads a Report written by Finish; errors name the file.
func Read(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Section == "" {
		return nil, fmt.Errorf("%s: no section", path)
	}
	return &r, nil
}

// LoadAvg returns the 1-, 5- and 15-minute load averages from /proc/loadavg.
func LoadAvg() ([3]float64, error) {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return l, fmt.Errorf("/proc/loadavg: %q", b)
	}
	for i := range l {
		if l[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return l, fmt.Errorf("/proc/loadavg: %w", err)
		}
	}
	return l, nil
}
