package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/analysis"
	"github.com/deploy-orchestrator/orchestrator/metrics"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// scrape returns the lines of m's exposition that describe the orchestrator's own metrics:
// HELP and TYPE lines, counters, and histograms' _count series.
func scrape(t *testing.T, m *metrics.Metrics) []string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: got %d, want 200", rec.Code)
	}
	var lines []string
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		if !strings.HasPrefix(name, "orchestrator_") || strings.Contains(line, "_bucket{") || strings.Contains(line, "_sum{") {
			continue
		}
		lines = append(lines, line)
	}
	return lines
}

// The exposition is what dashboards and alerts are written against: names, help, types and
// labels stay as they are.
func TestExposition(t *testing.T) {
	m := metrics.New()
	m.RunEnded("prod", runs.StatusSucceeded)
	m.PhaseDone("prod", runs.Phase1, 2*time.Second)
	m.StepDone("prod", runs.Phase2, runs.StepHealthy, time.Second)
	m.Acquired("coolify:phase1", time.Millisecond)
	m.Released("coolify:phase1", time.Second, true)
	m.Released("nonamespace", time.Second, false)
	m.ForceReleased("mobile:flagsmith:version_state")
	m.OutsideRequest("coolify", "GET", "/applications/{uuid}", 200, 30*time.Millisecond)
	m.OutsideRequest("flagsmith", "PUT", "/features", 0, time.Millisecond)
	m.HTTPRequest("/v1/runs", "GET", 200, time.Millisecond, false)
	m.HTTPRequest("/v1/runs/{id}/events", "BREW", 599, time.Minute, true)
	m.HTTPRequest("unmatched", "GET", 700, time.Millisecond, false)
	m.Webhook("github", "triggered")
	m.Notification("ops", "sent")
	m.CoolifyRequest("poll")
	m.CoolifyRequest("poll")

	want := []string{
		`# HELP orchestrator_coolify_requests_by_purpose_total Requests sent to Coolify (retries included), by purpose: preflight, sync, deploy, poll (waiting for deployments to end), health, other. rate(...[1m]) * 60 is the request budget spent per minute on each.`,
		`# TYPE orchestrator_coolify_requests_by_purpose_total counter`,
		`orchestrator_coolify_requests_by_purpose_total{purpose="poll"} 2`,
		`# HELP orchestrator_http_request_duration_seconds Duration of requests to the daemon's HTTP API (SSE streams excluded), by route pattern.`,
		`# TYPE orchestrator_http_request_duration_seconds histogram`,
		`orchestrator_http_request_duration_seconds_count{route="/v1/runs"} 1`,
		`orchestrator_http_request_duration_seconds_count{route="unmatched"} 1`,
		`# HELP orchestrator_http_requests_total Requests to the daemon's HTTP API, by route pattern ("unmatched" for none), method ("other" for one not in RFC 9110) and status class ("2xx" … "5xx").`,
		`# TYPE orchestrator_http_requests_total counter`,
		`orchestrator_http_requests_total{code="2xx",method="GET",route="/v1/runs"} 1`,
		`orchestrator_http_requests_total{code="5xx",method="other",route="/v1/runs/{id}/events"} 1`,
		`orchestrator_http_requests_total{code="other",method="GET",route="unmatched"} 1`,
		`# HELP orchestrator_lock_forced_releases_total Operator forced releases, by lock namespace.`,
		`# TYPE orchestrator_lock_forced_releases_total counter`,
		`orchestrator_lock_forced_releases_total{namespace="mobile"} 1`,
		`# HELP orchestrator_lock_hold_seconds Time a lease was held until released or lost, by lock namespace.`,
		`# TYPE orchestrator_lock_hold_seconds histogram`,
		`orchestrator_lock_hold_seconds_count{namespace="coolify"} 1`,
		`orchestrator_lock_hold_seconds_count{namespace="none"} 1`,
		`# HELP orchestrator_lock_lost_total Leases lost (expired before renewal, replaced or force-released), by lock namespace.`,
		`# TYPE orchestrator_lock_lost_total counter`,
		`orchestrator_lock_lost_total{namespace="coolify"} 1`,
		`# HELP orchestrator_lock_wait_seconds Time from asking for a lock to being granted it, by lock namespace.`,
		`# TYPE orchestrator_lock_wait_seconds histogram`,
		`orchestrator_lock_wait_seconds_count{namespace="coolify"} 1`,
		`# HELP orchestrator_notifications_total Notifications, by target name and outcome (sent, failed, dropped). Each attempt is in orchestrator_outside_requests_total{system="notify"}.`,
		`# TYPE orchestrator_notifications_total counter`,
		`orchestrator_notifications_total{outcome="sent",target="ops"} 1`,
		`# HELP orchestrator_outside_request_duration_seconds Duration of HTTP attempts to outside systems, by system.`,
		`# TYPE orchestrator_outside_request_duration_seconds histogram`,
		`orchestrator_outside_request_duration_seconds_count{system="coolify"} 1`,
		`orchestrator_outside_request_duration_seconds_count{system="flagsmith"} 1`,
		`# HELP orchestrator_outside_requests_total HTTP attempts to outside systems (coolify, flagsmith, infisical, notify), by system, method, route template and status ("error" when no response arrived).`,
		`# TYPE orchestrator_outside_requests_total counter`,
		`orchestrator_outside_requests_total{method="GET",route="/applications/{uuid}",status="200",system="coolify"} 1`,
		`orchestrator_outside_requests_total{method="PUT",route="/features",status="error",system="flagsmith"} 1`,
		`# HELP orchestrator_phase_duration_seconds Time a run spent in a phase (phase1, phase2, mobile), by pipeline.`,
		`# TYPE orchestrator_phase_duration_seconds histogram`,
		`orchestrator_phase_duration_seconds_count{phase="phase1",pipeline="prod"} 1`,
		`# HELP orchestrator_runs_total Runs that ended, by pipeline and final status.`,
		`# TYPE orchestrator_runs_total counter`,
		`orchestrator_runs_total{pipeline="prod",status="succeeded"} 1`,
		`# HELP orchestrator_step_duration_seconds Time one service step took in a phase, lock wait included, by pipeline, phase and final step status.`,
		`# TYPE orchestrator_step_duration_seconds histogram`,
		`orchestrator_step_duration_seconds_count{phase="phase2",pipeline="prod",status="healthy"} 1`,
		`# HELP orchestrator_webhooks_total CI webhook deliveries, by provider and outcome (triggered, duplicate, unmapped, ignored, rejected).`,
		`# TYPE orchestrator_webhooks_total counter`,
		`orchestrator_webhooks_total{outcome="triggered",provider="github"} 1`,
	}
	got := scrape(t, m)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("exposition:\ngot\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A nil *Metrics is what a component built without metrics holds: every hook is a no-op and
// there is nothing to serve.
func TestAnalysisMetrics(t *testing.T) {
	m := metrics.New()
	m.AnalysisMeasured("prod", "errors", analysis.Failed)
	m.AnalysisMeasured("prod", "errors", analysis.Failed)
	m.AnalysisEnded("prod", analysis.Failed)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`orchestrator_analysis_measurements_total{check="errors",outcome="failed",pipeline="prod"} 2`,
		`orchestrator_analyses_total{outcome="failed",pipeline="prod"} 1`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("exposition lacks %s", want)
		}
	}
}

func TestNilMetrics(t *testing.T) {
	var m *metrics.Metrics
	m.RunEnded("prod", runs.StatusFailed)
	m.PhaseDone("prod", runs.Phase1, time.Second)
	m.StepDone("prod", runs.Phase1, runs.StepFailed, time.Second)
	m.Acquired("coolify:x", 0)
	m.Released("coolify:x", 0, true)
	m.ForceReleased("coolify:x")
	m.OutsideRequest("coolify", "GET", "/", 500, 0)
	m.HTTPRequest("/", "GET", 200, 0, false)
	m.Webhook("github", "rejected")
	m.Notification("ops", "failed")
	m.CoolifyRequest("sync")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil Metrics' handler: got %d, want 404", rec.Code)
	}
}
