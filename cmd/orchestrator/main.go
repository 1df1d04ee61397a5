// Command orchestrator is the deploy orchestrator's daemon and CLI: `serve` runs the daemon,
// `run` executes one pipeline run on this host, `trigger` asks a daemon for a run and follows
// it, `plan` is the dry run, `validate` checks pipeline files, `locks` inspects and operates
// the locks, and `demo` runs the whole product against built-in simulators.
//
// main only builds a signal-aware context and calls run; everything else is testable through
// run(ctx, args, getenv, stdin, stdout, stderr).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(os.Stderr, "orchestrator:", ee.err)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}
