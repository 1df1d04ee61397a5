package outbound_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// traced returns a context under a recording span and the exporter of its provider.
func traced(t *testing.T) (context.Context, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "task")
	t.Cleanup(func() { span.End() })
	return ctx, exp
}

func spanAttr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// TestClientSpanPerAttempt: each attempt is a client span under the caller's span with the
// method, the server, the route template and the status, the retry counted; the URL's path
// values, its query and the headers stay out.
func TestClientSpanPerAttempt(t *testing.T) {
	ctx, exp := traced(t)
	srv, _ := server(t, http.StatusServiceUnavailable, http.StatusOK)
	c := outbound.New(outbound.Options{System: "coolify", Policy: fast})
	resp, err := c.Do(ctx, outbound.Request{Method: http.MethodGet, URL: srv.URL + "/things/value-in-path?token=query-secret",
		Route: "/things/{id}", Header: http.Header{"Authorization": {"Bearer header-secret"}}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 (one per attempt)", len(spans))
	}
	for i, want := range []struct{ status, resend string }{{"503", ""}, {"200", "1"}} {
		s := spans[i]
		if s.Name != "GET /things/{id}" || s.SpanKind != trace.SpanKindClient || s.Parent.SpanID() != trace.SpanContextFromContext(ctx).SpanID() {
			t.Errorf("attempt %d: span %q kind %v, want a client span GET /things/{id} under the caller's", i, s.Name, s.SpanKind)
		}
		for k, v := range map[string]string{"http.request.method": "GET", "server.address": "127.0.0.1", "url.template": "/things/{id}",
			"http.response.status_code": want.status, "http.request.resend_count": want.resend, "orchestrator.system": "coolify"} {
			if got := spanAttr(s, k); got != v {
				t.Errorf("attempt %d: %s = %q, want %q", i, k, got, v)
			}
		}
		for _, kv := range s.Attributes {
			for _, secret := range []string{"value-in-path", "query-secret", "header-secret"} {
				if strings.Contains(kv.Value.String(), secret) {
					t.Errorf("attempt %d: %s carries %q", i, kv.Key, secret)
				}
			}
		}
	}
}

// TestClientSpanOfATransportError keeps the error's text (which names the URL) out.
func TestClientSpanOfATransportError(t *testing.T) {
	ctx, exp := traced(t)
	srv, _ := server(t, http.StatusOK)
	url := srv.URL + "/things/1?token=query-secret"
	srv.Close()
	c := outbound.New(outbound.Options{System: "flagsmith", Policy: outbound.Policy{}})
	if _, err := c.Do(ctx, outbound.Request{Method: http.MethodGet, URL: url, Route: "/things/{id}"}); err == nil {
		t.Fatal("no error from a closed server")
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if spanAttr(s, "error.type") == "" || s.Status.Description != "transport error" || spanAttr(s, "http.response.status_code") != "" {
		t.Errorf("span: error.type %q, status %q, code %q; want an error type, \"transport error\", no code",
			spanAttr(s, "error.type"), s.Status.Description, spanAttr(s, "http.response.status_code"))
	}
}
