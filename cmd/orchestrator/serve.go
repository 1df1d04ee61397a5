package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/otlp"
	"github.com/deploy-orchestrator/orchestrator/metrics"
	"github.com/deploy-orchestrator/orchestrator/notify"
	"github.com/deploy-orchestrator/orchestrator/phases"
)

func cmdServe(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("serve", "[--config FILE] [flags]",
		"Runs the daemon: the HTTP API, CI webhooks, the dashboard and the engine. Settings come from\n"+
			"the config file, then ORCH_* environment variables, then flags.\n\n"+serveEnvHelp())
	cfgPath := fs.String("config", c.getenv("ORCH_CONFIG"), "daemon config file (YAML; env ORCH_CONFIG)")
	allowMissing := fs.Bool("allow-missing-secrets", false, "start even when env-source secrets (ORCH_SECRET_<KEY>) the pipelines read are not set; runs needing them fail")
	config.AddFlags(fs)
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("serve takes no arguments, got %q", fs.Args())
	}
	d, err := config.LoadDaemon(*cfgPath, c.getenv, fs)
	if err != nil {
		return usageError("daemon config:\n%w", err)
	}
	log, err := newLogger(c.stderr, d.Log.Level, d.Log.Format)
	if err != nil {
		return err
	}
	pipelines, err := config.LoadPipelines(d.PipelinesDir, c.getenv)
	if err != nil {
		return pipelinesError(d.PipelinesDir, err)
	}
	if err := d.CheckRules(pipelines); err != nil {
		return usageError("webhook rules:\n%w", err)
	}
	if err := d.ApplyEnvironments(pipelines); err != nil {
		return usageError("environments:\n%w", err)
	}
	c.warnUnknownEnv(ctx, log)
	if missing := config.MissingEnvSecretsAll(pipelines, c.getenv); len(missing) > 0 {
		if !*allowMissing {
			return usageError("env-source secrets missing:\n%s\n(set them, or start with --allow-missing-secrets: runs that need them fail)",
				strings.Join(missing.Lines(), "\n"))
		}
		for _, p := range missing {
			log.LogAttrs(ctx, slog.LevelWarn, "env-source secret missing", slog.String(logkey.Problem, p.String()))
		}
	}
	return serveWith(ctx, c, d, pipelines, log, nil, tuning{})
}

// serveEnvHelp lists the environment variables serve reads, each with the config key it sets.
func serveEnvHelp() string {
	var b strings.Builder
	b.WriteString("Environment (each sets the config key shown):\n")
	overrides := config.EnvOverrides()
	names := make([]string, 0, len(overrides))
	for k := range overrides {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(&b, "  %-29s %s\n", k, overrides[k])
	}
	fmt.Fprintf(&b, "  %-29s %s\n", "ORCH_CONFIG", "the config file (as --config)")
	fmt.Fprintf(&b, "  %-29s %s\n", "ORCH_INSTANCE", "the daemon's identity for run ownership (default: host name + listen address)")
	fmt.Fprintf(&b, "  %-29s %s\n", config.EnvSecretPrefix+"<KEY>", "the value of a pipeline's env-source secret KEY")
	fmt.Fprintf(&b, "  %-29s %s\n", otlp.EnvEndpoint, "an OTLP/HTTP collector (http://collector:4318): traces of every run;")
	fmt.Fprintf(&b, "  %-29s %s\n", "", "the SDK's other OTEL_* variables apply; OTEL_SDK_DISABLED=true turns traces off")
	b.WriteString("Any other ORCH_* variable set is logged as a warning at start, naming the closest of these\n" +
		"(a mistyped name would be ignored), unless a loaded file references it as ${NAME}.")
	return b.String()
}

// notifyGrace is how long a stopping daemon waits for notifications still queued.
const notifyGrace = 5 * time.Second

// publicURL is the base URL notifications link to: public_url, else the bound address.
func publicURL(d *config.Daemon, addr string) string {
	if d.PublicURL != "" {
		return d.PublicURL
	}
	return "http://" + addr
}

// serveWith runs the daemon until ctx ends, then shuts down gracefully: no new runs, current
// steps finish or compensate within the grace period, locks are released, and what could not
// finish is marked. ready, when set, is called with the bound address once the daemon answers.
func serveWith(ctx context.Context, c *cli, d *config.Daemon, pipelines map[string]*config.Pipeline, log *slog.Logger, ready func(addr string), tn tuning) error {
	traces, err := otlp.Setup(ctx, c.getenv, version, log)
	if err != nil {
		return usageError("traces: %w", err)
	}
	// Flushed within the shutdown grace by shutdown; this covers the ways out before it.
	defer flushTraces(traces, log, time.Second)
	metrics := metrics.New()
	b, err := openBackends(ctx, d, log, metrics)
	if err != nil {
		return err
	}
	defer b.Close()

	ln, err := net.Listen("tcp", d.Listen)
	if err != nil {
		// The address comes from the config, the environment or a flag: a port in use or
		// not allowed is a configuration problem (exit 2), like an address that is no address.
		return usageError("listen on %s: %w (is another daemon running? set --listen or ORCH_LISTEN)", d.Listen, err)
	}
	instance := instanceID(c.getenv, ln.Addr().String())
	recordConfig(ctx, b.store, instance, pipelines, log)
	notifier := notify.New(notify.Options{Default: d.Notify, PublicURL: publicURL(d, ln.Addr().String()), Recorder: b.store,
		Metrics: metrics.OutsideRequest, Outcome: metrics.Notification, Logger: log, Version: version})
	// After the engine's shutdown (its runs' last messages are queued by then), the queue gets
	// a short grace of its own.
	defer func() {
		nctx, cancel := context.WithTimeout(context.Background(), notifyGrace)
		defer cancel()
		if err := notifier.Close(nctx); err != nil {
			log.LogAttrs(context.Background(), slog.LevelWarn, "notifications left unsent", slog.String(logkey.Error, err.Error()))
		}
	}()
	clients := newClients(log, metrics.OutsideRequest, tn.coolifyPoll)
	clients.purposes = metrics.CoolifyRequest
	// Stopped after the engine (defers run last in, first out): the runs' last states are in
	// the outbox by then.
	reporter, stopStatuses := startStatuses(ctx, b, pipelines, instance, publicURL(d, ln.Addr().String()), clients, metrics, log)
	defer stopStatuses()
	eng, err := newEngine(b, engineConfig{
		pipelines: pipelines, instance: instance, getenv: c.getenv, log: log, observer: metrics, notifier: notifier,
		reporter: reporter, clients: clients, healthPoll: tn.healthPoll,
		livenessTTL: d.LivenessTTL, coolifyRateLimit: d.Coolify.RateLimit,
		traces: traces, publicURL: publicURL(d, ln.Addr().String()),
	})
	if err != nil {
		ln.Close()
		return err
	}
	interrupted, err := eng.Start(ctx)
	if err != nil {
		ln.Close()
		return err
	}
	for _, r := range interrupted {
		log.LogAttrs(ctx, slog.LevelWarn, "run interrupted by a restart", slog.String(logkey.RunID, r.ID),
			slog.String(logkey.Pipeline, r.Pipeline), slog.Any(logkey.Left, r.Left))
	}

	stopPruner := startPruner(ctx, b.store, d.Retention, log)
	defer stopPruner()

	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	// Header and body timeouts, header size and connection caps: see api.NewHTTPServer and
	// api.LimitListener.
	srv := api.NewHTTPServer(api.Deps{Config: d, Engine: eng, Runs: b.store, Deliveries: b.store, Locks: b.locker,
		Metrics: metrics, Logger: log, Notifier: notifier, Pipelines: pipelines})
	// Streams (SSE) end when shutdown starts; request contexts derive from this.
	srv.BaseContext = func(net.Listener) context.Context { return baseCtx }
	trusted, _ := config.ParseTrustedProxies(d.TrustedProxies) // validated by LoadDaemon
	served := make(chan error, 1)
	go func() { served <- srv.Serve(api.LimitListener(ln, d.Connections, trusted, log)) }()
	warnNoTokens(ctx, d, log)
	log.LogAttrs(ctx, slog.LevelInfo, "daemon listening", slog.String(logkey.Addr, ln.Addr().String()),
		slog.String(logkey.Backend, string(d.Backend())), slog.String(logkey.Instance, instance), slog.Int(logkey.Pipelines, len(pipelines)))
	if ready != nil {
		ready(ln.Addr().String())
	}

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	}
	return shutdown(d, log, eng, traces, srv, served, cancelBase)
}

// flushTraces exports the spans still buffered and stops the exporter, within wait; a
// collector that does not answer in time loses them, with a warning.
func flushTraces(traces *otlp.Provider, log *slog.Logger, wait time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	flushTracesWithin(ctx, traces, log)
}

// flushTracesWithin is flushTraces within ctx. Once done, a second call does nothing.
func flushTracesWithin(ctx context.Context, traces *otlp.Provider, log *slog.Logger) {
	if err := traces.Shutdown(ctx); err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "traces not all exported", slog.String(logkey.Error, err.Error()))
	}
}

// warnNoTokens warns when no API token is configured: every route that needs one is closed.
func warnNoTokens(ctx context.Context, d *config.Daemon, log *slog.Logger) {
	if !d.Tokens.None() {
		return
	}
	closed := "triggers, cancels, lock operations and reads"
	if d.PublicRead {
		closed = "triggers, cancels and lock operations"
	}
	log.LogAttrs(ctx, slog.LevelWarn, "no API token is configured: every route that needs one ("+closed+") answers 403; "+
		"set ORCH_TRIGGER_TOKEN, ORCH_ADMIN_TOKEN or ORCH_READ_TOKEN (tokens.trigger, tokens.admin, tokens.read in the config file)")
}

// shutdown stops the daemon serving through srv (served reports its end): the engine first,
// within the grace period, then the streams (cancelBase ends their context), then the
// requests still open.
func shutdown(d *config.Daemon, log *slog.Logger, eng *phases.Engine, traces *otlp.Provider, srv *http.Server, served <-chan error, cancelBase func()) error {
	log.LogAttrs(context.Background(), slog.LevelInfo, "shutting down", slog.Duration(logkey.Grace, d.ShutdownGrace))
	gctx, cancel := context.WithTimeout(context.Background(), d.ShutdownGrace)
	defer cancel()
	engErr := eng.Shutdown(gctx)
	flushTracesWithin(gctx, traces, log) // the runs' last spans, within what is left of the grace
	cancelBase()
	// Streams ended with baseCtx; what is left are requests finishing and connections that
	// never sent one (Go treats those as idle only after 5 s). Past a short wait, close them.
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	var httpErr error
	if err := srv.Shutdown(hctx); errors.Is(err, context.DeadlineExceeded) {
		log.LogAttrs(context.Background(), slog.LevelWarn, "connections still open after 5s; closing them")
		httpErr = srv.Close()
	} else {
		httpErr = err
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		httpErr = errors.Join(httpErr, err)
	}
	if engErr != nil || httpErr != nil {
		return errors.Join(engErr, httpErr)
	}
	log.LogAttrs(context.Background(), slog.LevelInfo, "daemon stopped")
	return nil
}
