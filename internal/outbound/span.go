package outbound

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator/internal/tracing"
)

// startSpan starts the client span of one attempt under the span of ctx (the run's task, a
// takeover), when that one records. Its attributes are the method, the server's host and
// port, the route template (never the URL, whose path and query carry values) and the
// outside system; never a header or a body.
func (c *Client) startSpan(ctx context.Context, r *http.Request, m meta) trace.Span {
	if !tracing.Recording(ctx) {
		return nil
	}
	name := r.Method
	if m.route != "" {
		name += " " + m.route
	}
	attrs := []attribute.KeyValue{
		semconv.HTTPRequestMethodKey.String(r.Method),
		semconv.ServerAddress(r.URL.Hostname()),
		tracing.System.String(c.o.System),
	}
	if port, err := strconv.Atoi(r.URL.Port()); err == nil {
		attrs = append(attrs, semconv.ServerPort(port))
	}
	if m.route != "" {
		attrs = append(attrs, semconv.URLTemplate(m.route))
	}
	if m.hist != nil {
		if m.hist.attempts > 0 {
			attrs = append(attrs, semconv.HTTPRequestResendCount(m.hist.attempts))
		}
		m.hist.attempts++
	}
	_, span := tracing.Child(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return span
}

// endSpan records the attempt's answer on span and ends it: the status code, and for an
// error the status or the error's type (never its text, which names the URL).
func endSpan(span trace.Span, resp *http.Response, err error) {
	if span == nil {
		return
	}
	switch {
	case err != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String(fmt.Sprintf("%T", err)))
		span.SetStatus(codes.Error, "transport error")
	case resp.StatusCode >= 400:
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode), semconv.ErrorTypeKey.String(strconv.Itoa(resp.StatusCode)))
		span.SetStatus(codes.Error, "")
	default:
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	}
	span.End()
}
