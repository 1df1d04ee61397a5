package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator/internal/tracing"
)

const ci = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestChildOnlyUnderARecordingSpan: no span, or a span that is not sampled, starts nothing
// (traces off cost no span); a recording one gets a child from its own provider.
func TestChildOnlyUnderARecordingSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, span := tracing.Child(context.Background(), "orphan")
	if span.IsRecording() || trace.SpanFromContext(ctx).SpanContext().IsValid() {
		t.Error("a child without a parent records")
	}
	unsampled := tracing.WithRemoteParent(context.Background(), ci[:len(ci)-2]+"00")
	uctx, _ := tp.Tracer("t").Start(unsampled, "not sampled")
	if _, span := tracing.Child(uctx, "child"); span.IsRecording() {
		t.Error("a child of an unsampled span records")
	}
	pctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	_, child := tracing.Child(pctx, "child")
	child.End()
	parent.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "child" || spans[0].Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("spans %v, want child under parent", spans.Snapshots())
	}
}

// TestTraceparentRoundTrip: a span's traceparent, continued, is its remote parent; an
// invalid one is ignored.
func TestTraceparentRoundTrip(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	_, span := tp.Tracer("t").Start(tracing.WithRemoteParent(context.Background(), ci), "run")
	if got := span.SpanContext().TraceID().String(); got != ci[3:35] {
		t.Errorf("trace %s, want the CI's %s", got, ci[3:35])
	}
	got := trace.SpanContextFromContext(tracing.WithRemoteParent(context.Background(), tracing.Traceparent(span)))
	if got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Errorf("continued %v, want the span %s as remote parent", got, span.SpanContext().SpanID())
	}
	if sc := trace.SpanContextFromContext(tracing.WithRemoteParent(context.Background(), "00-bogus")); sc.IsValid() {
		t.Errorf("an invalid traceparent gave %v", sc)
	}
	if tracing.Traceparent(trace.SpanFromContext(context.Background())) != "" {
		t.Error("a span that does not record has a traceparent")
	}
}

// BenchmarkChild is the cost of a span at a task or lock boundary: off (no recording span in
// the context: traces off) and on (an SDK span, exported nowhere).
func BenchmarkChild(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	on, parent := tp.Tracer("b").Start(context.Background(), "parent")
	defer parent.End()
	for name, ctx := range map[string]context.Context{"off": context.Background(), "on": on} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, span := tracing.Child(ctx, "lock wait")
				span.End()
			}
		})
	}
}
