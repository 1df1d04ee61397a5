package phases_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/analysis"
	"github.com/deploy-orchestrator/orchestrator/internal/promtest"
	"github.com/deploy-orchestrator/orchestrator/metrics"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/phases"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// errorRatio is the 5xx ratio of a service's version, over the last 5s of promtest.App's
// traffic.
const errorRatio = `sum(rate(http_requests_total{service={{service}},version={{image_tag}},code="500"}[5s])) / sum(rate(http_requests_total{service={{service}},version={{image_tag}}}[5s]))`

// The daemon's metrics count measurements and analyses.
var _ phases.AnalysisObserver = (*metrics.Metrics)(nil)

const flagBefore = `{"ios":{"latest_version":"1.0.0"}}`

// analysisRig is an engine over the fake Coolify and Flagsmith, and a real Prometheus
// scraping a promtest.App.
type analysisRig struct {
	h    *harness
	fs   *flagsmithtest.Server
	app  *promtest.App
	prom *promtest.Server
}

func newAnalysisRig(t *testing.T) *analysisRig {
	t.Helper()
	app := promtest.StartApp(t)
	return newAnalysisRigOn(t, app, promtest.Start(t, app.Addr))
}

// newAnalysisRigOn is a rig on an App and Prometheus several tests share (starting
// Prometheus takes a few seconds of CPU).
func newAnalysisRigOn(t *testing.T, app *promtest.App, prom *promtest.Server) *analysisRig {
	t.Helper()
	r := &analysisRig{app: app, prom: prom}
	r.h = newHarness(t)
	r.fs = flagsmithtest.NewServer(t)
	if _, err := r.fs.AddEnvironment(flagsmithtest.Environment{APIKey: "env-key"}); err != nil {
		t.Fatal(err)
	}
	if err := r.fs.SetValue("env-key", "version_state", flagBefore); err != nil {
		t.Fatal(err)
	}
	return r
}

// pipeline is api, then web in the wave after, a mobile step at when, and the analysis
// block's extra lines and checks.
func (r *analysisRig) pipeline(when, extra, checks string) string {
	return fmt.Sprintf(`name: prod
coolify: { url: %s, token: %q }
services:
  - { name: api, uuid: %s, image_tag: "${trigger.image_tag}", deploy_timeout: 10s }
  - { name: web, uuid: %s, image_tag: "${trigger.image_tag}", deploy_timeout: 10s, after: [api] }
mobile:
  - name: version_state
    flagsmith: { url: %q, api_key: %q, environment: env-key }
    feature: version_state
    when: %s
    set: { ios.latest_version: "${trigger.app_version}" }
analysis:
  prometheus: { url: %s }
%s  checks:
%s`, r.h.coolifyURL, r.h.coolifyToken, uuidAPI, uuidWeb, r.fs.URL, r.fs.APIKey, when, r.prom.URL, extra, checks)
}

func errorsCheck(interval time.Duration, count int) string {
	return fmt.Sprintf("    - { name: errors, query: '%s', success: \"< 0.05\", interval: %s, count: %d }\n", errorRatio, interval, count)
}

// serve sets the traffic of both services' versions and waits until Prometheus has it.
func (r *analysisRig) serve(t *testing.T, version string, apiErrors, webErrors float64) {
	r.app.Set("api", version, promtest.Traffic{Requests: 100, ErrorRatio: apiErrors, Latency: 20 * time.Millisecond})
	r.app.Set("web", version, promtest.Traffic{Requests: 100, ErrorRatio: webErrors, Latency: 20 * time.Millisecond})
	r.prom.WaitScrapes(t, r.app, 3)
}

var trigger4 = orchestrator.Trigger{Build: "4", ImageTag: "v4", AppVersion: "4.0.0"}

// releaseRolledBack checks, from the fakes' own records, that both services carry and run
// v1 again and the flag holds its value from before the run, put back before the first
// service was.
func (r *analysisRig) releaseRolledBack(t *testing.T, id string) {
	t.Helper()
	for name, uuid := range map[string]string{"api": uuidAPI, "web": uuidWeb} {
		if a, _ := r.h.coolify.App(uuid); a.ImageTag != "v1" || a.DeployedImageTag != "v1" {
			t.Errorf("%s carries %s and runs %s, want v1 and v1", name, a.ImageTag, a.DeployedImageTag)
		}
	}
	if got, err := r.fs.Value("env-key", "version_state"); err != nil || got != flagBefore {
		t.Errorf("version_state after the run: %v (%v), want %s", got, err, flagBefore)
	}
	var flagBack, tagBack time.Time
	writes := r.fs.Writes()
	if len(writes) < 2 {
		t.Fatalf("Flagsmith saw %d writes, want the step's and its revert", len(writes))
	}
	flagBack = writes[len(writes)-1].At
	for _, q := range r.h.coolify.Requests() {
		if q.RunID == id && q.Method == "PATCH" && strings.Contains(string(q.Body), `"v1"`) {
			tagBack = q.Start
			break
		}
	}
	if tagBack.IsZero() || !flagBack.Before(tagBack) {
		t.Errorf("flag put back at %s, first tag at %s: want the flag first", flagBack.Format(time.StampMicro), tagBack.Format(time.StampMicro))
	}
}

// measured returns the run's measurements of check on service.
func measured(h *harness, id, service string) []runs.Event {
	var out []runs.Event
	for _, e := range h.events(id) {
		if e.Type == runs.EventAnalysisMeasured && e.Service == service {
			out = append(out, e)
		}
	}
	return out
}

// A 5xx spike on web's new version, after the flag was flipped (mobile after_phase2): the
// analysis after the last wave fails at its first measurement of web, and the run, with no
// one asked, puts the flag back and then both services (web and api, deployed fine and
// verified after its wave) on v1.
func TestAnalysisFailureRollsBackTheRelease(t *testing.T) {
	r := newAnalysisRig(t)
	r.serve(t, "v4", 0.01, 0.5)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r.h.traces = tp
	r.h.start(r.pipeline("after_phase2", "", errorsCheck(time.Second, 5)))
	id := r.h.submit("prod", trigger4)
	run := r.h.wait(id)
	if run.Status != runs.StatusFailed || !strings.Contains(run.Reason, "analysis after the last wave failed") {
		t.Fatalf("run %s (%s), want failed by the analysis after the last wave", run.Status, run.Reason)
	}
	tr := newSpanTree(t, exp.GetSpans())
	span := tr.named("analysis after the last wave", "", "")
	tr.parentOf(span, tr.named("RUN prod", "", ""))
	if span.Status.Code != codes.Error {
		t.Errorf("the failed analysis's span has status %v, want Error", span.Status.Code)
	}
	r.releaseRolledBack(t, id)
	web := measured(r.h, id, "web")
	if len(web) == 0 || len(web) > 2 || web[len(web)-1].Data[runs.DataOutcome] != string(analysis.Failed) {
		t.Errorf("web's measurements %+v: want the failure within two intervals", web)
	}
	if api := measured(r.h, id, "api"); len(api) < 5 {
		t.Errorf("api measured %d times, want its 5 after wave 1 before web deployed", len(api))
	}
}

// The flag as the last lever: the mobile step waits for the analysis after the last wave
// (after_verified), and the analysis goes on after it (after_mobile). A spike that starts
// once the flag is flipped fails it: the flag goes back first, the tags second.
func TestAnalysisAfterTheFlagRevertsTheFlagFirst(t *testing.T) {
	r := newAnalysisRig(t)
	r.serve(t, "v4", 0, 0)
	r.h.start(r.pipeline("after_verified", "  after_mobile: true\n", errorsCheck(500*time.Millisecond, 10)))
	id := r.h.submit("prod", trigger4)
	updated := r.h.waitEvent(id, runs.EventMobileUpdated, "")
	var verified bool
	for _, e := range r.h.events(id) {
		if e.Seq < updated.Seq && e.Type == runs.EventAnalysisEnded && strings.Contains(e.Message, "after the last wave successful") {
			verified = true
		}
	}
	if !verified {
		t.Errorf("the flag was written before the analysis after the last wave succeeded")
	}
	r.app.Set("web", "v4", promtest.Traffic{Requests: 100, ErrorRatio: 0.5})
	run := r.h.wait(id)
	if run.Status != runs.StatusFailed || !strings.Contains(run.Reason, "analysis after the mobile steps failed") {
		t.Fatalf("run %s (%s), want failed by the analysis after the mobile steps", run.Status, run.Reason)
	}
	r.releaseRolledBack(t, id)
}

// No data is inconclusive: on_inconclusive says what then, or the Inconclusive hook when the
// engine has one (approvals plug in there).
func TestAnalysisInconclusive(t *testing.T) {
	// Nobody serves "ghost": its query returns nothing.
	check := "    - { name: ghost, query: 'sum(rate(http_requests_total{service=\"ghost\",version={{image_tag}}}[5s]))', success: \"> 0\", interval: 200ms, count: 2 }\n"
	app := promtest.StartApp(t)
	prom := promtest.Start(t, app.Addr)
	for _, tc := range []struct {
		name, extra string
		vote        string // "approve" or "reject" the decision the run asks; "": nobody votes
		want        runs.Status
		tag         string
	}{
		{"on_inconclusive rollback", "  on_inconclusive: rollback\n", "", runs.StatusFailed, "v1"},
		{"on_inconclusive continue", "  on_inconclusive: continue\n", "", runs.StatusSucceeded, "v4"},
		{"a person continues (the default: ask)", "", "approve", runs.StatusSucceeded, "v4"},
		{"a person rolls back", "", "reject", runs.StatusFailed, "v1"},
		{"nobody decides in time", "  inconclusive_timeout: 1s\n", "", runs.StatusFailed, "v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newAnalysisRigOn(t, app, prom)
			r.h.start(r.pipeline("after_phase2", tc.extra, check))
			id := r.h.submit("prod", trigger4)
			if tc.vote != "" {
				if got, want := answerDecisions(t, r.h, id, tc.vote == "approve"), map[bool]int{true: 2, false: 1}[tc.vote == "approve"]; got != want {
					t.Errorf("%d decisions answered, want %d (after wave 1, and after the last wave unless rejected)", got, want)
				}
			}
			run := r.h.wait(id)
			if run.Status != tc.want {
				t.Fatalf("run %s (%s), want %s", run.Status, run.Reason, tc.want)
			}
			if a, _ := r.h.coolify.App(uuidWeb); a.DeployedImageTag != tc.tag {
				t.Errorf("web runs %s, want %s", a.DeployedImageTag, tc.tag)
			}
			asked := slices.ContainsFunc(r.h.events(id), func(e runs.Event) bool { return e.Type == runs.EventDecisionAsked })
			if wantAsked := !strings.Contains(tc.extra, "on_inconclusive"); asked != wantAsked {
				t.Errorf("a person asked: %v, want %v", asked, wantAsked)
			}
		})
	}
}

// answerDecisions follows run id to its end, answering each inconclusive analysis it asks
// about (approve or reject) as a person would, through Engine.Decide, and returns how many
// it answered. The run keeps its phase meanwhile: it is not awaiting as a run before Phase 1
// is, so no newer build supersedes it mid-release.
func answerDecisions(t *testing.T, h *harness, id string, approve bool) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	answered := 0
	err := runs.Follow(ctx, h.store, id, 0, func(e runs.Event) error {
		if e.Type != runs.EventDecisionAsked {
			return nil
		}
		run := h.get(id)
		d := run.Decision
		if d == nil || d.Kind != runs.DecisionInconclusive || !strings.Contains(d.Summary, "ghost") || run.Status == runs.StatusAwaiting {
			return fmt.Errorf("run %s asks %+v, want an inconclusive analysis naming the check, in its phase", run.Status, d)
		}
		answered++
		_, err := h.engine.Decide(ctx, id, orchestrator.DecisionVote{By: "api:alice", Approve: approve, Digest: d.Digest, Reason: "looked at the graphs"})
		return err
	})
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	return answered
}

// plan shows the checks as they would be sent, and names one Prometheus refuses; a run with
// it fails before it writes anything.
func TestPlanShowsTheChecks(t *testing.T) {
	r := newAnalysisRig(t)
	// MetricsQL (the offline check) takes rate() of an instant vector; Prometheus does not.
	bad := "    - { name: bad, query: 'sum(rate(http_requests_total{version={{image_tag}}}))', success: \"< 1\" }\n"
	r.h.start(r.pipeline("after_phase2", "", errorsCheck(time.Second, 3)+bad))
	plan, err := r.h.engine.Plan(context.Background(), "prod", trigger4)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Checks) != 3 {
		t.Fatalf("plan checks %+v, want errors on api and web, and bad", plan.Checks)
	}
	c := plan.Checks[1]
	if c.Name != "errors" || c.Service != "web" || !strings.Contains(c.Query, `service="web",version="v4"`) || c.Success != "< 0.05" || c.Count != 3 || c.Error != "" {
		t.Errorf("plan check %+v, want errors on web with its values filled in", c)
	}
	if plan.Checks[2].Error == "" || !plan.WouldFail || !strings.Contains(strings.Join(plan.Problems, "\n"), "analysis check bad") {
		t.Errorf("plan %+v: want the bad check refused by Prometheus", plan)
	}
	id := r.h.submit("prod", trigger4)
	run := r.h.wait(id)
	if run.Status != runs.StatusFailed || !strings.Contains(run.Reason, "preflight") {
		t.Errorf("run %s (%s), want failed at preflight", run.Status, run.Reason)
	}
	for _, q := range r.h.coolify.Requests() {
		if q.Method != "GET" {
			t.Errorf("Coolify saw %s %s: want nothing written", q.Method, q.Path)
		}
	}
}
