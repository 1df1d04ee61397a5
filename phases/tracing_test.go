package phases_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// ciTraceparent is the CI job's span a run's trace continues.
const ciTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// spanTree indexes exported spans by name (the first of each) and by span ID.
type spanTree struct {
	t     *testing.T
	spans tracetest.SpanStubs
	byID  map[trace.SpanID]tracetest.SpanStub
}

func newSpanTree(t *testing.T, spans tracetest.SpanStubs) spanTree {
	tr := spanTree{t: t, spans: spans, byID: map[trace.SpanID]tracetest.SpanStub{}}
	for _, s := range spans {
		tr.byID[s.SpanContext.SpanID()] = s
	}
	return tr
}

// named returns the span named name whose attribute key (if not "") is value.
func (tr spanTree) named(name, key, value string) tracetest.SpanStub {
	tr.t.Helper()
	for _, s := range tr.spans {
		if s.Name == name && (key == "" || attr(s, key) == value) {
			return s
		}
	}
	var names []string
	for _, s := range tr.spans {
		names = append(names, s.Name)
	}
	tr.t.Fatalf("no span %q with %s=%q among %v", name, key, value, names)
	return tracetest.SpanStub{}
}

// parentOf checks that child's parent is parent.
func (tr spanTree) parentOf(child, parent tracetest.SpanStub) {
	tr.t.Helper()
	if got := child.Parent.SpanID(); got != parent.SpanContext.SpanID() {
		tr.t.Errorf("span %q: parent %q (%s), want %q", child.Name, tr.byID[got].Name, got, parent.Name)
	}
}

// children are the spans directly under parent.
func (tr spanTree) children(parent tracetest.SpanStub) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tr.spans {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// wantAttrs checks the attributes of s.
func (tr spanTree) wantAttrs(s tracetest.SpanStub, want map[string]string) {
	tr.t.Helper()
	for k, v := range want {
		if got := attr(s, k); got != v {
			tr.t.Errorf("span %q: %s = %q, want %q", s.Name, k, got, v)
		}
	}
}

// tracedHarness is a harness whose engine exports its spans to the returned exporter.
func tracedHarness(t *testing.T) (*harness, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h := newHarness(t)
	h.traces, h.publicURL = tp, "https://deploy.example.com/"
	return h, exp
}

// TestRunTrace drives a run with two Phase-2 waves and a mobile step and checks its trace:
// the run's span under the CI's, the stages under it, a task per service and step, the lock
// waits with their keys and fences, the client spans of Coolify and Flagsmith with route
// templates, and the run's traceparent stored for a takeover.
func TestRunTrace(t *testing.T) {
	h, exp := tracedHarness(t)
	fs := flagsmithtest.NewServer(t)
	if _, err := fs.AddEnvironment(flagsmithtest.Environment{APIKey: "env-key", V2: true}); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetValue("env-key", "version_state", `{"ios":{"latest_version":"2.0.0"}}`); err != nil {
		t.Fatal(err)
	}
	y := h.pipelineYAML("prod", []string{"api", "worker"}, fmt.Sprintf(`mobile:
  - name: version_state
    flagsmith: { url: %q, api_key: %q, environment: env-key }
    feature: version_state
    set:
      ios.latest_version: "${trigger.app_version}"
`, fs.URL, fs.APIKey))
	y = strings.Replace(y, "uuid: "+uuidWorker+"\n", "uuid: "+uuidWorker+"\n    wave: 1\n", 1)
	h.start(y)
	id := h.submit("prod", orchestrator.Trigger{Build: "7", ImageTag: "v2", AppVersion: "2.9.0",
		Origin: orchestrator.Origin{Provider: "github", Traceparent: ciTraceparent}})
	r := h.wait(id)
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s: %s (%s), want succeeded", id, r.Status, r.Reason)
	}
	tr := newSpanTree(t, exp.GetSpans())

	run := tr.named("RUN prod", "", "")
	if got := run.SpanContext.TraceID().String(); got != ciTraceparent[3:35] {
		t.Errorf("run span's trace %s, want the CI's %s", got, ciTraceparent[3:35])
	}
	if got := run.Parent.SpanID().String(); got != ciTraceparent[36:52] || !run.Parent.IsRemote() {
		t.Errorf("run span's parent %s (remote %v), want the CI job's span %s", got, run.Parent.IsRemote(), ciTraceparent[36:52])
	}
	tr.wantAttrs(run, map[string]string{"cicd.pipeline.name": "prod", "cicd.pipeline.run.id": id,
		"cicd.pipeline.run.url.full": "https://deploy.example.com/runs/" + id, "cicd.pipeline.result": "success",
		"cicd.pipeline.action.name": "RUN", "orchestrator.build": "7"})
	if want := fmt.Sprintf("00-%s-%s-01", run.SpanContext.TraceID(), run.SpanContext.SpanID()); r.Trace != want {
		t.Errorf("run's stored trace %q, want its span's traceparent %q", r.Trace, want)
	}
	for _, s := range tr.spans {
		if s.SpanContext.TraceID() != run.SpanContext.TraceID() {
			t.Errorf("span %q in trace %s, want the run's", s.Name, s.SpanContext.TraceID())
		}
	}

	phase1, phase2 := tr.named("phase 1", "", ""), tr.named("phase 2", "", "")
	wave1, wave2 := tr.named("wave 1", "", ""), tr.named("wave 2", "", "")
	mob := tr.named("mobile after_phase2", "", "")
	pre := tr.named("preflight", "", "")
	for _, s := range []tracetest.SpanStub{pre, phase1, phase2, mob} {
		tr.parentOf(s, run)
	}
	tr.parentOf(wave1, phase2)
	tr.parentOf(wave2, phase2)

	tasks := []struct {
		name  string
		stage tracetest.SpanStub
		lock  string
	}{
		{"sync api", phase1, "coolify:" + uuidAPI}, {"sync worker", phase1, "coolify:" + uuidWorker},
		{"deploy api", wave1, "coolify:" + uuidAPI}, {"deploy worker", wave2, "coolify:" + uuidWorker},
		{"mobile version_state", mob, "mobile:flagsmith:version_state"},
	}
	for _, tc := range tasks {
		task := tr.named(tc.name, "", "")
		tr.parentOf(task, tc.stage)
		tr.wantAttrs(task, map[string]string{"cicd.pipeline.task.name": strings.Fields(tc.name)[1],
			"cicd.pipeline.task.run.result": "success", "cicd.pipeline.task.type": "deploy"})
		var wait tracetest.SpanStub
		for _, c := range tr.children(task) {
			if c.Name == "lock wait" {
				wait = c
			}
		}
		tr.parentOf(wait, task)
		if attr(wait, "orchestrator.lock.key") != tc.lock {
			t.Errorf("%s: lock wait for %q, want %q", tc.name, attr(wait, "orchestrator.lock.key"), tc.lock)
		}
		if f, err := strconv.ParseInt(attr(wait, "orchestrator.lock.fence"), 10, 64); err != nil || f <= 0 {
			t.Errorf("%s: lock wait's fence %q, want a positive number", tc.name, attr(wait, "orchestrator.lock.fence"))
		}
		clients := 0
		for _, c := range tr.children(task) {
			if c.SpanKind != trace.SpanKindClient {
				continue
			}
			clients++
			if attr(c, "http.request.method") == "" || attr(c, "server.address") != "127.0.0.1" ||
				!strings.HasPrefix(attr(c, "url.template"), "/") || attr(c, "http.response.status_code") == "" {
				t.Errorf("%s: client span %q with attributes %v, want method, server.address, url.template and status", tc.name, c.Name, c.Attributes)
			}
		}
		if clients == 0 {
			t.Errorf("%s: no client span under the task", tc.name)
		}
	}
	preSystems := map[string]bool{}
	for _, c := range tr.children(pre) {
		preSystems[attr(c, "orchestrator.system")] = true
	}
	if !preSystems["coolify"] || !preSystems["flagsmith"] {
		t.Errorf("preflight's calls: %v, want Coolify's and Flagsmith's reads under it", preSystems)
	}
	tr.parentOf(tr.named("lock wait", "orchestrator.lock.key", orchestrator.Phase1Key), phase1)
	tr.parentOf(tr.named("lock wait", "orchestrator.lock.key", orchestrator.Phase2Key), phase2)
	tr.wantAttrs(tr.named("POST /api/v1/environments/{environment_pk}/features/{feature_pk}/versions/", "", ""),
		map[string]string{"orchestrator.system": "flagsmith", "http.request.method": "POST", "http.response.status_code": "201"})
	tr.wantAttrs(tr.named("PATCH /applications/{uuid}/envs/bulk", "", ""),
		map[string]string{"orchestrator.system": "coolify", "url.template": "/applications/{uuid}/envs/bulk"})

	noSecretIn(t, tr.spans, "sentry-secret-value-123", h.coolifyToken, fs.APIKey)
}

// noSecretIn fails when any of secrets shows in a span's name, attributes, events, status
// or resource.
func noSecretIn(t *testing.T, spans tracetest.SpanStubs, secrets ...string) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name, s.Status.Description, s.Resource.String()}
		for _, kv := range s.Attributes {
			texts = append(texts, kv.Value.String())
		}
		for _, ev := range s.Events {
			texts = append(texts, ev.Name)
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.String())
			}
		}
		for _, text := range texts {
			for _, secret := range secrets {
				if secret != "" && strings.Contains(text, secret) {
					t.Errorf("span %q carries a secret in %q", s.Name, text)
				}
			}
		}
	}
}

// TestTakeoverSpanJoinsTheRunsTrace kills a daemon (a child process) while its run deploys;
// the daemon started again in its place takes the run over, and that takeover is a span of
// its own in the run's trace, under the run's span as the dead daemon stored it, with the
// takeover's calls to Coolify under it.
func TestTakeoverSpanJoinsTheRunsTrace(t *testing.T) {
	if os.Getenv(childEnv) == t.Name() {
		h := adoptHarness(t)
		h.traces = sdktrace.NewTracerProvider() // records; its spans die with the process
		h.start(apiPipeline(h))
		fmt.Println(h.submit("prod", orchestrator.Trigger{Build: "10", ImageTag: "v5", Origin: orchestrator.Origin{Traceparent: ciTraceparent}}))
		<-make(chan struct{})
		return
	}
	h, exp := tracedHarness(t)
	h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
	cmd, id := startChild(t, h)
	h.waitEvent(id, runs.EventDeployStarted, "api")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	h.start(apiPipeline(h))
	r, err := h.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != runs.StatusInterrupted || !orchestrator.ValidTraceparent(r.Trace) {
		t.Fatalf("run %s: status %s, trace %q; want interrupted with the dead daemon's run span stored", id, r.Status, r.Trace)
	}
	tr := newSpanTree(t, exp.GetSpans())
	take := tr.named("TAKEOVER prod", "", "")
	if got, want := take.SpanContext.TraceID().String(), ciTraceparent[3:35]; got != want {
		t.Errorf("takeover span's trace %s, want the run's %s", got, want)
	}
	if got, want := take.Parent.SpanID().String(), r.Trace[36:52]; got != want {
		t.Errorf("takeover span's parent %s, want the run's span %s", got, want)
	}
	tr.wantAttrs(take, map[string]string{"cicd.pipeline.name": "prod", "cicd.pipeline.run.id": id,
		"cicd.pipeline.result": "error", "orchestrator.run.status": "interrupted"})
	calls := 0
	for _, c := range tr.children(take) {
		if c.SpanKind == trace.SpanKindClient && attr(c, "orchestrator.system") == "coolify" {
			calls++
		}
	}
	if calls == 0 {
		t.Errorf("no Coolify call under the takeover span; spans: %d", len(tr.spans))
	}
}

// TestSupersededRunsAreTraced: a run superseded while it waits, and one superseded at its
// submission (an older build than the one pending), each end one run span with result skip.
func TestSupersededRunsAreTraced(t *testing.T) {
	h, exp := tracedHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, "concurrency: supersede\n"))
	blocker := holdPhase1(t, h)
	first := h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	h.waitEvent(first, runs.EventLockWaiting, "")
	second := h.submit("prod", orchestrator.Trigger{Build: "3", ImageTag: "v3"})
	h.wait(first)
	older, _, err := h.engine.Submit(context.Background(), "prod", orchestrator.Trigger{Build: "2", ImageTag: "v4"})
	if err != nil || older.Status != runs.StatusSuperseded {
		t.Fatalf("older build submitted: %v, %v; want superseded at once", older, err)
	}
	_ = blocker.Release(context.Background())
	h.wait(second)

	results := map[string]string{}
	for _, s := range exp.GetSpans() {
		if s.Name == "RUN prod" {
			id := attr(s, "cicd.pipeline.run.id")
			if _, dup := results[id]; dup {
				t.Errorf("run %s has two run spans", id)
			}
			results[id] = attr(s, "cicd.pipeline.result")
		}
	}
	want := map[string]string{first: "skip", second: "success", older.ID: "skip"}
	for id, res := range want {
		if results[id] != res {
			t.Errorf("run %s: result %q, want %q (all: %v)", id, results[id], res, results)
		}
	}
}

// TestAnotherDaemonsTakeoverJoinsTheRunsTrace: a daemon that finds another one dead takes
// its run over in a span under the run's, as the dead daemon stored it.
func TestAnotherDaemonsTakeoverJoinsTheRunsTrace(t *testing.T) {
	h, exp := tracedHarness(t)
	const runSpan = "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01"
	dead := h.deadRun(t, runs.StatusPhase1, nil, runs.Step{Phase: runs.Phase1, Name: "api", UUID: uuidAPI, Status: runs.StepRunning})
	if _, err := h.store.Update(context.Background(), dead.ID, func(r *runs.Run) error { r.Trace = runSpan; return nil }); err != nil {
		t.Fatal(err)
	}
	h.takeOver(t, dead.ID, "api")
	var take *tracetest.SpanStub
	for deadline := time.Now().Add(30 * time.Second); take == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range exp.GetSpans() { // the span ends just after the run's end is stored
			if s.Name == "TAKEOVER prod" {
				take = &s
			}
		}
	}
	if take == nil {
		t.Fatal("no takeover span exported")
	}
	if take.SpanContext.TraceID().String() != runSpan[3:35] || take.Parent.SpanID().String() != runSpan[36:52] {
		t.Errorf("takeover span in trace %s under %s, want under the run's span %s", take.SpanContext.TraceID(), take.Parent.SpanID(), runSpan)
	}
	if got := attr(*take, "orchestrator.instance"); got != "test-instance" {
		t.Errorf("takeover by %q, want test-instance (the live daemon)", got)
	}
}
