package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/notify/notifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/secrets/infisical/infisicaltest"
)

// The demo's simulated resources: the UUIDs testdata/pipelines/demo*.yaml name.
const (
	demoAPI    = "q8m2k4v7x1c9d3f6h0j5n2p8"
	demoWorker = "w3r7t1y5u9i2o6p0a4s8d2f6"
	demoWeb    = "e5b9n3m7k1l4z8x2c6v0b4n8"
	demoEnvKey = "demo-environment-key"
)

func cmdDemo(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("demo", "[--listen ADDR] [--once]",
		"Starts the daemon on the embedded SQLite backend (a temporary state dir) with built-in\n"+
			"Coolify, Flagsmith and Infisical simulators, loads testdata/pipelines/demo.yaml and\n"+
			"demo-web.yaml, triggers two overlapping runs that share services, prints their progress\n"+
			"and serves the dashboard. Without --once it keeps serving until Ctrl-C.")
	listen := fs.String("listen", "127.0.0.1:8080", "dashboard and API address")
	once := fs.Bool("once", false, "exit when the runs end: code 0 only if both succeeded")
	dir := fs.String("pipelines", filepath.Join("testdata", "pipelines"), "directory holding demo.yaml and demo-web.yaml")
	if done, err := parse(fs, args); done {
		return err
	}
	for _, f := range []string{"demo.yaml", "demo-web.yaml"} {
		if _, err := os.Stat(filepath.Join(*dir, f)); err != nil {
			return usageError("demo: %s not found in %s: run the demo from the repository root, or pass --pipelines DIR", f, *dir)
		}
	}

	sims, err := startSimulators()
	if err != nil {
		return err
	}
	defer sims.close()

	state, err := os.MkdirTemp("", "orchestrator-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	triggerToken, adminToken := randomKey(), randomKey()
	env := map[string]string{
		"ORCH_LISTEN": *listen, "ORCH_STATE_DIR": state, "ORCH_PUBLIC_READ": "true",
		"ORCH_TRIGGER_TOKEN": triggerToken, "ORCH_ADMIN_TOKEN": adminToken, "ORCH_LOG_LEVEL": "warn",
		"COOLIFY_URL": sims.coolify, "COOLIFY_TOKEN": coolifytest.DefaultToken,
		"INFISICAL_URL": sims.infisical, "INFISICAL_CLIENT_ID": "demo-client", "INFISICAL_CLIENT_SECRET": sims.infisicalSecret,
		"FLAGSMITH_URL": sims.flagsmith, "FLAGSMITH_API_KEY": flagsmithtest.DefaultAPIKey, "FLAGSMITH_ENVIRONMENT": demoEnvKey,
		secretEnvPrefix + "SENTRY_DSN": "https://demo-public-key@sentry.example/42",
		"DEMO_SLACK_WEBHOOK_URL":       sims.notify + "/services/T0DEMO/B0DEMO/" + randomKey(),
	}
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return c.getenv(k)
	}
	d, err := config.LoadDaemon("", getenv, nil)
	if err != nil {
		return fmt.Errorf("demo config:\n%w", err)
	}
	log, err := newLogger(c.stderr, "warn", "text")
	if err != nil {
		return err
	}
	pipelines := map[string]*config.Pipeline{}
	for _, f := range []string{"demo.yaml", "demo-web.yaml"} {
		p, err := config.LoadPipelineFile(filepath.Join(*dir, f), getenv)
		if err != nil {
			return fmt.Errorf("demo pipelines:\n%w", err)
		}
		pipelines[p.Name] = p
	}

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan string, 1)
	served := make(chan error, 1)
	dc := &cli{getenv: getenv, stdin: c.stdin, stdout: c.stdout, stderr: c.stderr}
	go func() { served <- serveWith(sctx, dc, d, pipelines, log, func(a string) { ready <- a }, demoTuning) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-served:
		return err
	}
	base := "http://" + addr
	var outMu sync.Mutex // the notification printer and demoRuns share stdout
	sims.receiver.OnMessage(func(m notifytest.Message) {
		_, _ = prefixWriter{w: c.stdout, prefix: "[notify  ] ", mu: &outMu}.Write([]byte(m.Text + "\n"))
	})
	fmt.Fprintf(c.stdout, "orchestrator demo: dashboard at %s/ (simulated Coolify at %s)\n", base, sims.coolify)
	fmt.Fprintf(c.stdout, "trigger more runs with:\n  ORCH_TRIGGER_TOKEN=%s go run ./cmd/orchestrator trigger demo --url %s --image-tag v1.5.0 --build 1003 --app-version 1.5.0\n\n", triggerToken, base)

	ok, err := demoRuns(ctx, c.stdout, &outMu, base, triggerToken)
	if err != nil {
		stop()
		<-served
		return err
	}
	if !*once {
		fmt.Fprintf(c.stdout, "\nthe dashboard stays up at %s/ — press Ctrl-C to stop\n", base)
		<-ctx.Done()
	}
	stop()
	if err := <-served; err != nil {
		return err
	}
	if !ok {
		return &exitError{code: 1, err: errors.New("demo: the runs did not end as expected")}
	}
	return nil
}

// demoTuning makes the demo's clients poll briskly, so a person watching sees steps move.
var demoTuning = tuning{coolifyPoll: 300 * time.Millisecond, healthPoll: 250 * time.Millisecond}

// demoRuns triggers two overlapping runs through the API, prints their events and reports
// whether both succeeded. Its writes to w hold mu.
func demoRuns(ctx context.Context, w io.Writer, mu *sync.Mutex, base, token string) (bool, error) {
	out := prefixWriter{w: w, mu: mu} // stdout is shared with the notification printer
	cl := &apiClient{base: base, token: token, http: retryablehttp.NewClient()}
	cl.http.Logger = nil
	type demoRun struct {
		pipeline string
		trigger  runs.Trigger
	}
	specs := []demoRun{
		{"demo", runs.Trigger{Build: "1001", ImageTag: "v1.4.0", Commit: "4f2c9e1", AppVersion: "1.4.0"}},
		{"demo-web", runs.Trigger{Build: "1002", ImageTag: "v1.4.1", Params: map[string]string{"channel": "beta"}}},
	}
	var wg sync.WaitGroup
	results := make([]*runs.Run, len(specs))
	errs := make([]error, len(specs))
	for i, s := range specs {
		r, err := cl.trigger(ctx, s.pipeline, s.trigger, randomKey())
		if err != nil {
			return false, err
		}
		fmt.Fprintf(out, "[%s] run %s queued: %s/runs/%s\n", s.pipeline, r.ID, base, r.ID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			prefix := fmt.Sprintf("[%-8s] ", s.pipeline)
			p := newProgress(prefixWriter{w: w, prefix: prefix, mu: mu})
			if errs[i] = cl.follow(ctx, r.ID, p.event); errs[i] == nil {
				results[i], errs[i] = cl.run(ctx, r.ID)
			}
		}()
	}
	wg.Wait()
	ok := true
	fmt.Fprintln(out)
	for i, r := range results {
		if errs[i] != nil {
			return false, errs[i]
		}
		if err := newProgress(out).summary(*r); err != nil {
			ok = false
		}
	}
	return ok, nil
}

// prefixWriter prefixes each write (one line) and serializes writers.
type prefixWriter struct {
	w      io.Writer
	prefix string
	mu     *sync.Mutex
}

func (p prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

// simulators are the in-process fake Coolify, Flagsmith and Infisical of the demo, each on a
// loopback port with realistic latencies.
type simulators struct {
	coolify, flagsmith, infisical string
	infisicalSecret               string
	// receiver takes the demo pipelines' notifications (as a Slack webhook) at notify.
	receiver *notifytest.Receiver
	notify   string
	servers  []*http.Server
}

func startSimulators() (*simulators, error) {
	s := &simulators{infisicalSecret: randomKey(), receiver: notifytest.New()}

	cf := coolifytest.New(coolifytest.WithTiming(coolifytest.DemoTiming))
	cf.SetLatency(20*time.Millisecond, 80*time.Millisecond)
	cf.AddApplication(coolifytest.Application{UUID: demoAPI, Name: "api", ImageName: "ghcr.io/acme/api", ImageTag: "v1.3.0",
		HealthCheckEnabled: true, FQDN: "https://api.acme.test"})
	cf.AddApplication(coolifytest.Application{UUID: demoWorker, Name: "worker", ImageName: "ghcr.io/acme/worker", ImageTag: "v1.3.0"})
	cf.AddApplication(coolifytest.Application{UUID: demoWeb, Name: "web", ImageName: "ghcr.io/acme/web", ImageTag: "web-1000",
		FQDN: "https://acme.test"})
	cf.SetEnv(demoAPI, coolifytest.Env{Key: "LOG_LEVEL", Value: coolifytest.Str("debug"), IsRuntime: true, IsBuildtime: true})

	fs := flagsmithtest.New(flagsmithtest.WithLatency(40 * time.Millisecond))
	if _, err := fs.AddEnvironment(flagsmithtest.Environment{APIKey: demoEnvKey, Name: "production", V2: true}); err != nil {
		return nil, err
	}
	if err := fs.SetValue(demoEnvKey, "version_state",
		`{"ios":{"latest_version":"1.3.0","min_version":"1.0.0"},"android":{"latest_version":"1.3.0","min_version":"1.0.0"}}`); err != nil {
		return nil, err
	}

	inf := infisicaltest.NewHandler(
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "demo-client", ClientSecret: s.infisicalSecret}),
		infisicaltest.WithSecrets(infisicaltest.Folder{ProjectID: "demo-project", Environment: "prod", Path: "/"},
			map[string]string{"DATABASE_URL": "postgres://app:demo-db-password@db.internal:5432/app"}),
		infisicaltest.WithLatency(30*time.Millisecond))

	for _, sim := range []struct {
		h   http.Handler
		url *string
	}{{cf, &s.coolify}, {fs, &s.flagsmith}, {inf, &s.infisical}, {s.receiver, &s.notify}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.close()
			return nil, fmt.Errorf("start simulator: %w", err)
		}
		srv := &http.Server{Handler: sim.h, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		s.servers = append(s.servers, srv)
		*sim.url = "http://" + ln.Addr().String()
	}
	return s, nil
}

func (s *simulators) close() {
	for _, srv := range s.servers {
		_ = srv.Close()
	}
}
