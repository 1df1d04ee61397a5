package otlp_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/otlp"
	"github.com/deploy-orchestrator/orchestrator/internal/otlp/otlptest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, true},
	} {
		if got := otlp.Enabled(env(tc.env)); got != tc.want {
			t.Errorf("Enabled(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
}

// TestSetupRefusesABadEndpoint names the variable and never echoes its value (which may
// hold credentials).
func TestSetupRefusesABadEndpoint(t *testing.T) {
	for name, v := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "collector:4318",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://user:pw-secret@collector/v1/traces",
	} {
		_, err := otlp.Setup(context.Background(), env(map[string]string{name: v}), "test", slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), name) || strings.Contains(err.Error(), "pw-secret") {
			t.Errorf("%s=%s: %v, want an error naming the variable without its value", name, v, err)
		}
	}
}

// TestSetupExportsToTheEndpoint: spans reach OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces (or
// the traces endpoint as it is) by Shutdown, with service.name and service.version.
func TestSetupExportsToTheEndpoint(t *testing.T) {
	for _, key := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		rec := otlptest.NewServer(t)
		url := rec.URL
		if key == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" {
			url += "/v1/traces"
		}
		p, err := otlp.Setup(context.Background(), env(map[string]string{key: url, "OTEL_SERVICE_NAME": "deployer"}), "1.2.3", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		_, span := p.Tracer("t").Start(context.Background(), "one")
		span.End()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("%s: shutdown: %v", key, err)
		}
		cancel()
		spans := rec.Spans()
		if len(spans) != 1 || spans[0].Name != "one" || spans[0].Resource["service.name"] != "deployer" || spans[0].Resource["service.version"] != "1.2.3" {
			t.Errorf("%s: received %+v, want span one from deployer 1.2.3", key, spans)
		}
	}
}
