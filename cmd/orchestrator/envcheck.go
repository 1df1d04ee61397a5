package main

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
)

// cliEnvNames are the ORCH_* variables read outside the daemon config (config.EnvOverrides):
// by the commands themselves, and by the project's tooling around the binary, which a
// person may well have exported in the same shell.
var cliEnvNames = []string{
	"ORCH_URL",      // runs, locks, trigger, health: the daemon's address
	"ORCH_CONFIG",   // serve, run, plan, runs, locks: the daemon config file
	"ORCH_INSTANCE", // serve: the daemon's identity
	"ORCH_PUBLISH",  // docker-compose.yml: the published address
	"ORCH_CHROMIUM", // the dashboard's browser tests: the Chromium binary
}

// readNames records the names an environment lookup was asked for. Lookups come from the
// engine's goroutines too, hence the lock.
type readNames struct {
	mu    sync.Mutex
	names map[string]bool
}

// wrap returns getenv, recording each name it is asked for.
func (r *readNames) wrap(getenv func(string) string) func(string) string {
	return func(k string) string {
		r.mu.Lock()
		if r.names == nil {
			r.names = map[string]bool{}
		}
		r.names[k] = true
		r.mu.Unlock()
		return getenv(k)
	}
}

func (r *readNames) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.names))
	for k := range r.names {
		out = append(out, k)
	}
	return out
}

// unknownEnv lists the ORCH_* variables set in the environment that nothing reads: not a
// daemon setting, not an env-source secret (ORCH_SECRET_<KEY>), not a variable of the
// commands (cliEnvNames), and not one read so far, such as a ${NAME} reference of a file
// loaded. Call it once the command loaded its files.
func (c *cli) unknownEnv() []config.UnknownEnv {
	if c.environ == nil {
		return nil
	}
	var set []string
	for _, kv := range c.environ() {
		if name, _, ok := strings.Cut(kv, "="); ok {
			set = append(set, name)
		}
	}
	known := append([]string(nil), cliEnvNames...)
	if c.read != nil {
		known = append(known, c.read.list()...)
	}
	return config.CheckEnv(set, known...)
}

// warnUnknownEnv logs a warning for each ORCH_* variable set that nothing reads (a mistyped
// setting is otherwise silently ignored). Values are never logged.
func (c *cli) warnUnknownEnv(ctx context.Context, log *slog.Logger) {
	for _, u := range c.unknownEnv() {
		attrs := []slog.Attr{slog.String(logkey.Variable, u.Name)}
		if u.Suggest != "" {
			attrs = append(attrs, slog.String(logkey.DidYouMean, u.Suggest))
		}
		log.LogAttrs(ctx, slog.LevelWarn, u.String(), attrs...)
	}
}
