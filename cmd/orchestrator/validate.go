package main

import (
	"context"
	"fmt"

	"github.com/deploy-orchestrator/orchestrator/config"
)

func cmdValidate(_ context.Context, c *cli, args []string) error {
	fs := c.flags("validate", "FILE|DIR…",
		"Checks pipeline files and daemon config files, and prints every problem as \"file: field:\n"+
			"what is wrong\". A file is a daemon config when its top-level keys are a daemon config's;\n"+
			"a directory is checked file by file (its *.yaml and *.yml), the pipelines in it together.\n"+
			"A daemon config's pipelines_dir is checked with it. ${NAME} references are resolved from the\n"+
			"environment (values are never printed). Warns about every env-source secret the pipelines\n"+
			"read (ORCH_SECRET_<KEY>) that this environment lacks: `serve` refuses to start without\n"+
			"them unless --allow-missing-secrets, and about every ORCH_* variable set that nothing reads\n"+
			"(a mistyped setting). Says which service UUIDs several pipelines deploy (allowed: each\n"+
			"pipeline's builds are compared with its own only). Exits 2 when anything is wrong, 0 otherwise.")
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() == 0 {
		return usageError("validate: name at least one pipeline file, directory or daemon config (see --help)")
	}
	problems, warnings, notes := config.ValidateAll(c.getenv, fs.Args()...)
	for _, line := range problems.Lines() {
		fmt.Fprintln(c.stdout, line)
	}
	for _, line := range warnings.Lines() {
		fmt.Fprintln(c.stdout, "warning: "+line)
	}
	for _, u := range c.unknownEnv() {
		fmt.Fprintln(c.stdout, "warning: "+u.String())
	}
	for _, line := range notes.Lines() {
		fmt.Fprintln(c.stdout, "info: "+line)
	}
	if len(problems) > 0 {
		return &exitError{code: exitUsage, err: fmt.Errorf("%d problem(s) found", len(problems))}
	}
	fmt.Fprintf(c.stdout, "ok: %d path(s) valid\n", fs.NArg())
	return nil
}
