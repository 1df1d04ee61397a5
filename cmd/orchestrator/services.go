package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/phases"
)

func cmdServices(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("services", "[--json] [--url URL]",
		"Lists the Coolify resources the pipelines deploy: the pipelines that deploy each (and the\n"+
			"name each gives it), the last run that synced or deployed it, and each pipeline's newest\n"+
			"build there, which the stale-build guard compares that pipeline's runs with. With --url (or\n"+
			"ORCH_URL) through the daemon's API and its pipelines; without it from the local backend and\n"+
			"the pipelines of --config (pipelines_dir) or --pipelines-dir.")
	t := addTargetFlags(c, fs)
	t.readOnly = true
	config.AddFlagSubset(fs, "pipelines-dir")
	asJSON := fs.Bool("json", false, "print one JSON service per line (as GET /v1/services lists them)")
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() != 0 {
		return usageError("services takes no arguments (see --help)")
	}
	e, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	var list []orchestrator.Service
	if e.client != nil {
		list, err = e.client.services(ctx)
	} else {
		ps, lerr := config.LoadPipelines(e.daemon.PipelinesDir, c.getenv)
		if lerr != nil {
			return pipelinesError(e.daemon.PipelinesDir, lerr)
		}
		list, err = phases.ServicesOf(ctx, ps, e.marks)
	}
	if err != nil {
		return err
	}
	e.header(c, *asJSON)
	if *asJSON {
		return jsonLines(c.stdout, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(c.stdout, "no services: no pipeline is loaded")
		return nil
	}
	if e.absent != "" {
		fmt.Fprintln(c.stdout, e.none("no run has written any"))
	}
	for i, s := range list {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		printService(c.stdout, s)
	}
	return nil
}

// printService prints one service: its names and UUID, who wrote it last, and a line per
// pipeline with its newest build there.
func printService(w io.Writer, s orchestrator.Service) {
	pipelines := make([]string, len(s.Pipelines))
	for i, p := range s.Pipelines {
		pipelines[i] = p.Pipeline
	}
	fmt.Fprintf(w, "%s (%s): deployed by %s\n", strings.Join(s.Names, ", "), s.UUID, strings.Join(pipelines, ", "))
	fmt.Fprintf(w, "  runs now: %s\n", runningNow(s))
	if m := s.Mark; m != nil {
		fmt.Fprintf(w, "  last written: run %s %s it at %s (fence %d), %s\n", m.RunID, markVerb(m.Phase),
			m.At.Local().Format(time.DateTime), m.Fence, carried(m))
	} else {
		fmt.Fprintln(w, "  last written: by no recorded run")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PIPELINE\tAS\tNEWEST BUILD\tRUN\tAT")
	for _, p := range s.Pipelines {
		as := orDefault(p.Service, "(not loaded)")
		n := p.Newest
		if n == nil {
			fmt.Fprintf(tw, "  %s\t%s\t-\t-\t-\n", p.Pipeline, as)
			continue
		}
		build := orDefault(n.Build, "(none)")
		if n.Rollback {
			build += " (rollback)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s %s\n", p.Pipeline, as, build, n.RunID, markVerb(n.Phase), n.At.Local().Format(time.DateTime))
	}
	tw.Flush()
}

// runningNow says what a service was last seen running, and what Coolify shows in progress.
func runningNow(s orchestrator.Service) string {
	var b strings.Builder
	if r := s.Running; r != nil {
		var what []string
		for _, v := range [][2]string{{"tag", r.ImageTag}, {"commit", r.Commit}, {"app version", r.AppVersion}} {
			if v[1] != "" {
				what = append(what, v[0]+" "+v[1])
			}
		}
		fmt.Fprintf(&b, "%s, build %s of %s (run %s), since %s", orDefault(strings.Join(what, ", "), "its build"),
			orDefault(r.Build, "(none)"), orDefault(r.Pipeline, "a pipeline"), r.RunID, r.Since.Local().Format(time.DateTime))
		if r.Restored {
			fmt.Fprintf(&b, ", put back by run %s", r.RestoredBy)
		}
	} else {
		b.WriteString("not seen by any run")
	}
	switch {
	case s.InProgressUnread != "":
		fmt.Fprintf(&b, "; deployments in progress: unknown (%s)", s.InProgressUnread)
	case len(s.InProgress) > 0:
		fmt.Fprintf(&b, "; deployment in progress in Coolify: %s", strings.Join(s.InProgress, ", "))
	case s.InProgress != nil:
		b.WriteString("; no deployment in progress")
	}
	return b.String()
}

// markVerb says what a mark's phase did to the service.
func markVerb(phase string) string {
	if phase == "phase2" {
		return "deployed"
	}
	return "synced"
}

// carried names the build a mark says the service carries.
func carried(m *orchestrator.ServiceMark) string {
	if m.Build == "" {
		return "carrying no recorded build"
	}
	s := fmt.Sprintf("carrying build %s", m.Build)
	if m.Pipeline != "" {
		s += " of " + m.Pipeline
	}
	if m.Rollback {
		s += " (a rollback)"
	}
	return s
}
