package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/otlp/otlptest"
)

// ciTraceparent is the span of the CI job that triggers the runs.
const ciTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// runTraces groups the received spans by trace and returns, per run ID, the run's span and
// every span of its trace.
func runTraces(t *testing.T, spans []otlptest.Span) map[string][]otlptest.Span {
	t.Helper()
	byTrace := map[string][]otlptest.Span{}
	for _, s := range spans {
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
	}
	out := map[string][]otlptest.Span{}
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "RUN ") {
			id := s.Attrs["cicd.pipeline.run.id"]
			if out[id] != nil {
				t.Errorf("run %s has two run spans", id)
			}
			out[id] = append([]otlptest.Span{s}, without(byTrace[s.TraceID], s)...)
		}
	}
	return out
}

func without(spans []otlptest.Span, s otlptest.Span) []otlptest.Span {
	var out []otlptest.Span
	for _, x := range spans {
		if x.SpanID != s.SpanID {
			out = append(out, x)
		}
	}
	return out
}

// checkRunTrace checks the trace of one run (its span first): under the CI's span, with the
// CI/CD attributes, the stages, tasks and lock waits, and client spans of the systems named.
func checkRunTrace(t *testing.T, base, id string, trace []otlptest.Span, systems ...string) {
	t.Helper()
	run := trace[0]
	if run.TraceID != ciTraceparent[3:35] || run.Parent != ciTraceparent[36:52] {
		t.Errorf("run %s: trace %s parent %s, want the CI job's span %s", id, run.TraceID, run.Parent, ciTraceparent)
	}
	for k, want := range map[string]string{"cicd.pipeline.run.url.full": base + "/runs/" + id, "cicd.pipeline.result": "success"} {
		if got := run.Attrs[k]; got != want {
			t.Errorf("run %s: %s = %q, want %q", id, k, got, want)
		}
	}
	if run.Attrs["cicd.pipeline.name"] == "" || run.Resource["service.name"] != "orchestrator" {
		t.Errorf("run %s: pipeline name %q, service.name %q, want a name and orchestrator", id, run.Attrs["cicd.pipeline.name"], run.Resource["service.name"])
	}
	seen := map[string]bool{}
	for _, s := range trace[1:] {
		switch {
		case s.Name == "phase 1" || s.Name == "phase 2":
			seen[s.Name] = true
		case s.Name == "lock wait" && s.Attrs["orchestrator.lock.key"] != "" && s.Attrs["orchestrator.lock.fence"] != "":
			seen["lock wait"] = true
		case s.Attrs["cicd.pipeline.task.name"] != "" && s.Attrs["cicd.pipeline.task.run.result"] == "success":
			seen["task"] = true
		case s.Kind == "SPAN_KIND_CLIENT" && s.Attrs["url.template"] != "" && s.Attrs["http.response.status_code"] != "" &&
			s.Attrs["server.address"] != "" && s.Attrs["http.request.method"] != "":
			seen[s.Attrs["orchestrator.system"]] = true
		}
	}
	for _, want := range append([]string{"phase 1", "phase 2", "lock wait", "task"}, systems...) {
		if !seen[want] {
			t.Errorf("run %s: no %s span with its attributes in the trace (%d spans)", id, want, len(trace))
		}
	}
}

// noSecretInSpans fails when a secret shows anywhere in what was exported.
func noSecretInSpans(t *testing.T, spans []otlptest.Span, secrets ...string) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name, s.StatusReason}
		for _, m := range []map[string]string{s.Attrs, s.Resource} {
			for k, v := range m {
				texts = append(texts, k, v)
			}
		}
		for _, ev := range s.Events {
			texts = append(texts, ev.Name)
			for k, v := range ev.Attrs {
				texts = append(texts, k, v)
			}
		}
		for _, text := range texts {
			for _, secret := range secrets {
				if secret != "" && strings.Contains(text, secret) {
					t.Errorf("span %q exported a secret in %q", s.Name, text)
				}
			}
		}
	}
}

// TestServeExportsATraceOfEachRun runs serve with OTEL_EXPORTER_OTLP_ENDPOINT at an OTLP/HTTP
// receiver and triggers two runs from a CI job (TRACEPARENT): after the shutdown each run is
// one trace under the job's span, and no secret of the daemon's reached it.
func TestServeExportsATraceOfEachRun(t *testing.T) {
	rec := otlptest.NewServer(t)
	env, cf := daemonEnv(t)
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = rec.URL
	d := serveDaemon(t, env)
	for _, build := range []string{"42", "43"} {
		out, errOut, err := invoke(context.Background(), map[string]string{"ORCH_TRIGGER_TOKEN": env["ORCH_TRIGGER_TOKEN"], "TRACEPARENT": ciTraceparent},
			"trigger", "prod", "--url", d.base, "--image-tag", "v"+build, "--build", build)
		if err != nil {
			t.Fatalf("trigger: %v\n%s\n%s", err, out, errOut)
		}
	}
	d.cancel()
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s of its context ending")
	}
	if d.err != nil {
		t.Fatalf("serve: %v\n%s", d.err, d.log)
	}
	traces := runTraces(t, rec.Spans())
	if len(traces) != 2 {
		t.Fatalf("%d run spans exported, want 2 (one per run)", len(traces))
	}
	for id, tr := range traces {
		checkRunTrace(t, d.base, id, tr, "coolify")
	}
	noSecretInSpans(t, rec.Spans(), "sentinel-db-password-42", cf.Token, env["ORCH_TRIGGER_TOKEN"], env["ORCH_ADMIN_TOKEN"])
}

// TestDemoExportsATraceOfEachRun runs demo --once in a CI job's trace: its two runs are
// traced with the calls to the simulated Coolify, Flagsmith and Infisical.
func TestDemoExportsATraceOfEachRun(t *testing.T) {
	rec := otlptest.NewServer(t)
	out, errOut, err := invoke(context.Background(), map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rec.URL, "TRACEPARENT": ciTraceparent},
		"demo", "--once", "--listen", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("demo --once: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	traces := runTraces(t, rec.Spans())
	if len(traces) != 2 {
		t.Fatalf("%d run spans exported, want 2 (one per run)", len(traces))
	}
	base := out[strings.Index(out, "dashboard at ")+len("dashboard at "):]
	base = strings.TrimSuffix(base[:strings.Index(base, "/ ")], "/")
	systems := map[string][]string{"demo": {"coolify", "flagsmith", "infisical"}, "demo-web": {"coolify"}}
	for id, tr := range traces {
		checkRunTrace(t, base, id, tr, systems[tr[0].Attrs["cicd.pipeline.name"]]...)
	}
}

// TestTracesOffWithoutAnEndpoint: with OTEL_SDK_DISABLED=true nothing is exported even with
// an endpoint set.
func TestTracesOffWhenDisabled(t *testing.T) {
	rec := otlptest.NewServer(t)
	_, errOut, err := invoke(context.Background(), map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rec.URL, "OTEL_SDK_DISABLED": "true"},
		"demo", "--once", "--listen", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("demo --once: %v\n%s", err, errOut)
	}
	if n := rec.Posts(); n != 0 {
		t.Errorf("%d exports with OTEL_SDK_DISABLED=true, want none", n)
	}
}

// TestACollectorDownCostsARunNothing: with the traces endpoint refusing connections the run
// succeeds, the daemon stops within its grace, and the log says the traces were lost.
func TestACollectorDownCostsARunNothing(t *testing.T) {
	env, _ := daemonEnv(t)
	env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://" + freeAddr(t) + "/v1/traces" // nothing listens
	env["ORCH_SHUTDOWN_GRACE"] = "2s"
	d := serveDaemon(t, env)
	out, errOut, err := invoke(context.Background(), map[string]string{"ORCH_TRIGGER_TOKEN": env["ORCH_TRIGGER_TOKEN"]},
		"trigger", "prod", "--url", d.base, "--image-tag", "v2", "--build", "42")
	if err != nil || !strings.Contains(out, "run.succeeded") {
		t.Fatalf("trigger: %v\n%s\n%s", err, out, errOut)
	}
	d.cancel()
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s of its context ending")
	}
	if d.err != nil {
		t.Errorf("serve: %v\n%s", d.err, d.log)
	}
	if !strings.Contains(d.log, "traces not") {
		t.Errorf("the log does not say traces were lost:\n%s", d.log)
	}
}
