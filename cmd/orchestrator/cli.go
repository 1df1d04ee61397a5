package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// version and commit, when set at build time with -ldflags "-X main.version=… -X
// main.commit=…" (the Dockerfile does: its context has no .git), win over what the Go
// toolchain records.
var version, commit = "", ""

// Exit codes, the same for every command (listed in `orchestrator --help`).
const (
	exitOK          = 0 // succeeded
	exitFailed      = 1 // the run failed or was canceled; an action was refused (stale fence, key held)
	exitUsage       = 2 // usage or configuration: bad flags, invalid files, unknown pipeline, token refused, listen address unusable
	exitUnreachable = 3 // the daemon or the lock/run backend could not be reached
)

const exitCodesHelp = `Exit codes:
  0  succeeded
  1  the run failed or was canceled, or the action was refused (stale fence, key held)
  2  usage or configuration error (bad flags or files, unknown pipeline, token refused,
     listen address in use)
  3  the daemon or the lock/run backend could not be reached
  130  trigger or runs watch interrupted (Ctrl-C) and the run left going
`

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

// usageError is a command-line or configuration mistake: exit code 2.
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// exitCodeOf is the process exit code for err: its exitError's code, else 1.
func exitCodeOf(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	}
	return exitFailed
}

// versionInfo is what --version prints: the module version and the VCS commit the Go
// toolchain recorded in the binary (runtime/debug.ReadBuildInfo).
type versionInfo struct {
	version, commit string
	modified        bool
}

func buildVersion() versionInfo {
	v := versionInfo{version: "(devel)"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.commit = s.Value
			case "vcs.modified":
				v.modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		v.version = version
	}
	if commit != "" {
		v.commit = commit
	}
	if v.version == "" {
		v.version = "(devel)"
	}
	return v
}

func (v versionInfo) String() string {
	s := "orchestrator " + v.version
	if v.commit != "" {
		s += " commit " + v.commit
		if v.modified {
			s += " (modified)"
		}
	} else {
		s += ` (commit unknown: build with -ldflags "-X main.commit=$(git rev-parse HEAD)", as the README does, or with go build in a git checkout without GOFLAGS=-buildvcs=false)`
	}
	return s
}

// cli is what every command gets from run.
type cli struct {
	// self is how the person started this program, for commands printed as hints:
	// "go run ./cmd/orchestrator" under go run, else argv[0] as typed.
	self   string
	getenv func(string) string
	// environ lists the environment as NAME=value entries (nil: none), for the warning about
	// ORCH_* variables nothing reads (see warnUnknownEnv).
	environ func() []string
	// read records the names getenv was asked for: a variable read is not an unknown one.
	read   *readNames
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
		{"trigger", "ask a daemon for a run (for CI), follow it, exit with its result", cmdTrigger},
		{"runs", "list, show, watch, cancel, re-run or roll back to runs (list|show|watch|cancel|rerun|rollback)", cmdRuns},
		{"locks", "list, force-release, freeze or unfreeze locks, or read their audit log", cmdLocks},
		{"audit", "verify or export the hash-chained audit log of every action (verify|export)", cmdAudit},
		{"services", "list the services the pipelines deploy: last writer, each pipeline's newest build", cmdServices},
		{"run", "execute one run of a pipeline on this host and show its progress", cmdRun},
		{"plan", "show what a run would change and which locks it would take (dry run)", cmdPlan},
		{"validate", "check pipeline files and daemon configs and report every problem", cmdValidate},
		{"health", "exit 0 when the daemon answers ready (/readyz 200), for container health checks", cmdHealth},
		{"version", "print the version and commit", func(_ context.Context, c *cli, _ []string) error {
			fmt.Fprintln(c.stdout, buildVersion())
			return nil
		}},
	}
}

// run is the whole program in an environment read through getenv alone: runEnv without a
// list of the variables, so no warning about unknown ORCH_* variables.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	return runEnv(ctx, args, getenv, nil, stdin, stdout, stderr)
}

// runEnv is the whole program: main calls it with the process's arguments, environment
// (os.Getenv, os.Environ) and streams.
func runEnv(ctx context.Context, args []string, getenv func(string) string, environ func() []string, stdin io.Reader, stdout, stderr io.Writer) error {
	read := &readNames{}
	c := &cli{self: selfCommand(args), getenv: read.wrap(getenv), environ: environ, read: read, stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) < 2 {
		c.usage(stderr)
		return &exitError{code: exitUsage}
	}
	switch args[1] {
	case "help", "-h", "--help":
		c.usage(stdout)
		return nil
	case "--version":
		fmt.Fprintln(stdout, buildVersion())
		return nil
	}
	for _, cmd := range commands() {
		if cmd.name == args[1] {
			return cmd.run(ctx, c, args[2:])
		}
	}
	return usageError("unknown command %q: run `orchestrator --help` for the list", args[1])
}

// selfCommand is how to start this program again from the same directory.
func selfCommand(args []string) string {
	if len(args) == 0 || args[0] == "" {
		return "orchestrator"
	}
	if strings.Contains(args[0], string(os.PathSeparator)+"go-build") {
		return "go run ./cmd/orchestrator"
	}
	return args[0]
}

func (c *cli) usage(w io.Writer) {
	fmt.Fprintf(w, "%s: safe, two-phase deploys to Coolify under explicit locks\n\nUsage: orchestrator <command> [flags]\n\nCommands:\n", buildVersion())
	for _, cmd := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintf(w, "\nRun `orchestrator <command> --help` for a command's flags; --version prints the version.\n\n%s", exitCodesHelp)
}

// flags returns a FlagSet for a command whose usage names its arguments. Parse errors are
// returned (and printed once, by main); --help prints the usage to stdout.
func (c *cli) flags(name, argsUsage, summary string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { // pflag calls it on --help only (ContinueOnError)
		fmt.Fprintf(c.stdout, "Usage: orchestrator %s %s\n\n%s\n", name, argsUsage, summary)
		if fu := fs.FlagUsages(); fu != "" {
			fmt.Fprintf(c.stdout, "\nFlags:\n%s", fu)
		}
		fmt.Fprintf(c.stdout, "\n%s", exitCodesHelp)
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
func isTerminal(w any) bool {
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

// subcommand runs the subcommand args[0] names among subs of command name (`runs`, `locks`,
// `audit`): its usage on --help, and a usage error naming the subcommands when there is
// none or it is unknown.
func subcommand(ctx context.Context, c *cli, args []string, name, usage string, subs map[string]func(context.Context, *cli, []string) error) error {
	if len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
		fmt.Fprint(c.stdout, usage+"\n"+exitCodesHelp)
		return nil
	}
	if len(args) == 0 || subs[args[0]] == nil {
		fmt.Fprint(c.stderr, usage)
		names := slices.Sorted(maps.Keys(subs))
		return usageError("%s: want a subcommand: %s or %s", name, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	}
	return subs[args[0]](ctx, c, args[1:])
}
