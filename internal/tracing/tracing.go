// Package tracing is the thin layer between the engine, the outside clients and
// OpenTelemetry's trace API: it starts a child span only under a span that records (so with
// traces off a call costs a context lookup), continues a W3C traceparent, and names the
// attributes of the spans that are the orchestrator's own. The tracer provider is built by
// package otlp from the OTEL_* environment; this package never imports the SDK.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of every span the orchestrator starts.
const Scope = "github.com/deploy-orchestrator/orchestrator"

// The orchestrator's own span attributes (the CI/CD and HTTP ones come from semconv).
const (
	LockKey    = attribute.Key("orchestrator.lock.key")   // the key a lock wait is for
	LockFence  = attribute.Key("orchestrator.lock.fence") // the fence of the lease granted
	Phase      = attribute.Key("orchestrator.phase")      // phase1, phase2, mobile
	Wave       = attribute.Key("orchestrator.wave")       // a Phase-2 wave, from 1
	System     = attribute.Key("orchestrator.system")     // the outside system of a client span
	Build      = attribute.Key("orchestrator.build")      // the trigger's build
	Instance   = attribute.Key("orchestrator.instance")   // the daemon that executes or takes over
	RunStatus  = attribute.Key("orchestrator.run.status") // the run's final status, as stored
	StepStatus = attribute.Key("orchestrator.step.status")
)

// Child starts a span named name under ctx's span, from the same tracer provider, and
// returns the context that carries it. Under no span, or one that does not record (traces
// off, or not sampled), it starts nothing: it returns ctx and a span whose End does nothing.
func Child(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noop.Span{}
	}
	return parent.TracerProvider().Tracer(Scope).Start(ctx, name, opts...)
}

// Recording reports whether ctx carries a span that records: whether Child would start one.
func Recording(ctx context.Context) bool { return trace.SpanFromContext(ctx).IsRecording() }

// WithRemoteParent returns ctx carrying the span context of traceparent, a W3C traceparent
// header value, as the remote parent of the spans started under it. An empty or invalid
// traceparent leaves ctx as it is.
func WithRemoteParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Traceparent is the W3C traceparent of span: what WithRemoteParent continues. Empty for a
// span that does not record.
func Traceparent(span trace.Span) string {
	if !span.IsRecording() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpan(context.Background(), span), c)
	return c["traceparent"]
}
