// Package gobench runs one of the repository's `go test -bench` benchmarks several times
// and summarises its figures: for each sub-benchmark and metric, the median and the range
// over the runs, with the date, the commit and the load average before and after. The
// benchmark programs in bench/cmd (benchengine, benchapi) are thin wrappers over it that
// name the benchmark, describe what it measures and state the goals.
package gobench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Spec names a benchmark and how to run it.
type Spec struct {
	Repo      string // repository root
	Pkg       string // package directory below Repo, e.g. "phases"
	Bench     string // -test.bench pattern, e.g. "^BenchmarkOverhead100$"
	Benchtime string // -test.benchtime, e.g. "3x"
	Runs      int    // how many times to run the benchmark binary
}

// Result is what Run measured.
type Result struct {
	Date       time.Time `json:"date"`
	Commit     string    `json:"commit"`
	LoadBefore string    `json:"load_before"` // /proc/loadavg's 1, 5 and 15 minute figures
	LoadAfter  string    `json:"load_after"`
	Command    string    `json:"command"` // how each run was made
	Runs       int       `json:"runs"`
	// Figures holds one entry per sub-benchmark and metric, in the order first reported.
	Figures []Figure `json:"figures"`
	// RunLoads is the 1-minute load average after each run.
	RunLoads []float64 `json:"run_loads"`
}

// Figure is one metric of one sub-benchmark over the runs.
type Figure struct {
	Bench  string    `json:"bench"` // sub-benchmark, e.g. "sqlite"
	Metric string    `json:"metric"`
	Values []float64 `json:"values"` // one per run, in run order
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

// Get returns the figure of bench and metric.
func (r *Result) Get(bench, metric string) (Figure, bool) {
	for _, f := range r.Figures {
		if f.Bench == bench && f.Metric == metric {
			return f, true
		}
	}
	return Figure{}, false
}

// Run builds the package's test binary once and runs the benchmark spec.Runs times, writing
// the benchmark's own output to log as it goes.
func Run(ctx context.Context, spec Spec, log io.Writer) (*Result, error) {
	if spec.Runs < 1 {
		return nil, fmt.Errorf("runs %d: want at least 1", spec.Runs)
	}
	repo, err := filepath.Abs(spec.Repo)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(repo, spec.Pkg)
	tmp, err := os.MkdirTemp("", "gobench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "bench.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go test -c in %s: %w\n%s", dir, err, out)
	}
	args := []string{"-test.run", "^$", "-test.bench", spec.Bench, "-test.benchtime", spec.Benchtime, "-test.count", "1"}
	res := &Result{
		Date:       time.Now().UTC(),
		Commit:     commit(repo),
		LoadBefore: loadavg(),
		Command:    fmt.Sprintf("go test -run '^$' -bench '%s' -benchtime %s -count 1 ./%s", spec.Bench, spec.Benchtime, spec.Pkg),
		Runs:       spec.Runs,
	}
	for i := range spec.Runs {
		fmt.Fprintf(log, "run %d/%d: %s (load %s)\n", i+1, spec.Runs, res.Command, loadavg())
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout = io.MultiWriter(&out, log)
		cmd.Stderr = log
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("run %d: %w", i+1, err)
		}
		if err := res.add(&out); err != nil {
			return nil, fmt.Errorf("run %d: %w", i+1, err)
		}
		res.RunLoads = append(res.RunLoads, load1())
	}
	res.LoadAfter = loadavg()
	for i := range res.Figures {
		f := &res.Figures[i]
		if len(f.Values) != spec.Runs {
			return nil, fmt.Errorf("%s %s: %d values for %d runs", f.Bench, f.Metric, len(f.Values), spec.Runs)
		}
		s := slices.Sorted(slices.Values(f.Values))
		f.Min, f.Max = s[0], s[len(s)-1]
		f.Median = s[len(s)/2]
		if len(s)%2 == 0 {
			f.Median = (s[len(s)/2-1] + s[len(s)/2]) / 2
		}
	}
	return res, nil
}

// add parses the benchmark lines of one run's output:
//
//	BenchmarkOverhead100/sqlite-2   3   737010522 ns/op   3.390 ms/service/phase   …
func (r *Result) add(out io.Reader) error {
	seen := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") || len(fields)%2 != 0 {
			continue
		}
		name := fields[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // the GOMAXPROCS suffix
		}
		if i := strings.IndexByte(name, '/'); i > 0 {
			name = name[i+1:]
		}
		for j := 2; j+1 < len(fields); j += 2 {
			v, err := strconv.ParseFloat(fields[j], 64)
			if err != nil {
				return fmt.Errorf("%q: value %q: %w", sc.Text(), fields[j], err)
			}
			r.record(name, fields[j+1], v)
		}
		seen++
	}
	if seen == 0 {
		return fmt.Errorf("no benchmark results in the output")
	}
	return sc.Err()
}

func (r *Result) record(bench, metric string, v float64) {
	for i := range r.Figures {
		if r.Figures[i].Bench == bench && r.Figures[i].Metric == metric {
			r.Figures[i].Values = append(r.Figures[i].Values, v)
			return
		}
	}
	r.Figures = append(r.Figures, Figure{Bench: bench, Metric: metric, Values: []float64{v}})
}

// Goal is a bar a figure must meet: at most Max.
type Goal struct {
	Metric string
	// Bench, when set, is the one sub-benchmark (e.g. "sqlite") the goal applies to; empty:
	// every one.
	Bench string
	Max   float64
}

// applies reports whether g is a goal on f.
func (g Goal) applies(f Figure) bool {
	return g.Metric == f.Metric && (g.Bench == "" || g.Bench == f.Bench)
}

// Markdown returns a results document: title, intro (what is measured, as Markdown), the
// run's facts, and one table row per figure of metrics (in that order), with the goal's
// verdict on the median where one is given.
func (r *Result) Markdown(title, intro string, metrics []string, goals []Goal) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: results\n\n%s\n\n", title, strings.TrimSpace(intro))
	fmt.Fprintf(&b, "## Results\n\nGenerated %s on commit `%s`: %d runs of `%s`.\n",
		r.Date.Format("2006-01-02 15:04 UTC"), r.Commit, r.Runs, r.Command)
	fmt.Fprintf(&b, "Load average (1, 5, 15 min) before: %s; after: %s; 1-minute load after each run: %s.\n\n",
		r.LoadBefore, r.LoadAfter, floats(r.RunLoads, "%.1f"))
	b.WriteString("| benchmark | metric | median | range | runs | goal |\n|---|---|---|---|---|---|\n")
	for _, m := range metrics {
		for _, f := range r.Figures {
			if f.Metric != m {
				continue
			}
			goal := ""
			for _, g := range goals {
				if g.applies(f) {
					verdict := "met"
					if f.Median > g.Max {
						verdict = "missed"
					}
					goal = fmt.Sprintf("≤ %g: %s", g.Max, verdict)
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s – %s | %s | %s |\n", f.Bench, f.Metric,
				num(f.Median), num(f.Min), num(f.Max), floats(f.Values, "%.4g"), goal)
		}
	}
	return b.String()
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

func floats(vs []float64, format string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(s, ", ")
}

// commit is the repository's HEAD, with "+dirty" when the work tree has changes (other than
// to results files).
func commit(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	// Results files the benchmark programs just wrote do not make the tree dirty.
	if st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/RESULTS*.md").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "+dirty"
	}
	return c
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute load averages ("?" where unreadable).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func load1() float64 {
	v, _ := strconv.ParseFloat(strings.Fields(loadavg() + " ?")[0], 64)
	return v
}
