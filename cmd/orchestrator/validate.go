package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/deploy-orchestrator/orchestrator/config"
)

func cmdValidate(_ context.Context, c *cli, args []string) error {
	fs := c.flags("validate", "FILE|DIR…",
		"Checks pipeline files, pipeline directories and daemon config files, and prints every\n"+
			"problem as \"file: field: what is wrong\". ${NAME} references are resolved from the\n"+
			"environment (values are never printed). Exits non-zero when anything is wrong.")
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() == 0 {
		return usageError("validate: name at least one pipeline file, directory or daemon config (see --help)")
	}
	problems := config.Validate(c.getenv, fs.Args()...)
	for _, line := range problems.Lines() {
		fmt.Fprintln(c.stdout, line)
	}
	if len(problems) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d problem(s) found", len(problems))}
	}
	fmt.Fprintf(c.stdout, "ok: %d path(s) valid\n", fs.NArg())
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
