package phases

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/analysis"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// AnalysisObserver, when the engine's Observer implements it too, counts measurements and
// analyses by outcome (*metrics.Metrics does).
type AnalysisObserver interface {
	AnalysisMeasured(pipeline, check string, outcome analysis.Outcome)
	AnalysisEnded(pipeline string, outcome analysis.Outcome)
}

// analysisError is an analysis that ends the run: it failed, or was inconclusive and the
// decision was to roll back. The whole release goes back, the flags first (undo).
type analysisError struct {
	stage   string
	outcome analysis.Outcome
	detail  string
}

func (e *analysisError) Error() string {
	return fmt.Sprintf("analysis %s %s: %s", e.stage, e.outcome, e.detail)
}

// Stages of a run's analysis.
const (
	stageLastWave = "after the last wave"
	stageMobile   = "after the mobile steps"
)

// verified is the run's verification after Phase 2 and the mobile steps after_phase2: the
// analysis after the last wave, then the mobile steps after_verified, then (after_mobile)
// the analysis again. It returns where it stopped ("analysis" or "mobile step") with the
// error. A pipeline without analysis has nothing to verify.
func (x *execution) verified() (string, error) {
	a := x.p.Analysis
	if a == nil {
		return "", nil
	}
	if err := x.analyze(x.ctx, stageLastWave, x.deployedServices()); err != nil {
		return "analysis", err
	}
	wrote := len(x.mobileDone)
	if err := x.mobileSteps(config.WhenAfterVerified); err != nil {
		return "mobile step", err
	}
	if a.AfterMobile && len(x.mobileDone) > wrote {
		if err := x.analyze(x.ctx, stageMobile, x.deployedServices()); err != nil {
			return "analysis", err
		}
	}
	return "", nil
}

// analyzeWave is the analysis after wave n (0-based) of count, before the next one starts:
// the services of the wave deployed. The last wave's is verified's.
func (x *execution) analyzeWave(ctx context.Context, n, count int, wave []*svcState) error {
	if x.p.Analysis == nil || n == count-1 {
		return nil
	}
	var deployed []*svcState
	for _, st := range wave {
		if st.deployed && !st.superseded {
			deployed = append(deployed, st)
		}
	}
	return x.analyze(ctx, fmt.Sprintf("after wave %d of %d", n+1, count), deployed)
}

// deployedServices are the services this run deployed.
func (x *execution) deployedServices() []*svcState {
	var out []*svcState
	for _, st := range x.services {
		if st.deployed && !st.superseded {
			out = append(out, st)
		}
	}
	return out
}

// undo puts back what the run changed after a failure past Phase 1: after an analysis that
// ends the run, the whole release, the Flagsmith keys first (the mobile app stops hearing of
// the new version within seconds) and the services second; else what on_failure says.
func (x *execution) undo(err error) {
	if ae := (*analysisError)(nil); errors.As(err, &ae) {
		if x.notOwned() == nil {
			x.revertMobile()
			x.mobileDone = nil
		}
		x.compensate(runs.Phase2, compensateRelease)
		return
	}
	x.compensate(runs.Phase2, x.compensationFor(x.stoppedBy(err)))
}

// analyze measures the pipeline's checks for svcs at a stage, under a span of its own, and
// records every measurement as it is taken. It returns nil when the analysis is successful,
// or inconclusive and the decision is to continue; an *analysisError when it ends the run;
// the stop's error when the run is stopped meanwhile.
func (x *execution) analyze(ctx context.Context, at string, svcs []*svcState) (err error) {
	checks, err := x.renderChecks(svcs)
	if err != nil {
		return &analysisError{stage: at, outcome: analysis.Failed, detail: err.Error()}
	}
	if len(checks) == 0 {
		return nil
	}
	q, err := x.e.prometheusFor(x.p.Analysis.Prometheus.URL)
	if err != nil {
		return &analysisError{stage: at, outcome: analysis.Failed, detail: err.Error()}
	}
	ctx, span := stage(ctx, "analysis "+at, "")
	defer func() { endSpan(span, err) }()
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = checkLabel(c.Name, c.Service)
	}
	x.rec.event(runs.Event{Type: runs.EventAnalysisStarted, Message: fmt.Sprintf("%s: %s", at, strings.Join(names, ", "))})
	actx, stop := x.untilStop(ctx)
	outcome, results, err := analysis.Run(actx, q, checks, x.recordMeasurement)
	stop()
	if err != nil {
		return fmt.Errorf("analysis %s: %w", at, err)
	}
	detail := resultsText(results)
	if o, ok := x.e.d.Observer.(AnalysisObserver); ok {
		o.AnalysisEnded(x.run.Pipeline, outcome)
	}
	end := runs.Event{Type: runs.EventAnalysisEnded, Data: map[string]string{runs.DataOutcome: string(outcome)}}
	switch outcome {
	case analysis.Successful:
		end.Message = fmt.Sprintf("%s successful: %s", at, detail)
		x.rec.event(end)
		return nil
	case analysis.Failed:
		end.Message = fmt.Sprintf("%s failed: %s; rolling the release back", at, detail)
		x.rec.event(end)
		return &analysisError{stage: at, outcome: outcome, detail: detail}
	}
	goOn, err := x.decideInconclusive(at, results)
	if err != nil {
		return err
	}
	decision := "rollback"
	if goOn {
		decision = "continue"
	}
	end.Message = fmt.Sprintf("%s inconclusive: %s; decision: %s", at, detail, decision)
	x.rec.event(end)
	if goOn {
		return nil
	}
	return &analysisError{stage: at, outcome: outcome, detail: detail}
}

// decideInconclusive does what the pipeline's on_inconclusive says: continue, roll back, or
// (ask, the default) wait for a person: an approval continues, a rejection or nobody within
// inconclusive_timeout rolls the release back. It returns the stop's error when the run is
// stopped while it waits.
func (x *execution) decideInconclusive(at string, results []analysis.Result) (goOn bool, err error) {
	switch x.p.Analysis.OnInconclusive {
	case config.InconclusiveContinue:
		return true, nil
	case config.InconclusiveRollback:
		return false, nil
	}
	summary := fmt.Sprintf("analysis %s inconclusive: %s", at, resultsText(results))
	sum := sha256.Sum256([]byte(x.run.ID + "\n" + summary))
	err = x.awaitDecision(runs.Decision{Kind: runs.DecisionInconclusive, Digest: hex.EncodeToString(sum[:]),
		Summary: summary, Needed: 1}, x.p.Analysis.InconclusiveTimeout)
	if err == nil || errors.Is(err, errRejected) || errors.Is(err, errExpired) {
		return err == nil, nil
	}
	return false, err
}

// recordMeasurement writes one measurement as an event (the dashboard's run page shows it as
// it comes) and counts it.
func (x *execution) recordMeasurement(m analysis.Measurement) {
	value := "no data"
	if !m.NoData && m.Err == "" {
		value = strconv.FormatFloat(m.Value, 'g', 4, 64)
	}
	msg := fmt.Sprintf("%s: %s, %s (%d successful, %d failed, %d inconclusive)", m.Check, value, m.Outcome, m.Successes, m.Failures, m.Inconclusives)
	if m.Err != "" {
		msg += ": " + m.Err
	}
	x.rec.event(runs.Event{Type: runs.EventAnalysisMeasured, Service: m.Service, Message: msg, Data: map[string]string{
		runs.DataCheck: m.Check, runs.DataValue: value, runs.DataOutcome: string(m.Outcome), runs.DataMeasurement: strconv.Itoa(m.N),
	}})
	if o, ok := x.e.d.Observer.(AnalysisObserver); ok {
		o.AnalysisMeasured(x.run.Pipeline, m.Check, m.Outcome)
	}
}

// renderChecks builds the checks measured for svcs: a check naming a service once per
// service, the others once.
func (x *execution) renderChecks(svcs []*svcState) ([]analysis.Check, error) {
	var out []analysis.Check
	for _, c := range x.p.Analysis.Checks {
		succ, fail, err := c.Conditions()
		if err != nil {
			return nil, fmt.Errorf("check %s: %w", c.Name, err)
		}
		for _, st := range x.checkTargets(c, svcs) {
			q, err := analysis.Render(c.Query, x.checkValues(st))
			if err != nil {
				return nil, fmt.Errorf("check %s: %w", c.Name, err)
			}
			ch := analysis.Check{Name: c.Name, Query: q, Success: succ, Failure: fail, Interval: c.Interval, Count: c.Count, FailureLimit: c.FailureLimit}
			if st != nil {
				ch.Service = st.svc.Name
			}
			out = append(out, ch)
		}
	}
	return out, nil
}

// checkTargets are the services c is measured for: each of svcs for a check that names a
// service, else one release-wide measurement (nil).
func (x *execution) checkTargets(c config.AnalysisCheck, svcs []*svcState) []*svcState {
	if analysis.PerService(c.Query) {
		return svcs
	}
	return []*svcState{nil}
}

// checkValues are the placeholders' values for a check of st (nil: the whole release).
// Each becomes a quoted PromQL string (analysis.Render): a trigger's value cannot add PromQL.
func (x *execution) checkValues(st *svcState) map[string]string {
	t := x.run.Trigger
	v := map[string]string{
		analysis.Pipeline: x.run.Pipeline, analysis.RunID: x.run.ID,
		analysis.ImageTag: t.ImageTag, analysis.Build: t.Build,
	}
	if st != nil {
		v[analysis.Service], v[analysis.UUID] = st.svc.Name, st.svc.UUID
		if st.svc.ImageTag != "" {
			v[analysis.ImageTag] = st.svc.ImageTag
		}
	}
	return v
}

// planChecks renders the checks a run would measure (for every service of the pipeline) and
// asks Prometheus to parse each query without running it; the problems are
// the preflight's.
func (x *execution) planChecks(ctx context.Context) ([]orchestrator.CheckPlan, []string) {
	a := x.p.Analysis
	if a == nil {
		return nil, nil
	}
	var svcs []*svcState
	for _, s := range x.p.Services {
		svcs = append(svcs, &svcState{svc: s})
	}
	checks, err := x.renderChecks(svcs)
	if err != nil {
		return nil, []string{"analysis: " + err.Error()}
	}
	client, cerr := x.e.prometheusFor(a.Prometheus.URL)
	var plans []orchestrator.CheckPlan
	var problems []string
	for i, c := range checks {
		cp := orchestrator.CheckPlan{Name: c.Name, Service: c.Service, Query: c.Query, Success: c.Success.String(),
			Interval: c.Interval, Count: c.Count, FailureLimit: c.FailureLimit}
		if c.Failure != nil {
			cp.Failure = c.Failure.String()
		}
		err := cerr
		if err == nil {
			err = analysis.Validate(ctx, client, c.Query)
		}
		if err != nil && (i == 0 || cerr == nil) {
			cp.Error = err.Error()
			problems = append(problems, fmt.Sprintf("analysis check %s (Prometheus %s): %v", checkLabel(c.Name, c.Service), a.Prometheus.URL, err))
		}
		plans = append(plans, cp)
	}
	return plans, problems
}

// prometheusFor returns the client of the Prometheus at url.
func (e *Engine) prometheusFor(url string) (analysis.Client, error) {
	if e.d.Prometheus != nil {
		return e.d.Prometheus(url)
	}
	return analysis.NewClient(url, e.d.HTTP)
}

func checkLabel(check, service string) string {
	if service == "" {
		return check
	}
	return check + " on " + service
}

// resultsText sums the checks' results up: "errors on api failed (2 of 3 failed)".
func resultsText(results []analysis.Result) string {
	parts := make([]string, len(results))
	for i, r := range results {
		parts[i] = fmt.Sprintf("%s %s (%d measured: %d successful, %d failed)", checkLabel(r.Check, r.Service), r.Outcome, r.Measurements, r.Successes, r.Failures)
	}
	return strings.Join(parts, "; ")
}
