package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/metrics"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Locks is what the API needs from the lock service; *locks.Locker implements it.
type Locks interface {
	List(ctx context.Context, prefix string) ([]locks.Info, error)
	ForceRelease(ctx context.Context, r locks.ForceRequest) (locks.Info, error)
	Freeze(ctx context.Context, r locks.FreezeRequest) (locks.Info, error)
	Unfreeze(ctx context.Context, key string) (locks.Info, error)
	Ping(ctx context.Context) error
}

var _ Locks = (*locks.Locker)(nil)

// Deps is what NewServer is built from. Engine, Runs, Locks and Config are required.
type Deps struct {
	Config *config.Daemon
	// Engine is the deploy engine (*phases.Engine): the domain's contract, answering with
	// run records. toHTTP maps its errors (orchestrator's, wrapped) to status codes.
	Engine orchestrator.Engine[*runs.Run]
	Runs   runs.Store
	Locks  Locks
	// Deliveries de-duplicates webhook deliveries (nil: Runs, which must then implement
	// runs.Deliveries; both run stores do).
	Deliveries runs.Deliveries
	// Audit is the audit log the API's actions are recorded in (nil: Runs, which must then
	// implement runs.AuditLog; both run stores do).
	Audit runs.AuditLog
	// Metrics is served at /metrics and told about every request (nil: no metrics).
	Metrics *metrics.Metrics
	// Logger receives the access log and server-side failures (nil: discard).
	Logger *slog.Logger
	// Notifier is told about freezes placed and lifted through the API (nil: nobody).
	Notifier Notifier
	// Pipelines are the loaded pipelines, for the dashboard's view of their deploy windows
	// (nil: none shown).
	Pipelines map[string]*config.Pipeline

	// Heartbeat is the interval of SSE comment lines that keep idle streams open through
	// proxies (default 15s).
	Heartbeat time.Duration
	// MaxStreams caps the SSE streams open at once; one more answers 503 (default 256).
	MaxStreams int
	// MaxStreamsPerClient caps the SSE streams one client (its address and credential)
	// holds open at once; one more answers 503 (default 16).
	MaxStreamsPerClient int
	// DeliveryTTL is how long a webhook delivery ID is remembered for de-duplication
	// (default 72h: GitHub lets a delivery be redelivered for three days).
	DeliveryTTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Defaults of Deps.
const (
	DefaultHeartbeat   = 15 * time.Second
	DefaultDeliveryTTL = 72 * time.Hour
	DefaultMaxStreams  = 256
	// DefaultMaxStreamsPerClient is Deps.MaxStreamsPerClient's default.
	DefaultMaxStreamsPerClient = 16
	// maxAPIBody caps JSON bodies of the API routes; webhooks get Config.MaxBodyBytes.
	maxAPIBody = 64 << 10
)

// server holds the handlers' dependencies. It is built once by NewServer.
type server struct {
	cfg         *config.Daemon
	engine      orchestrator.Engine[*runs.Run]
	runs        runs.Store
	deliveries  runs.Deliveries
	audit       runs.AuditLog
	pipelines   map[string]*config.Pipeline
	locks       Locks
	metrics     *metrics.Metrics
	notifier    Notifier
	log         *slog.Logger
	heartbeat   time.Duration
	deliveryTTL time.Duration
	now         func() time.Time
	auth        *authenticator
	triggerRate *limiter // per credential (token name), after the token checked out
	planRate    *limiter // per credential (token name), after the token checked out: plans
	webhookRate *limiter // per provider, after the signature checked out
	tokenFail   *limiter // per client address: wrong tokens (any route, the login form)
	webhookFail *limiter // per client address: deliveries that did not verify
	pages       *pages
	streams     *streamSlots
	runJSON     *runJSON
	trusted     []netip.Prefix      // trusted_proxies
	hosts       map[string]struct{} // allowed_hosts, lower case
	anyHost     bool                // allowed_hosts holds "*"
	bodies      *bodyBudget         // webhook bodies being read
	refusals    *logEvery           // refusals logged at most once per client per minute
}

// NewServer returns the daemon's HTTP handler: the API, the webhooks, the dashboard, health
// and metrics (see routes.go for the map). It panics if a required dependency is missing,
// since that is a wiring mistake in cmd.
func NewServer(d Deps) http.Handler {
	if d.Config == nil || d.Engine == nil || d.Runs == nil || d.Locks == nil {
		panic("api.NewServer: Config, Engine, Runs and Locks are required")
	}
	if d.Deliveries == nil {
		var ok bool
		if d.Deliveries, ok = d.Runs.(runs.Deliveries); !ok {
			panic("api.NewServer: Deliveries is required when Runs does not de-duplicate deliveries")
		}
	}
	if d.Audit == nil {
		var ok bool
		if d.Audit, ok = d.Runs.(runs.AuditLog); !ok {
			panic("api.NewServer: Audit is required when Runs keeps no audit log")
		}
	}
	s := &server{
		audit:       d.Audit,
		pipelines:   d.Pipelines,
		cfg:         d.Config,
		engine:      d.Engine,
		runs:        d.Runs,
		deliveries:  d.Deliveries,
		locks:       d.Locks,
		metrics:     d.Metrics,
		notifier:    d.Notifier,
		log:         d.Logger,
		heartbeat:   d.Heartbeat,
		deliveryTTL: d.DeliveryTTL,
		now:         d.Now,
		runJSON:     newRunJSON(),
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.heartbeat <= 0 {
		s.heartbeat = DefaultHeartbeat
	}
	if s.deliveryTTL <= 0 {
		s.deliveryTTL = DefaultDeliveryTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	if d.MaxStreams <= 0 {
		d.MaxStreams = DefaultMaxStreams
	}
	if d.MaxStreamsPerClient <= 0 {
		d.MaxStreamsPerClient = min(DefaultMaxStreamsPerClient, d.MaxStreams)
	}
	s.streams = newStreamSlots(d.MaxStreams, d.MaxStreamsPerClient)
	s.auth = newAuthenticator(d.Config.Tokens, d.Config.OIDC, d.Config.PublicRead, s.now)
	s.triggerRate = newLimiter(d.Config.RateLimits.Trigger, s.now)
	s.planRate = newLimiter(d.Config.RateLimits.Trigger, s.now)
	s.webhookRate = newLimiter(d.Config.RateLimits.Webhook, s.now)
	s.tokenFail = newLimiter(d.Config.RateLimits.Trigger, s.now)
	s.webhookFail = newLimiter(d.Config.RateLimits.Webhook, s.now)
	trusted, err := config.ParseTrustedProxies(d.Config.TrustedProxies)
	if err != nil {
		panic("api.NewServer: " + err.Error() + " (LoadDaemon validates it)")
	}
	s.trusted = trusted
	s.hosts = map[string]struct{}{}
	for _, h := range d.Config.AllowedHostsOr() {
		if h == "*" {
			s.anyHost = true
		}
		s.hosts[strings.ToLower(strings.TrimSuffix(h, "."))] = struct{}{}
	}
	limit := s.webhookBodyLimit()
	s.bodies = newBodyBudget(max(bodyBudgetUnverified, limit), max(bodyBudgetPerClient, limit), max(bodyBudgetTotal, 2*limit))
	s.refusals = newLogEvery(refusalLogEvery, s.now)
	s.pages = newPages()
	s.metrics.Delivery(s.recentRuns)
	return s.routes()
}

// webhookBodyLimit is the largest webhook body accepted.
func (s *server) webhookBodyLimit() int64 {
	if s.cfg.MaxBodyBytes > 0 {
		return s.cfg.MaxBodyBytes
	}
	return config.DefaultMaxBodyBytes
}
