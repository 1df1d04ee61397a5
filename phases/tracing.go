package phases

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator/internal/tracing"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The spans of a run (Deps.Traces), following OpenTelemetry's CI/CD conventions: the run's
// span ("RUN <pipeline>"), under the CI's span when the trigger carried a traceparent; under
// it a span per stage (Phase 1, Phase 2 and each of its waves, the mobile steps) and per task
// (a service's sync or deploy, a mobile step), a span per lock wait with the key and the
// fence granted, and the outside clients' spans (internal/outbound). A takeover's work on a
// dead daemon's run is a span of its own under the run's. Only names, IDs, keys, fences,
// results and route templates go into them: never a value the run writes, nor a header.

// runResults maps a run's final status to cicd.pipeline.result.
var runResults = map[runs.Status]attribute.KeyValue{
	runs.StatusSucceeded:   semconv.CICDPipelineResultSuccess,
	runs.StatusFailed:      semconv.CICDPipelineResultFailure,
	runs.StatusCanceled:    semconv.CICDPipelineResultCancellation,
	runs.StatusSuperseded:  semconv.CICDPipelineResultSkip,
	runs.StatusInterrupted: semconv.CICDPipelineResultError,
}

// runURL is the run's page on the dashboard ("" without Deps.PublicURL).
func (e *Engine) runURL(id string) string {
	if e.d.PublicURL == "" {
		return ""
	}
	return strings.TrimSuffix(e.d.PublicURL, "/") + "/runs/" + id
}

// runAttrs are the attributes that name run r.
func (e *Engine) runAttrs(r runs.Run) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		semconv.CICDPipelineName(r.Pipeline), semconv.CICDPipelineRunID(r.ID),
		semconv.CICDPipelineActionNameRun, tracing.Instance.String(e.d.Instance),
	}
	if u := e.runURL(r.ID); u != "" {
		attrs = append(attrs, semconv.CICDPipelineRunURLFull(u))
	}
	if r.Trigger.Build != "" {
		attrs = append(attrs, tracing.Build.String(r.Trigger.Build))
	}
	return attrs
}

// startRunSpan starts the span of run r, from its creation, under the CI's span when the
// trigger carried one. Without Deps.Traces it returns a span that does not record.
func (e *Engine) startRunSpan(r runs.Run) trace.Span {
	if e.d.Traces == nil {
		return trace.SpanFromContext(context.Background())
	}
	ctx := tracing.WithRemoteParent(context.Background(), r.Trigger.Origin.Traceparent)
	_, span := e.d.Traces.Tracer(tracing.Scope).Start(ctx, "RUN "+r.Pipeline, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(r.CreatedAt), trace.WithAttributes(e.runAttrs(r)...))
	return span
}

// startTakeoverSpan starts the span of this daemon's takeover of run r: under the run's own
// span (r.Trace), else the CI's, in the run's trace.
func (e *Engine) startTakeoverSpan(ctx context.Context, r runs.Run) (context.Context, trace.Span) {
	if e.d.Traces == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	parent := r.Trace
	if parent == "" {
		parent = r.Trigger.Origin.Traceparent
	}
	ctx = tracing.WithRemoteParent(ctx, parent)
	return e.d.Traces.Tracer(tracing.Scope).Start(ctx, "TAKEOVER "+r.Pipeline, trace.WithAttributes(e.runAttrs(r)...))
}

// endRunSpan ends span, a run's or a takeover's, with the run's final status and reason.
func endRunSpan(span trace.Span, status runs.Status, reason string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.RunStatus.String(string(status)))
	if res, ok := runResults[status]; ok {
		span.SetAttributes(res)
	}
	if status != runs.StatusSucceeded {
		span.SetStatus(codes.Error, reason)
	}
	span.End()
}

// stage starts the span of a stage of the run (the preflight, a phase, a wave, the mobile
// steps) under ctx's; phase may be "" (the preflight).
func stage(ctx context.Context, name string, phase runs.Phase, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if phase != "" {
		attrs = append(attrs, tracing.Phase.String(string(phase)))
	}
	return tracing.Child(ctx, name, trace.WithAttributes(attrs...))
}

// task runs fn, one task of the run (a service's sync or deploy, a mobile step), under a
// span of its own started under ctx's; fn's context carries it.
func (x *execution) task(ctx context.Context, phase runs.Phase, name string, fn func(context.Context) error) error {
	if !tracing.Recording(ctx) {
		return fn(ctx)
	}
	attrs := []attribute.KeyValue{
		semconv.CICDPipelineTaskName(name), semconv.CICDPipelineTaskTypeDeploy, tracing.Phase.String(string(phase)),
		semconv.CICDPipelineTaskRunID(fmt.Sprintf("%s/%s/%s", x.run.ID, phase, name)),
	}
	if u := x.e.runURL(x.run.ID); u != "" {
		attrs = append(attrs, semconv.CICDPipelineTaskRunURLFull(u))
	}
	ctx, span := tracing.Child(ctx, taskVerb[phase]+" "+name, trace.WithAttributes(attrs...))
	err := fn(ctx)
	switch {
	case err == nil:
		span.SetAttributes(semconv.CICDPipelineTaskRunResultSuccess)
	case x.stoppedBy(err):
		span.SetAttributes(semconv.CICDPipelineTaskRunResultCancellation)
	default:
		span.SetAttributes(semconv.CICDPipelineTaskRunResultFailure)
	}
	endSpan(span, err)
	return err
}

// taskVerb names a task's span by its phase.
var taskVerb = map[runs.Phase]string{runs.Phase1: "sync", runs.Phase2: "deploy", runs.PhaseMobile: "mobile"}

// endSpan ends a stage's, task's or lock wait's span, marked failed when err is set. The
// error's text stays out: the run's span carries the reason.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, "failed")
	}
	span.End()
}

// withSpan returns ctx carrying the span of from: work under ctx's cancellation, traced
// under a stage's span.
func withSpan(ctx, from context.Context) context.Context {
	return trace.ContextWithSpan(ctx, trace.SpanFromContext(from))
}
