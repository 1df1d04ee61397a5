// Package otlp builds the daemon's tracer provider from the standard OpenTelemetry
// environment: traces are exported over OTLP/HTTP (protobuf) when OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set and OTEL_SDK_DISABLED is not true; otherwise
// the provider is a no-op and tracing costs nothing. The SDK and the exporter read the other
// OTEL_* variables themselves (OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER and its
// argument, OTEL_RESOURCE_ATTRIBUTES, timeouts, compression, batch sizes).
package otlp

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
)

// The environment variables Setup reads itself.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvDisabled       = "OTEL_SDK_DISABLED"
	EnvServiceName    = "OTEL_SERVICE_NAME"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME is unset.
const DefaultServiceName = "orchestrator"

// Enabled reports whether getenv asks for traces: an OTLP endpoint is set and the SDK is not
// disabled.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv(EnvDisabled)), "true") {
		return false
	}
	return getenv(EnvEndpoint) != "" || getenv(EnvTracesEndpoint) != ""
}

// Provider is the daemon's tracer provider and the function that flushes and stops it.
type Provider struct {
	trace.TracerProvider
	// Shutdown exports the spans still buffered and stops the exporter, within ctx. It does
	// nothing for a no-op provider.
	Shutdown func(ctx context.Context) error
}

// Setup returns the tracer provider getenv asks for: a no-op one when traces are off, else
// an SDK provider batching spans to the OTLP/HTTP endpoint, service.name from
// OTEL_SERVICE_NAME (default "orchestrator"), service.version version. Spans are exported
// off the runs' path: a collector that is slow or down costs a run nothing, and the spans it
// does not take are dropped, each failed export logged on log as a warning. Errors name the
// variable that is wrong.
func Setup(ctx context.Context, getenv func(string) string, version string, log *slog.Logger) (*Provider, error) {
	if !Enabled(getenv) {
		return &Provider{TracerProvider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}, nil
	}
	endpoint, err := tracesURL(getenv)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(cmp.Or(getenv(EnvServiceName), DefaultServiceName)),
		semconv.ServiceVersion(version)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	// The SDK reports export failures to OpenTelemetry's one global handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.LogAttrs(context.Background(), slog.LevelWarn, "traces not exported", slog.String(logkey.Error, err.Error()))
	}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, Shutdown: tp.Shutdown}, nil
}

// tracesURL is the URL spans are posted to: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, or
// OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended (the specification's rule).
func tracesURL(getenv func(string) string) (string, error) {
	name, v := EnvTracesEndpoint, getenv(EnvTracesEndpoint)
	if v == "" {
		name, v = EnvEndpoint, getenv(EnvEndpoint)
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s: want an http or https URL such as http://collector:4318", name)
	}
	if u.User != nil {
		return "", fmt.Errorf("%s: credentials in the URL are not taken; set OTEL_EXPORTER_OTLP_HEADERS", name)
	}
	if name == EnvEndpoint {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}
