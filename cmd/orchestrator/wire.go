package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/redislock"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
	"github.com/deploy-orchestrator/orchestrator/mobile"
	"github.com/deploy-orchestrator/orchestrator/phases"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
	"github.com/deploy-orchestrator/orchestrator/secrets"
	"github.com/deploy-orchestrator/orchestrator/secrets/infisical"
)

// store is a run store that also keeps service marks; both backends are.
type store interface {
	runs.Store
	runs.MarkStore
}

// backends are the lock service and the run store of one process, on Redis or on the
// embedded SQLite files of the state directory.
type backends struct {
	locker *locks.Locker
	store  store
	// where describes the backend for humans ("redis" or the state dir), never a password.
	where string
	close func() error
}

func (b *backends) Close() error { return b.close() }

// openBackends opens the configured backend: Redis when d.RedisURL is set (with d.Locks'
// replica confirmation), else the SQLite files in d.StateDir (created if missing).
func openBackends(ctx context.Context, d *config.Daemon, log *slog.Logger, obs locks.Observer) (*backends, error) {
	lopts := locks.Options{Logger: log, Observer: obs}
	redisURL, stateDir := d.RedisURL.Reveal(), d.StateDir
	if redisURL != "" {
		client, err := redislock.NewClient(redisURL)
		if err != nil {
			return nil, fmt.Errorf("redis backend: %w (check ORCH_REDIS_URL / redis_url)", err)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := client.Ping(pctx).Err(); err != nil {
			client.Close()
			return nil, fmt.Errorf("redis backend: cannot reach the server: %w (is Redis running and ORCH_REDIS_URL right?)", err)
		}
		locker := locks.New(redislock.New(client, redislock.Options{Logger: log,
			MinReplicas: d.Locks.MinReplicas, ReplicaTimeout: d.Locks.ReplicaTimeout}), lopts)
		st := redisstore.New(client, redisstore.Options{})
		return &backends{locker: locker, store: st, where: "redis", close: func() error {
			return errors.Join(locker.Close(), st.Close(), client.Close())
		}}, nil
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", stateDir, err)
	}
	drv, err := sqlitelock.Open(filepath.Join(stateDir, "locks.db"))
	if err != nil {
		return nil, fmt.Errorf("embedded lock backend in %s: %w", stateDir, err)
	}
	locker := locks.New(drv, lopts)
	st, err := sqlitestore.Open(ctx, filepath.Join(stateDir, sqlitestore.FileName))
	if err != nil {
		locker.Close()
		return nil, fmt.Errorf("embedded run store in %s: %w", stateDir, err)
	}
	return &backends{locker: locker, store: st, where: stateDir, close: func() error {
		return errors.Join(locker.Close(), st.Close())
	}}, nil
}

// clients builds the outside-API clients with the daemon's logger, version and metrics.
type clients struct {
	log     *slog.Logger
	metrics func(system, method, route string, status int, d time.Duration)
	poll    time.Duration // deployment polling; 0 means the client's default
}

func newClients(log *slog.Logger, metrics func(system, method, route string, status int, d time.Duration), poll time.Duration) *clients {
	return &clients{log: log, metrics: metrics, poll: poll}
}

// tuning adjusts polling for the demo (zero values keep the defaults).
type tuning struct {
	coolifyPoll, healthPoll time.Duration
}

func (c *clients) coolify(url, token string) phases.Coolify {
	opts := []coolify.Option{coolify.WithLogger(c.log), coolify.WithVersion(version)}
	if c.poll > 0 {
		opts = append(opts, coolify.WithPollInterval(c.poll))
	}
	if c.metrics != nil {
		opts = append(opts, coolify.WithMetrics(c.metrics))
	}
	return coolify.New(url, token, opts...)
}

func (c *clients) flagsmith(url, apiKey string) *mobile.Client {
	opts := []mobile.Option{mobile.WithLogger(c.log), mobile.WithVersion(version)}
	if c.metrics != nil {
		opts = append(opts, mobile.WithMetrics(c.metrics))
	}
	return mobile.NewClient(url, apiKey, opts...)
}

func (c *clients) secrets(name string, src config.SecretSource) (secrets.Source, error) {
	in := src.Infisical
	if in == nil {
		return nil, fmt.Errorf("secret source %q names no kind (want infisical)", name)
	}
	cl, err := infisical.New(infisical.Config{BaseURL: in.URL, ClientID: in.ClientID,
		ClientSecret: in.ClientSecret.Reveal(), Version: version, Logger: c.log, Metrics: c.metrics})
	if err != nil {
		return nil, err
	}
	return cl.Source(infisical.Scope{ProjectID: in.ProjectID, Environment: in.Environment, Path: in.Path}), nil
}

// engineConfig is what building an engine takes beyond the backends.
type engineConfig struct {
	pipelines map[string]*config.Pipeline
	instance  string
	getenv    func(string) string
	log       *slog.Logger
	observer  phases.Observer
	clients   *clients
	// healthPoll paces health checks; 0 means the engine's default.
	healthPoll time.Duration
	// livenessTTL is the TTL of the daemon's liveness lease; 0 means the default.
	livenessTTL time.Duration
}

func newEngine(b *backends, ec engineConfig) (*phases.Engine, error) {
	return phases.New(phases.Deps{
		Store: b.store, Marks: b.store, Locker: b.locker, Pipelines: ec.pipelines,
		Coolify: ec.clients.coolify, Flagsmith: ec.clients.flagsmith, Secrets: ec.clients.secrets,
		Getenv: ec.getenv, EnvPrefix: secretEnvPrefix,
		Instance: ec.instance, Logger: ec.log, Observer: ec.observer, PollInterval: ec.healthPoll,
		LivenessTTL: ec.livenessTTL,
	})
}

// secretEnvPrefix is prepended to keys of the built-in "env" secret source, so a pipeline can
// read ORCH_SECRET_<KEY> but not the daemon's own settings.
const secretEnvPrefix = "ORCH_SECRET_"

// instanceID names this daemon for run ownership. It must be stable across restarts of the
// same daemon and distinct between daemons sharing a backend: host name plus listen address.
func instanceID(getenv func(string) string, listen string) string {
	if id := getenv("ORCH_INSTANCE"); id != "" {
		return id
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return host + "/" + strings.TrimPrefix(listen, "127.0.0.1")
}
