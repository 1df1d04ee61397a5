// Package metrics is the daemon's Prometheus registry and the hooks that feed it. One
// Metrics is built in cmd/orchestrator and handed to everyone who reports: the engine
// (RunEnded, RunTakenOver, DeploymentStillBuilding, PhaseDone, StepDone: phases.Observer;
// AnalysisMeasured, AnalysisEnded: phases.AnalysisObserver), the Locker (Acquired, Released,
// ForceReleased: locks.Observer), the outside-API clients (OutsideRequest, the shape of
// coolify.MetricsFunc and outbound.MetricsFunc; CoolifyRequest, Coolify's requests by purpose), the notifier (Notification) and the HTTP
// server (HTTPRequest, Webhook), which also serves the registry at /metrics (Handler).
//
// Labels take only bounded values: routes are templates, HTTP methods outside RFC 9110
// count as "other", status codes as classes, lock keys as their namespace.
package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/deploy-orchestrator/orchestrator/analysis"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Metrics is the daemon's Prometheus registry and the hooks that feed it. Every method is safe for concurrent use and never blocks. A nil *Metrics ignores every
// call, so a component can be built without metrics in tests.
type Metrics struct {
	reg *prometheus.Registry

	runs          *prometheus.CounterVec
	takenOver     *prometheus.CounterVec
	stillBuilding *prometheus.CounterVec
	measurements  *prometheus.CounterVec
	analyses      *prometheus.CounterVec
	phaseDuration *prometheus.HistogramVec
	stepDuration  *prometheus.HistogramVec
	lockWait      *prometheus.HistogramVec
	lockHold      *prometheus.HistogramVec
	lockLost      *prometheus.CounterVec
	lockForced    *prometheus.CounterVec
	outside       *prometheus.CounterVec
	outsideDur    *prometheus.HistogramVec
	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	webhooks      *prometheus.CounterVec
	notifications *prometheus.CounterVec
	hostStatuses  *prometheus.CounterVec
	coolifyBy     *prometheus.CounterVec
}

var _ locks.Observer = (*Metrics)(nil)

// Buckets (seconds). Deploy phases take minutes; HTTP requests take milliseconds.
var (
	longBuckets  = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200}
	shortBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// New returns a Metrics with its own registry, holding the orchestrator's metrics and the Go
// runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runs: counter("orchestrator_runs_total", []string{"pipeline", "status"},
			"Runs that ended, by pipeline and final status."),
		takenOver: counter("orchestrator_runs_taken_over_total", []string{"pipeline", "by"},
			`Runs of this daemon that were taken over, by pipeline and by whom: "other" (another daemon, after this one lost its liveness lease or stopped) or "self" (this daemon, once it held its liveness lease again, after stopping the run).`),
		stillBuilding: counter("orchestrator_deployments_still_building_total", []string{"pipeline"},
			"Deployments a run left queued or in progress in Coolify because they did not end when canceled for the service's cancel_timeout, by pipeline (the run failed naming each)."),
		measurements: counter("orchestrator_analysis_measurements_total", []string{"pipeline", "check", "outcome"},
			"Measurements of a pipeline's metric checks (its analysis), by pipeline, check and outcome (successful, failed, inconclusive)."),
		analyses: counter("orchestrator_analyses_total", []string{"pipeline", "outcome"},
			"Analyses of a release (after a wave, after the last, after the mobile steps), by pipeline and outcome (successful, failed, inconclusive)."),
		phaseDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orchestrator_phase_duration_seconds",
			Help:    "Time a run spent in a phase (phase1, phase2, mobile), by pipeline.",
			Buckets: longBuckets,
		}, []string{"pipeline", "phase"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orchestrator_step_duration_seconds",
			Help:    "Time one service step took in a phase, lock wait included, by pipeline, phase and final step status.",
			Buckets: longBuckets,
		}, []string{"pipeline", "phase", "status"}),
		lockWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orchestrator_lock_wait_seconds",
			Help:    "Time from asking for a lock to being granted it, by lock namespace.",
			Buckets: longBuckets,
		}, []string{"namespace"}),
		lockHold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orchestrator_lock_hold_seconds",
			Help:    "Time a lease was held until released or lost, by lock namespace.",
			Buckets: longBuckets,
		}, []string{"namespace"}),
		lockLost: counter("orchestrator_lock_lost_total", []string{"namespace"},
			"Leases lost (expired before renewal, replaced or force-released), by lock namespace."),
		lockForced: counter("orchestrator_lock_forced_releases_total", []string{"namespace"},
			"Operator forced releases, by lock namespace."),
		outside: counter("orchestrator_outside_requests_total", []string{"system", "method", "route", "status"},
			`HTTP attempts to outside systems (coolify, flagsmith, infisical, notify), by system, method, route template and status ("error" when no response arrived).`),
		outsideDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orchestrator_outside_request_duration_seconds",
			Help:    "Duration of HTTP attempts to outside systems, by system.",
			Buckets: shortBuckets,
		}, []string{"system"}),
		httpRequests: counter("orchestrator_http_requests_total", []string{"route", "method", "code"},
			`Requests to the daemon's HTTP API, by route pattern ("unmatched" for none), method ("other" for one not in RFC 9110) and status class ("2xx" … "5xx").`),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orchestrator_http_request_duration_seconds",
			Help:    "Duration of requests to the daemon's HTTP API (SSE streams excluded), by route pattern.",
			Buckets: shortBuckets,
		}, []string{"route"}),
		webhooks: counter("orchestrator_webhooks_total", []string{"provider", "outcome"},
			"CI webhook deliveries, by provider and outcome (triggered, duplicate, unmapped, ignored, rejected)."),
		notifications: counter("orchestrator_notifications_total", []string{"target", "outcome"},
			`Notifications, by target name and outcome (sent, failed, dropped). Each attempt is in orchestrator_outside_requests_total{system="notify"}.`),
		hostStatuses: counter("orchestrator_deployment_statuses_total", []string{"host", "outcome"},
			`Deployment states told to Git hosts (github, gitlab), by host and outcome: sent; retry (an attempt failed and will be made again); dropped (given up: the host refused it, or it kept failing too long). Each request is in orchestrator_outside_requests_total.`),
		coolifyBy: counter("orchestrator_coolify_requests_by_purpose_total", []string{"purpose"},
			`Requests sent to Coolify (retries included), by purpose: preflight, sync, deploy, poll (waiting for deployments to end), health, other. rate(...[1m]) * 60 is the request budget spent per minute on each.`),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.runs, m.takenOver, m.stillBuilding, m.measurements, m.analyses, m.phaseDuration, m.stepDuration,
		m.lockWait, m.lockHold, m.lockLost, m.lockForced,
		m.outside, m.outsideDur, m.httpRequests, m.httpDuration, m.webhooks,
		m.notifications, m.hostStatuses, m.coolifyBy,
	)
	return m
}

// counter is a counter vector named name with labels, explained by help.
func counter(name string, labels []string, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// RunEnded counts a run that reached a terminal status.
func (m *Metrics) RunEnded(pipeline string, status runs.Status) {
	if m == nil {
		return
	}
	m.runs.WithLabelValues(pipeline, string(status)).Inc()
}

// RunTakenOver counts a run of this daemon that was taken over, by itself (self) or another.
func (m *Metrics) RunTakenOver(pipeline string, self bool) {
	if m == nil {
		return
	}
	by := "other"
	if self {
		by = "self"
	}
	m.takenOver.WithLabelValues(pipeline, by).Inc()
}

// DeploymentStillBuilding counts a deployment a run left building after canceling it in vain.
func (m *Metrics) DeploymentStillBuilding(pipeline string) {
	if m == nil {
		return
	}
	m.stillBuilding.WithLabelValues(pipeline).Inc()
}

// AnalysisMeasured counts one measurement of a pipeline's check (phases.AnalysisObserver).
func (m *Metrics) AnalysisMeasured(pipeline, check string, outcome analysis.Outcome) {
	if m == nil {
		return
	}
	m.measurements.WithLabelValues(pipeline, check, string(outcome)).Inc()
}

// AnalysisEnded counts one analysis of a release by outcome (phases.AnalysisObserver).
func (m *Metrics) AnalysisEnded(pipeline string, outcome analysis.Outcome) {
	if m == nil {
		return
	}
	m.analyses.WithLabelValues(pipeline, string(outcome)).Inc()
}

// PhaseDone records how long a run spent in a phase.
func (m *Metrics) PhaseDone(pipeline string, phase runs.Phase, d time.Duration) {
	if m == nil {
		return
	}
	m.phaseDuration.WithLabelValues(pipeline, string(phase)).Observe(d.Seconds())
}

// StepDone records how long one step took and how it ended.
func (m *Metrics) StepDone(pipeline string, phase runs.Phase, status runs.StepStatus, d time.Duration) {
	if m == nil {
		return
	}
	m.stepDuration.WithLabelValues(pipeline, string(phase), string(status)).Observe(d.Seconds())
}

// Acquired implements locks.Observer: a lease on key was granted after waiting.
func (m *Metrics) Acquired(key string, waited time.Duration) {
	if m == nil {
		return
	}
	m.lockWait.WithLabelValues(namespace(key)).Observe(waited.Seconds())
}

// Released implements locks.Observer: a lease on key ended after being held, released by its
// holder or lost.
func (m *Metrics) Released(key string, held time.Duration, lost bool) {
	if m == nil {
		return
	}
	ns := namespace(key)
	m.lockHold.WithLabelValues(ns).Observe(held.Seconds())
	if lost {
		m.lockLost.WithLabelValues(ns).Inc()
	}
}

// ForceReleased implements locks.Observer: an operator force-released key.
func (m *Metrics) ForceReleased(key string) {
	if m == nil {
		return
	}
	m.lockForced.WithLabelValues(namespace(key)).Inc()
}

// OutsideRequest records one HTTP attempt to an outside system. Its signature is
// coolify.MetricsFunc's: pass m.OutsideRequest to coolify.WithMetrics and its siblings.
// route must be a template ("/applications/{uuid}"), never a raw path; status 0 means no
// response arrived.
func (m *Metrics) OutsideRequest(system, method, route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	code := "error"
	if status > 0 {
		code = strconv.Itoa(status)
	}
	m.outside.WithLabelValues(system, method, route, code).Inc()
	m.outsideDur.WithLabelValues(system).Observe(d.Seconds())
}

// CoolifyRequest counts one request sent to Coolify for purpose (a coolify.Purpose: pass
// it, converted, to coolify.WithPurposeMetrics).
func (m *Metrics) CoolifyRequest(purpose string) {
	if m == nil {
		return
	}
	m.coolifyBy.WithLabelValues(purpose).Inc()
}

// HTTPRequest records one request to the daemon's HTTP API: route is the matched route
// pattern ("unmatched" for none), code the status sent. A stream (SSE) is counted but its
// duration is not observed.
func (m *Metrics) HTTPRequest(route, method string, code int, d time.Duration, stream bool) {
	if m == nil {
		return
	}
	m.httpRequests.WithLabelValues(route, knownMethod(method), statusClass(code)).Inc()
	if !stream {
		m.httpDuration.WithLabelValues(route).Observe(d.Seconds())
	}
}

// knownMethod is method when it is one of RFC 9110's, else "other": a client may send any
// token as its method, and each would be a new, never freed series.
func knownMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// statusClass is "1xx" … "5xx", else "other".
func statusClass(code int) string {
	if code >= 100 && code < 600 {
		return strconv.Itoa(code/100) + "xx"
	}
	return "other"
}

// Webhook records how one CI webhook delivery ended: triggered, duplicate, unmapped, ignored
// or rejected.
func (m *Metrics) Webhook(provider, outcome string) {
	if m == nil {
		return
	}
	m.webhooks.WithLabelValues(provider, outcome).Inc()
}

// Notification records how one notification ended. Its signature is notify.Options.Outcome's.
func (m *Metrics) Notification(target, outcome string) {
	if m == nil {
		return
	}
	m.notifications.WithLabelValues(target, outcome).Inc()
}

// DeploymentStatus records one attempt to tell a Git host a deployment state. Its signature
// is deploystatus.Options.Outcome's.
func (m *Metrics) DeploymentStatus(host, outcome string) {
	if m == nil {
		return
	}
	m.hostStatuses.WithLabelValues(host, outcome).Inc()
}

// namespace is the lock key's namespace without the colon ("coolify" for "coolify:phase1").
func namespace(key string) string {
	if i := strings.IndexByte(key, ':'); i > 0 {
		return key[:i]
	}
	return "none"
}
