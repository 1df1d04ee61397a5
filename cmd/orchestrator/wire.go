package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/deploystatus"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/pacing"
	"github.com/deploy-orchestrator/orchestrator/internal/private"
	"github.com/deploy-orchestrator/orchestrator/internal/redisack"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/redislock"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
	"github.com/deploy-orchestrator/orchestrator/mobile"
	"github.com/deploy-orchestrator/orchestrator/notify"
	"github.com/deploy-orchestrator/orchestrator/phases"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
	"github.com/deploy-orchestrator/orchestrator/secrets"
	"github.com/deploy-orchestrator/orchestrator/secrets/infisical"
)

// store is a run store that also keeps service marks, prunes its history and de-duplicates
// webhook deliveries; both backends are.
type store interface {
	runs.Store
	runs.MarkStore
	runs.ReportStore
	runs.Pruner
	runs.Deliveries
	runs.AuditLog
}

// backends are the lock service and the run store of one process, on Redis or on the
// embedded SQLite files of the state directory.
type backends struct {
	locker *locks.Locker
	store  store
	// rdb is the Redis client of the Redis backend (nil on the embedded one).
	rdb redis.UniversalClient
	// where names the backend for humans: "redis://host:port/db" (never a password) or
	// "state dir <path>".
	where string
	// absent, set only by openBackendsToRead, says which part of the embedded backend does
	// not exist ("no state directory at …"), and lacks what a command reading it therefore
	// cannot find ("no lock held, …").
	absent, lacks string
	close         func() error
}

func (b *backends) Close() error { return b.close() }

// openBackends opens the configured backend: Redis when d.RedisURL is set (with d.Locks'
// replica confirmation), else the SQLite files in d.StateDir (created if missing).
func openBackends(ctx context.Context, d *config.Daemon, log *slog.Logger, obs locks.Observer) (*backends, error) {
	lopts := lockerOptions(log, obs)
	redisURL, stateDir := d.RedisURL.Reveal(), d.StateDir
	if redisURL != "" {
		redis.SetLogger(redisLogger{log})
		client, err := redislock.NewClient(redisURL)
		if err != nil {
			return nil, usageError("redis backend: %w (check ORCH_REDIS_URL / redis_url)", err)
		}
		where := redactRedisURL(redisURL)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := client.Ping(pctx).Err(); err != nil {
			client.Close()
			return nil, &exitError{code: exitUnreachable, err: fmt.Errorf("redis backend %s: cannot reach the server: %w (is Redis running and ORCH_REDIS_URL right?)", where, err)}
		}
		ack, err := redisack.New(redisURL, d.Locks.MinReplicas, d.Locks.ReplicaTimeout)
		if err != nil {
			client.Close()
			return nil, usageError("redis backend: %w (check ORCH_REDIS_URL / redis_url)", err)
		}
		locker := locks.New(redislock.New(client, redislock.Options{Logger: log,
			MinReplicas: d.Locks.MinReplicas, ReplicaTimeout: d.Locks.ReplicaTimeout, Confirm: ack}), lopts)
		st := redisstore.New(client, redisstore.Options{Confirm: ack})
		return &backends{locker: locker, store: st, rdb: client, where: where, close: func() error {
			return errors.Join(locker.Close(), st.Close(), ack.Close(), client.Close())
		}}, nil
	}
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	open, err := private.Dir(stateDir)
	if err != nil {
		return nil, err
	}
	if open != 0 {
		log.Warn("state directory is open to other users; the run history and locks are in it (chmod 700 it)",
			slog.String(logkey.StateDir, stateDir), slog.String(logkey.OpenBits, open.String()))
	}
	drv, err := openLockDB(stateDir)
	if err != nil {
		return nil, err
	}
	locker := locks.New(drv, lopts)
	st, err := openRunStore(ctx, stateDir)
	if err != nil {
		locker.Close()
		return nil, err
	}
	return &backends{locker: locker, store: st, where: "state dir " + stateDir, close: func() error {
		return errors.Join(locker.Close(), st.Close())
	}}, nil
}

// openLockDB opens (creating it if missing) the embedded lock database in stateDir.
func openLockDB(stateDir string) (*sqlitelock.Driver, error) {
	drv, err := sqlitelock.Open(filepath.Join(stateDir, lockDBName))
	if err != nil {
		return nil, fmt.Errorf("embedded lock backend in %s: %w", stateDir, err)
	}
	return drv, nil
}

// openRunStore opens (creating it if missing) the embedded run store in stateDir.
func openRunStore(ctx context.Context, stateDir string) (*sqlitestore.Store, error) {
	st, err := sqlitestore.Open(ctx, filepath.Join(stateDir, sqlitestore.FileName))
	if err != nil {
		return nil, fmt.Errorf("embedded run store in %s: %w", stateDir, err)
	}
	return st, nil
}

// openBackendsToRead opens the configured backend for a command that only reads (plan, runs
// list|show|watch, locks list|audit) without creating anything on disk: Redis as
// openBackends does; on the embedded backend, a state directory or database that does not
// exist is not created but stood in for by an empty one (noLocks: no lock held; noRuns: no
// run and no service mark), and the backends' absent and lacks say which. A database that
// exists is opened as openBackends opens it: opening one of this build's schema writes
// nothing to it (one of an older schema is migrated).
func openBackendsToRead(ctx context.Context, d *config.Daemon, log *slog.Logger) (*backends, error) {
	if d.RedisURL.IsSet() {
		return openBackends(ctx, d, log, nil)
	}
	dir := d.StateDir
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	lockDB, runDB := exists(filepath.Join(dir, lockDBName)), exists(filepath.Join(dir, sqlitestore.FileName))
	if lockDB && runDB {
		return openBackends(ctx, d, log, nil)
	}
	b := &backends{where: "state dir " + dir}
	var drv locks.Driver = noLocks{}
	var st store = noRuns{}
	switch {
	case !lockDB && !runDB:
		b.absent, b.lacks = "no state in "+dir, noLocksMeans+", "+noMarksMeans
		if !exists(dir) {
			b.absent = "no state directory at " + dir
		}
	case !lockDB:
		b.absent, b.lacks = "no lock database in "+dir, noLocksMeans
		s, err := openRunStore(ctx, dir)
		if err != nil {
			return nil, err
		}
		st = s
	default:
		b.absent, b.lacks = "no run store in "+dir, noMarksMeans
		ld, err := openLockDB(dir)
		if err != nil {
			return nil, err
		}
		drv = ld
	}
	b.locker = locks.New(drv, lockerOptions(log, nil))
	b.store = st
	b.close = func() error { return errors.Join(b.locker.Close(), st.Close()) }
	return b, nil
}

// lockerOptions are the Locker's options in every command; obs (may be nil) observes its
// waits.
func lockerOptions(log *slog.Logger, obs locks.Observer) locks.Options {
	return locks.Options{Logger: log, Observer: obs, DefaultBudget: defaultBudget}
}

// What a missing lock database and a missing run store mean for a command that reads them.
const (
	noLocksMeans = "no lock held"
	noMarksMeans = "no build marks for the stale-build check"
)

// exists reports whether path exists (an error other than "does not exist" counts as
// existing: opening it then says what is wrong).
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// lockDBName is the embedded lock backend's file in the state directory.
const lockDBName = "locks.db"

// redactRedisURL names a Redis URL for humans: scheme, host, port and database, without the
// user, password or query.
func redactRedisURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "redis (unparsable URL)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// redisLogger sends go-redis's own log lines to the command's slog logger, so they share its
// format instead of printing plain text to stderr. Most are the client's inner workings (each
// failed dial of its pool, retried; a connection closed), at debug level: what they come to
// is reported once by the code that called Redis (an unreachable server is one error, exit 3;
// the daemon's failures name the store or lock call). A Sentinel's switch to a new master or
// a newly found sentinel is news to an operator: info.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	level := slog.LevelDebug
	if strings.HasPrefix(msg, "sentinel: new master") || strings.HasPrefix(msg, "sentinel: discovered new sentinel") {
		level = slog.LevelInfo
	}
	l.log.Log(ctx, level, "redis client: "+msg)
}

// clients builds the outside-API clients with the daemon's logger, version and metrics.
type clients struct {
	log     *slog.Logger
	metrics func(system, method, route string, status int, d time.Duration)
	poll    time.Duration // deployment polling; 0 means the client's default
	// pace holds the rate budget of each Coolify instance and token (set by newEngine).
	pace *pacing.Pool
	// purposes, when set, counts Coolify's requests by purpose (metrics.CoolifyRequest).
	purposes func(purpose string)
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
	if count := c.purposes; count != nil {
		opts = append(opts, coolify.WithPurposeMetrics(func(p coolify.Purpose) { count(string(p)) }))
	}
	if p := c.pace.For(url, token); p != nil {
		opts = append(opts, coolify.WithLimiter(p))
	}
	if b := c.pace.Board(url, token); b != nil {
		// Daemons on one Redis share one look per tick at the active deployments.
		opts = append(opts, coolify.WithBoard(b))
	}
	return coolify.New(url, token, opts...)
}

func (c *clients) flagsmith(url, apiKey string) *mobile.Client {
	opts := []mobile.Option{mobile.WithLogger(c.log), mobile.WithVersion(version)}
	if c.metrics != nil {
		opts = append(opts, mobile.WithMetrics(c.metrics))
	}
	return mobile.New(url, apiKey, opts...)
}

func (c *clients) secrets(name string, src config.SecretSource) (secrets.Source, error) {
	in := src.Infisical
	if in == nil {
		return nil, fmt.Errorf("secret source %q names no kind (want infisical)", name)
	}
	cl, err := infisical.New(in.URL, in.ClientID, in.ClientSecret.Reveal(),
		infisical.WithVersion(version), infisical.WithLogger(c.log), infisical.WithMetrics(c.metrics))
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
	// notifier, when set, is told about run ends and long lock waits.
	notifier *notify.Notifier
	// reporter, when set, tells Git hosts of the runs (the pipelines' statuses blocks).
	reporter *deploystatus.Reporter
	clients  *clients
	// healthPoll paces health checks; 0 means the engine's default.
	healthPoll time.Duration
	// livenessTTL is the TTL of the daemon's liveness lease; 0 means the default.
	livenessTTL time.Duration
	// coolifyRateLimit is coolify.rate_limit; 0 turns pacing off.
	coolifyRateLimit int
	// traces is the runs' tracer provider (nil: none); publicURL the dashboard's address
	// their spans link to.
	traces    trace.TracerProvider
	publicURL string
}

func newEngine(b *backends, ec engineConfig) (*phases.Engine, error) {
	pace, st, err := coolifyPacing(b, ec.coolifyRateLimit, ec.log)
	if err != nil {
		return nil, fmt.Errorf("coolify.rate_limit: %w", err)
	}
	ec.clients.pace = pace
	var reporter phases.Reporter
	if ec.reporter != nil {
		reporter = ec.reporter
	}
	return phases.New(phases.Deps{
		Store: st, Marks: b.store, Audit: b.store, Locker: b.locker, Pipelines: ec.pipelines,
		Coolify: ec.clients.coolify, Flagsmith: ec.clients.flagsmith, Secrets: ec.clients.secrets,
		Getenv: ec.getenv, EnvPrefix: secretEnvPrefix,
		Instance: ec.instance, Logger: ec.log, Observer: ec.observer, PollInterval: ec.healthPoll,
		LivenessTTL: ec.livenessTTL, Notifier: ec.notifier, Reporter: reporter,
		Traces: ec.traces, PublicURL: ec.publicURL,
	})
}

// pacedReportInterval is how often at most a run gets a coolify.paced event.
const pacedReportInterval = 5 * time.Second

// coolifyPacing returns the pool of Coolify rate budgets (one per instance and token): in
// Redis on the Redis backend, so every daemon on it shares them; in this process on the
// embedded one, shared by its pipelines. Calls that waited are summed into coolify.paced
// events of their run (pacing.RunEvents), written through the returned store; b's Close
// writes what is still open.
func coolifyPacing(b *backends, perMinute int, log *slog.Logger) (*pacing.Pool, runs.Store, error) {
	if perMinute == 0 {
		return pacing.Off(), b.store, nil
	}
	paced := pacing.NewRunEvents(b.store, pacedReportInterval, log)
	closeStore := b.close
	b.close = func() error { paced.Stop(); return closeStore() }
	opts := pacing.Options{OnWait: paced.OnWait}
	budget := pacing.Budget{Limit: perMinute, Window: time.Minute}
	var pool *pacing.Pool
	var err error
	if b.rdb != nil {
		pool, err = pacing.NewRedisPool(b.rdb, budget, opts)
	} else {
		pool, err = pacing.NewLocalPool(budget, opts)
	}
	return pool, paced.Store(b.store), err
}

// secretEnvPrefix is prepended to keys of the built-in "env" secret source, so a pipeline can
// read ORCH_SECRET_<KEY> but not the daemon's own settings.
const secretEnvPrefix = config.EnvSecretPrefix

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

// defaultBudget is the Locker's budget for a request that names none: phase locks wait
// longer than service locks.
func defaultBudget(key string) locks.Budget {
	if orchestrator.IsPhaseKey(key) {
		return locks.PhaseBudget
	}
	return locks.ServiceBudget
}
