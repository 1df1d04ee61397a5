package gobench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/deploy-orchestrator/orchestrator/bench/internal/figures"
)

// Program is a benchmark program's description: what Main runs and what it writes.
type Program struct {
	Spec    Spec   // Repo and Runs are set from the command line
	Out     string // default results file
	Section string // its section in bench/RESULTS.md (make bench), e.g. "engine"
	Command string // how to run the program, for RESULTS.md
	Title   string
	Table   string   // the figures' table in bench/RESULTS.md
	Intro   string   // what is measured, Markdown
	Metrics []string // the metrics in the results table, in order
	Goals   []Goal
	// Headlines are metrics quoted in the summary besides those with a goal (which are).
	Headlines []string
}

// Main parses the command line (-repo, -runs, -benchtime, -bench, -out, -json), runs the
// benchmark, writes the results file and, with -json PATH, the medians as a
// bench/internal/figures report (what `make bench` collects, one report per run of the
// program, to aggregate into bench/RESULTS.md). The benchmark's own output goes to stderr.
func Main(ctx context.Context, p Program, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&p.Spec.Repo, "repo", "..", "repository root")
	fs.IntVar(&p.Spec.Runs, "runs", 5, "how many times to run the benchmark (figures are medians over the runs)")
	fs.StringVar(&p.Spec.Benchtime, "benchtime", p.Spec.Benchtime, "-benchtime of each run")
	fs.StringVar(&p.Spec.Bench, "bench", p.Spec.Bench, "-bench pattern of each run (e.g. to select sub-benchmarks)")
	out := fs.String("out", p.Out, "results file (Markdown); empty: none")
	jsonPath := fs.String("json", "", "also write the figures (medians) to this file as a bench/internal/figures report")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	report := figures.Start(p.Section, p.Title, p.Command)
	res, err := Run(ctx, p.Spec, stderr)
	if err != nil {
		return err
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(res.Markdown(p.Title, p.Intro, p.Metrics, p.Goals)), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", *out)
	}
	if *jsonPath != "" {
		report.About = p.Intro
		res.addTo(report, p.Table, p.Metrics, p.Goals, p.Headlines)
		return report.Finish(*jsonPath)
	}
	return nil
}

// addTo adds the medians of metrics to report as one table (a row per sub-benchmark, a
// column per metric); figures with a goal carry its bound. The metrics of headlines and those
// with a goal (on any sub-benchmark) are headlines.
func (r *Result) addTo(report *figures.Report, table string, metrics []string, goals []Goal, headlines []string) {
	for _, m := range metrics {
		for _, f := range r.Figures {
			if f.Metric != m {
				continue
			}
			fig := figures.Figure{Table: table, Row: f.Bench, Column: m, Unit: unit(m), Value: f.Median, Headline: slices.Contains(headlines, m)}
			for _, g := range goals {
				fig.Headline = fig.Headline || g.Metric == m
				if g.applies(f) {
					fig.Max = g.Max
				}
			}
			report.Add(fig)
		}
	}
}

// unit is the figures unit of a metric named like "read-p99-ms", "ms/service/phase",
// "runs/s" or "overhead÷floor" (a ratio).
func unit(metric string) string {
	switch {
	case strings.Contains(metric, "÷"):
		return "×"
	case strings.HasSuffix(metric, "-ms"), strings.HasPrefix(metric, "ms/"), strings.Contains(metric, "-ms/"):
		return "ms"
	case strings.HasSuffix(metric, "/s"):
		return "/s"
	}
	return ""
}
