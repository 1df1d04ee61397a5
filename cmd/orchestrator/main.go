// Command orchestrator is the deploy orchestrator's daemon and CLI: `serve` runs the daemon,
// `trigger` asks a daemon for a run and follows it, `runs` and `locks` read and operate a
// daemon (--url) or the local backend, `run` executes one pipeline run on this host, `plan`
// is the dry run, `validate` checks pipeline files and daemon configs, `health` probes a
// daemon, and `demo` runs the whole product against built-in simulators.
//
// main only builds a signal-aware context and calls runEnv; everything else is testable through
// runEnv(ctx, args, getenv, environ, stdin, stdout, stderr). Every error is printed once, here, and the
// exit code says what kind it was (see exitCodesHelp).
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
	err := runEnv(ctx, os.Args, os.Getenv, os.Environ, os.Stdin, os.Stdout, os.Stderr)
	stop()
	var ee *exitError
	if err != nil && (!errors.As(err, &ee) || ee.err != nil) {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
	}
	os.Exit(exitCodeOf(err))
}
