package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/testutil"
)

// invoke runs the program with args and an environment, returning its output and error.
func invoke(ctx context.Context, env map[string]string, args ...string) (string, string, error) {
	var out, errOut testutil.SyncBuffer
	getenv := func(k string) string { return env[k] }
	environ := func() []string {
		var out []string
		for k, v := range env {
			out = append(out, k+"="+v)
		}
		return out
	}
	err := runEnv(ctx, append([]string{"orchestrator"}, args...), getenv, environ, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), err
}

func exitCode(err error) int { return exitCodeOf(err) }

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestDemoOnce(t *testing.T) {
	out, errOut, err := invoke(context.Background(), map[string]string{}, "demo", "--once", "--listen", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("demo --once: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if n := strings.Count(out, ": succeeded"); n != 2 {
		t.Errorf("demo output shows %d succeeded runs, want 2:\n%s", n, out)
	}
	// demo.yaml deploys in two waves (api and worker at once, then web).
	if !strings.Contains(out, "wave 1 of 2: api, worker") || !strings.Contains(out, "wave 2 of 2: web") {
		t.Errorf("demo output does not show the demo pipeline's two waves:\n%s", out)
	}
	if !strings.Contains(out, "dashboard at http://127.0.0.1:") {
		t.Errorf("demo output does not print the dashboard URL:\n%s", out)
	}
	// The demo pipeline's notification reached the built-in receiver, which printed it.
	if !strings.Contains(out, "[notify  ] ✅ demo: build 1001 succeeded after") {
		t.Errorf("demo output does not show the run's notification:\n%s", out)
	}
	// Secrets the demo feeds its pipelines never reach the terminal (nor the webhook URL).
	for _, secret := range []string{"demo-db-password", "demo-public-key", "T0DEMO/B0DEMO"} {
		if strings.Contains(out+errOut, secret) {
			t.Errorf("demo output contains the secret %q", secret)
		}
	}
}

// daemonEnv is a daemon on a fake Coolify with one pipeline, on a temp state dir.
func daemonEnv(t *testing.T, opts ...coolifytest.Option) (map[string]string, *coolifytest.Server) {
	t.Helper()
	cf := coolifytest.NewServer(t, opts...)
	cf.AddApplication(coolifytest.Application{UUID: "app-api-uuid-000000000001", Name: "api", ImageTag: "v1"})
	dir := t.TempDir()
	pipes := filepath.Join(dir, "pipelines")
	if err := os.MkdirAll(pipes, 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`coolify: { url: %q, token: "${COOLIFY_TOKEN}" }
services:
  - name: api
    uuid: app-api-uuid-000000000001
    image_tag: "${trigger.image_tag}"
    env:
      - key: DB_PASSWORD
        secret: { source: env, key: DB_PASSWORD }
    deploy_timeout: 10s
locks: { ttl: 30s }
`, cf.URL)
	if err := os.WriteFile(filepath.Join(pipes, "prod.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"ORCH_STATE_DIR": filepath.Join(dir, "state"), "ORCH_PIPELINES_DIR": pipes, "ORCH_LOG_FORMAT": "json",
		"ORCH_TRIGGER_TOKEN": "trigger-token-0123456789", "ORCH_ADMIN_TOKEN": "admin-token-0123456789ab",
		"ORCH_PUBLIC_READ": "true", "COOLIFY_TOKEN": cf.Token, "ORCH_SECRET_DB_PASSWORD": "sentinel-db-password-42",
		"ORCH_SHUTDOWN_GRACE": "10s",
	}, cf
}

func TestServeTriggerAndGracefulShutdown(t *testing.T) {
	env, cf := daemonEnv(t)
	d := serveDaemon(t, env)
	base := d.base

	out, errOut, err := invoke(context.Background(), map[string]string{"ORCH_TRIGGER_TOKEN": env["ORCH_TRIGGER_TOKEN"]},
		"trigger", "prod", "--url", base, "--image-tag", "v2", "--build", "42")
	if err != nil {
		t.Fatalf("trigger: %v\n%s\n%s", err, out, errOut)
	}
	if !strings.Contains(out, "run.succeeded") {
		t.Errorf("trigger output lacks run.succeeded:\n%s", out)
	}
	if app, _ := cf.App("app-api-uuid-000000000001"); app.DeployedImageTag != "v2" {
		t.Errorf("api runs %q, want v2", app.DeployedImageTag)
	}
	// A wrong token is refused with a hint.
	_, _, err = invoke(context.Background(), map[string]string{"ORCH_TRIGGER_TOKEN": "wrong-token-0123456789"},
		"trigger", "prod", "--url", base, "--image-tag", "v3")
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "ORCH_TRIGGER_TOKEN") {
		t.Errorf("trigger with a wrong token: exit %d, %v, want 2 and a 403 error naming the token variable", exitCode(err), err)
	}
	// The engine's refusal of a trigger that can't fill the pipeline reaches the API with the
	// trigger's field as data (config's Resolve sets it; nothing in between reads the message).
	if code, field := postTrigger(t, base, env["ORCH_TRIGGER_TOKEN"], `{"build":"43"}`); code != http.StatusBadRequest || field != "image_tag" {
		t.Errorf("trigger without the image tag prod needs: got %d naming %q, want 400 naming image_tag", code, field)
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
	if strings.Contains(d.out+d.log+out, "sentinel-db-password-42") {
		t.Errorf("a secret value reached the daemon's output or the trigger's")
	}
	if !strings.Contains(d.log, "daemon stopped") {
		t.Errorf("serve log lacks the clean stop:\n%s", d.log)
	}
}

// postTrigger sends a trigger body to the daemon at base and returns the status and the
// field its error answer names.
func postTrigger(t *testing.T, base, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/pipelines/prod/runs", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Error struct {
			Field string `json:"field"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	return resp.StatusCode, answer.Error.Field
}

// inProcess is `serve` run in the process (invoke) on a free address.
type inProcess struct {
	base   string
	cancel context.CancelFunc
	done   chan struct{}
	// out, log and err are serve's, set once done is closed.
	out, log string
	err      error
}

// serveDaemon runs serve with env (its ORCH_LISTEN set to a free address) and waits until
// the daemon is healthy; the test's cleanup stops it.
func serveDaemon(t *testing.T, env map[string]string) *inProcess {
	t.Helper()
	addr := freeAddr(t)
	env["ORCH_LISTEN"] = addr
	ctx, cancel := context.WithCancel(context.Background())
	d := &inProcess{base: "http://" + addr, cancel: cancel, done: make(chan struct{})}
	go func() {
		d.out, d.log, d.err = invoke(ctx, env, "serve")
		close(d.done)
	}()
	t.Cleanup(d.stop)
	waitHealthy(t, d.base, d.done)
	return d
}

// stop ends serve's context and waits for it to return.
func (d *inProcess) stop() {
	d.cancel()
	<-d.done
}

func waitHealthy(t *testing.T, base string, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			t.Fatal("daemon exited before it was healthy")
		default:
		}
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s/healthz never answered 200", base)
}

func TestRunCommandExitCodes(t *testing.T) {
	env, cf := daemonEnv(t)
	out, errOut, err := invoke(context.Background(), env, "run", "prod", "--image-tag", "v5", "--build", "7")
	if err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out, errOut)
	}
	if !strings.Contains(out, "succeeded") {
		t.Errorf("run output lacks the result:\n%s", out)
	}
	cf.SetDeployOutcome("app-api-uuid-000000000001", coolifytest.Fail)
	out, _, err = invoke(context.Background(), env, "run", "prod", "--image-tag", "v6", "--build", "8")
	if exitCode(err) != 1 || !strings.Contains(out, "failed") {
		t.Errorf("failing run: exit %d, output:\n%s", exitCode(err), out)
	}
	if _, _, err := invoke(context.Background(), env, "run", "nope", "--image-tag", "v6"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown pipeline: %v", err)
	}
	if _, _, err := invoke(context.Background(), env, "run"); exitCode(err) != 2 {
		t.Errorf("run without a pipeline: exit %d, want 2", exitCode(err))
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("coolify: { url: 'http://x', token: t }\nservices:\n  - name: a\n    uuid: ''\n    colour: red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := invoke(context.Background(), nil, "validate", bad)
	if exitCode(err) != exitUsage {
		t.Fatalf("validate of a bad file: exit %d, want 2", exitCode(err))
	}
	for _, want := range []string{"bad.yaml: services[0].uuid", "services[0].colour"} {
		if !strings.Contains(out, want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
	env := map[string]string{"COOLIFY_URL": "http://127.0.0.1:1", "COOLIFY_TOKEN": "1|x", "INFISICAL_URL": "http://127.0.0.1:2",
		"INFISICAL_CLIENT_ID": "id", "INFISICAL_CLIENT_SECRET": "s", "FLAGSMITH_URL": "http://127.0.0.1:3",
		"FLAGSMITH_API_KEY": "k", "FLAGSMITH_ENVIRONMENT": "e", "DEMO_SLACK_WEBHOOK_URL": "http://127.0.0.1:4/x"}
	if out, _, err := invoke(context.Background(), env, "validate", filepath.Join("..", "..", "testdata", "pipelines", "demo.yaml")); err != nil {
		t.Errorf("validate demo.yaml: %v\n%s", err, out)
	}
}

// TestValidateNamesSharedServices: a service UUID that two pipelines deploy is allowed, and
// validate says so, naming the pipelines, the name each gives it and its file, as
// information: the exit code stays 0.
func TestValidateNamesSharedServices(t *testing.T) {
	dir := t.TempDir()
	pipeline := func(services string) string {
		return "coolify: { url: 'https://coolify.example.com', token: t }\nservices:\n" + services
	}
	files := map[string]string{
		"late.yaml":  pipeline("  - { name: api, uuid: sharedapi001, image_tag: v1 }\n  - { name: worker, uuid: worker001, image_tag: v1 }\n"),
		"ops.yaml":   pipeline("  - { name: backend, uuid: sharedapi001, image_tag: v1 }\n"),
		"other.yaml": pipeline("  - { name: web, uuid: web001, image_tag: v1 }\n"),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := invoke(context.Background(), nil, "validate", dir)
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	want := fmt.Sprintf("info: service UUID sharedapi001 is deployed by 2 pipelines: late (as api, %s), ops (as backend, %s);",
		filepath.Join(dir, "late.yaml"), filepath.Join(dir, "ops.yaml"))
	if !strings.Contains(out, want) || strings.Count(out, "info:") != 1 || !strings.HasSuffix(out, "ok: 1 path(s) valid\n") {
		t.Errorf("validate output:\n%s\nwant one info line starting %q, then ok", out, want)
	}
}

func TestLocksCommands(t *testing.T) {
	env := map[string]string{"ORCH_STATE_DIR": t.TempDir(), "USER": "ops"}
	ctx := context.Background()
	if out, _, err := invoke(ctx, env, "locks", "list"); err != nil || !strings.Contains(out, "no locks held") {
		t.Fatalf("list on an empty backend: %v %q", err, out)
	}
	if _, _, err := invoke(ctx, env, "locks", "freeze", "coolify:phase2", "--message", "release freeze", "--for", "1h"); err != nil {
		t.Fatal(err)
	}
	out, _, err := invoke(ctx, env, "locks", "list")
	if err != nil || !strings.Contains(out, "coolify:phase2") || !strings.Contains(out, "release freeze") || !strings.Contains(out, "[frozen]") {
		t.Errorf("list after freeze: %v\n%s", err, out)
	}
	// A forced release naming a fence that is not the current one is refused, naming the holder.
	_, _, err = invoke(ctx, env, "locks", "release", "coolify:phase2", "--fence", "1", "--reason", "test")
	if err == nil || !strings.Contains(err.Error(), "held by") {
		t.Errorf("release with a stale fence: %v, want a refusal naming the holder", err)
	}
	if _, _, err := invoke(ctx, env, "locks", "release", "coolify:phase2", "--reason", "x"); exitCode(err) != 2 {
		t.Errorf("release without fence or holder: exit %d, want 2", exitCode(err))
	}
	if _, _, err := invoke(ctx, env, "locks", "unfreeze", "coolify:phase2", "--reason", "done"); err != nil {
		t.Errorf("lift: %v", err)
	}
	// A forced release of a second freeze, by the holder the listing shows.
	if _, _, err := invoke(ctx, env, "locks", "freeze", "coolify:phase2", "--message", "again", "--for", "1h"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := invoke(ctx, env, "locks", "release", "coolify:phase2", "--holder", "operator:cli:ops", "--reason", "stuck"); err != nil {
		t.Fatalf("release: %v\n%s", err, out)
	}
	// The lock view of the audit log: the actions done, newest first, the release naming
	// the lease it evicted; the refused release is not among them.
	out, _, _ = invoke(ctx, env, "locks", "audit")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.Contains(lines[2], "force_release") || !strings.Contains(lines[2], "cli:ops") ||
		!strings.Contains(lines[2], "operator:cli:ops (fence ") || !strings.Contains(lines[4], "unfreeze") {
		t.Errorf("locks audit: want a header line, the column names and 4 actions, newest first:\n%s", out)
	}
	out, _, _ = invoke(ctx, env, "locks", "audit", "--json", "--limit", "1")
	if !strings.HasPrefix(out, `{"at":"`) || !strings.Contains(out, `"action":"force_release","key":"coolify:phase2","by":"cli:ops","reason":"stuck","evicted":{"key":"coolify:phase2","holder":"operator:cli:ops","fence":`) ||
		strings.Count(out, "\n") != 1 {
		t.Errorf("locks audit --json --limit 1:\n%s", out)
	}
	// The hash-chained audit log has the local actions, refusals included (issue 36).
	out, _, err = invoke(ctx, env, "audit", "export")
	for _, want := range []string{`"subject":"cli:ops","action":"freeze","target":"coolify:phase2","reason":"release freeze"`,
		`"action":"force_release","target":"coolify:phase2","reason":"test","outcome":"refused: `, `"action":"unfreeze"`,
		`"action":"force_release","target":"coolify:phase2","reason":"stuck","outcome":"ok","detail":{"evicted_fence":"`} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("audit export lacks %s: %v\n%s", want, err, out)
		}
	}
	if !strings.Contains(out, `"evicted_holder":"operator:cli:ops","holder":"operator:cli:ops"}`) {
		t.Errorf("audit export: the release names no evicted holder:\n%s", out)
	}
	if out, _, err := invoke(ctx, env, "audit", "verify"); err != nil || !strings.Contains(out, "intact: 5 records") {
		t.Errorf("audit verify: %v\n%s", err, out)
	}
}

// With Infisical unreachable, a plan fails with an error naming the secrets source, over the
// API and on the command line, and the daemon goes on serving. Before, the second service's
// secrets crashed the process (a nil snapshot called in a goroutine).
func TestPlanWithInfisicalUnreachable(t *testing.T) {
	env, cf := daemonEnv(t)
	cf.AddApplication(coolifytest.Application{UUID: "app-web-uuid-000000000002", Name: "web", ImageTag: "v1"})
	yaml := fmt.Sprintf(`coolify: { url: %q, token: "${COOLIFY_TOKEN}" }
secrets:
  vault: { infisical: { url: "http://%s", client_id: id, client_secret: sentinel-client-secret-77, project_id: p, environment: prod } }
services:
  - name: api
    uuid: app-api-uuid-000000000001
    env: [ { key: DB_PASSWORD, secret: { source: vault, key: DB_PASSWORD } } ]
  - name: web
    uuid: app-web-uuid-000000000002
    env: [ { key: API_KEY, secret: { source: vault, key: API_KEY } } ]
`, cf.URL, freeAddr(t)) // a port nobody listens on
	if err := os.WriteFile(filepath.Join(env["ORCH_PIPELINES_DIR"], "production.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	d := serveDaemon(t, env)
	base := d.base

	req, _ := http.NewRequest("GET", base+"/v1/pipelines/production/plan?build=1", nil)
	req.Header.Set("Authorization", "Bearer "+env["ORCH_TRIGGER_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET plan: %v (the daemon died?)", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The plan itself works: its verdict is that a run would fail, naming the source and why.
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"would_fail":true`) ||
		!strings.Contains(string(body), `source \"vault\"`) || !strings.Contains(string(body), "connection refused") {
		t.Errorf("GET plan: got %d %s, want 200 with would_fail, a problem naming source vault and the refused connection", resp.StatusCode, body)
	}
	waitHealthy(t, base, d.done) // still serving

	// Every attempt at Infisical is counted, as for Coolify and Flagsmith (status "error":
	// no answer arrived).
	mresp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(metrics), `orchestrator_outside_requests_total{method="POST",route="/api/v1/auth/universal-auth/login",status="error",system="infisical"}`) {
		t.Errorf("/metrics lacks the failed Infisical attempts:\n%s", metrics)
	}

	_, _, err = invoke(context.Background(), env, "plan", "production", "--build", "1")
	if err == nil || !strings.Contains(err.Error(), `source "vault"`) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("orchestrator plan: got %v, want an error naming source vault and the refused connection", err)
	}
	d.stop()
	if d.err != nil {
		t.Errorf("serve: %v", d.err)
	}
	if strings.Contains(d.log+string(body), "sentinel-client-secret-77") {
		t.Errorf("the Infisical client secret reached the log or the answer")
	}
}

// The daemon paces its Coolify calls at coolify.rate_limit (default 200/min, the fake's
// default throttle too): the calls past the bucket's burst wait, which the run shows as a
// coolify.paced event before its end, and the fake never answers 429.
func TestRunShowsCoolifyPacing(t *testing.T) {
	env, cf := daemonEnv(t)
	out, errOut, err := invoke(context.Background(), env, "run", "prod", "--image-tag", "v5", "--build", "7")
	if err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out, errOut)
	}
	paced, end := strings.Index(out, "coolify.paced"), strings.Index(out, "succeeded")
	if paced < 0 || end < paced {
		t.Errorf("run output lacks a coolify.paced event before the run's end:\n%s", out)
	}
	if n := cf.Throttled(); n > 0 {
		t.Errorf("the fake's throttle answered 429 %d times", n)
	}
}

// A run that fails says why once: on the event that failed it, not again on its end event,
// its summary, the engine's log and the command's error.
func TestFailedRunSaysItsReasonOnce(t *testing.T) {
	env, cf := daemonEnv(t)
	file := filepath.Join(env["ORCH_PIPELINES_DIR"], "prod.yaml")
	yaml, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The preflight cannot reach Coolify: nothing listens on port 1.
	if err := os.WriteFile(file, []byte(strings.Replace(string(yaml), cf.URL, "http://127.0.0.1:1", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := invoke(context.Background(), env, "run", "prod", "--image-tag", "v5", "--build", "7")
	if exitCode(err) != exitFailed {
		t.Fatalf("run: exit %d (%v), want 1\n%s\n%s", exitCode(err), err, out, errOut)
	}
	all := out + errOut + err.Error()
	if n := strings.Count(all, "connection refused"); n != 1 {
		t.Errorf("the reason is printed %d times, want once:\nstdout:\n%s\nstderr:\n%s\nerror: %v", n, out, errOut, err)
	}
	if !strings.Contains(out, "failed (see preflight above)") {
		t.Errorf("the summary does not point at the reason:\n%s", out)
	}
}

// The playground runs a directory of your own pipeline files on the simulators: whatever
// Coolify, Flagsmith and Infisical URLs, UUIDs, environment keys, features and secrets they
// name. It prints the simulators' addresses and credentials, and for a pipeline the
// placeholder trigger cannot fill, the refusal and the command to start it.
func TestDemoPlaygroundRunsYourPipelines(t *testing.T) {
	out, errOut, err := invoke(context.Background(), map[string]string{}, "demo", "--pipelines", filepath.Join("testdata", "playground"),
		"--once", "--listen", "127.0.0.1:0")
	if exitCode(err) != exitFailed { // regional is not started
		t.Fatalf("demo --pipelines: exit %d (%v), want 1\nstdout:\n%s\nstderr:\n%s", exitCode(err), err, out, errOut)
	}
	for _, want := range []string{
		"run 01", "of shop: succeeded", // the shop pipeline ran end to end on the simulators
		`mobile  versions         updated       fields: ios.latest (none) → "1.0.0"`,
		"Coolify    http://127.0.0.1:", "token " + "1|", "Flagsmith  http://127.0.0.1:", "Infisical  http://127.0.0.1:",
		"note: shop/checkout: its HTTP health check and version probe are left out",
		"[regional] not started:", "params.region", "trigger regional --url http://127.0.0.1:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("playground output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "of demo:") {
		t.Errorf("the playground ran the built-in demo too:\n%s", out)
	}
}
