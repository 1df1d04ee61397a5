package gobench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
)

// Program is a benchmark program's description: what Main runs and what it writes.
type Program struct {
	Spec    Spec   // Repo and Runs are set from the command line
	Out     string // default results file
	Title   string
	Intro   string   // what is measured, Markdown
	Metrics []string // the metrics in the results table, in order
	Goals   []Goal
}

// Main parses the command line (-repo, -runs, -benchtime, -out, -json), runs the
// benchmark, writes the results file and, with -json, prints the figures as JSON on stdout.
// The benchmark's own output goes to stderr.
func Main(ctx context.Context, p Program, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&p.Spec.Repo, "repo", "..", "repository root")
	fs.IntVar(&p.Spec.Runs, "runs", 5, "how many times to run the benchmark (figures are medians over the runs)")
	fs.StringVar(&p.Spec.Benchtime, "benchtime", p.Spec.Benchtime, "-benchtime of each run")
	out := fs.String("out", p.Out, "results file (Markdown); empty: none")
	asJSON := fs.Bool("json", false, "print the figures as JSON on stdout")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
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
	if *asJSON {
		b, err := res.JSON()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return nil
}
