package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// exitError carries an exit code; err (if any) is printed once by main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError is a command-line mistake: exit code 2, with a hint.
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// cli is what every command gets from run.
type cli struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

func commands() []command {
	return []command{
		{"demo", "run the daemon on the embedded backend with simulated Coolify, Flagsmith and Infisical", cmdDemo},
		{"serve", "run the daemon: HTTP API, webhooks, dashboard and the engine", cmdServe},
		{"run", "execute one run of a pipeline on this host and show its progress", cmdRun},
		{"trigger", "ask a daemon for a run (for CI), follow it, exit with its result", cmdTrigger},
		{"plan", "show what a run would change and which locks it would take (dry run)", cmdPlan},
		{"validate", "check pipeline files and report every problem", cmdValidate},
		{"locks", "list, force-release or freeze locks (list|release|freeze)", cmdLocks},
		{"version", "print the version", func(_ context.Context, c *cli, _ []string) error {
			fmt.Fprintln(c.stdout, "orchestrator", version)
			return nil
		}},
	}
}

// run is the whole program: main calls it with the process's arguments and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	c := &cli{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) < 2 || args[1] == "help" || args[1] == "-h" || args[1] == "--help" {
		c.usage()
		if len(args) < 2 {
			return &exitError{code: 2}
		}
		return nil
	}
	for _, cmd := range commands() {
		if cmd.name == args[1] {
			return cmd.run(ctx, c, args[2:])
		}
	}
	return usageError("unknown command %q: run `orchestrator help` for the list", args[1])
}

func (c *cli) usage() {
	fmt.Fprintf(c.stderr, "orchestrator %s: safe, two-phase deploys to Coolify under explicit locks\n\nUsage: orchestrator <command> [flags]\n\nCommands:\n", version)
	for _, cmd := range commands() {
		fmt.Fprintf(c.stderr, "  %-9s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintf(c.stderr, "\nRun `orchestrator <command> --help` for a command's flags.\n")
}

// flags returns a FlagSet for a command whose usage names its arguments.
func (c *cli) flags(name, argsUsage, summary string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: orchestrator %s %s\n\n%s\n\nFlags:\n%s", name, argsUsage, summary, fs.FlagUsages())
	}
	return fs
}

// parse parses args; --help prints usage and ends the command with success.
func parse(fs *pflag.FlagSet, args []string) (done bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return true, nil
		}
		return true, usageError("%s: %v (see --help)", fs.Name(), err)
	}
	return false, nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newLogger builds the one logger of a command: JSON unless w is a terminal (or format says
// otherwise), at the given level.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if level != "" {
		if err := lv.UnmarshalText([]byte(level)); err != nil {
			return nil, usageError("log level %q: want debug, info, warn or error", level)
		}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "", "auto":
		if isTerminal(w) {
			return slog.New(slog.NewTextHandler(w, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError("log format %q: want auto, json or text", format)
}
