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
	"strconv"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/cmd/orchestrator/demopipelines"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/notify/notifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/secrets/infisical/infisicaltest"
)

// The demo runs from the release binary and image (`docker run IMAGE demo`), so the simulated
// Coolify, Flagsmith, Infisical and notification receiver are linked into the command; this
// file is the only one that imports them (TestOnlyDemoImportsTheSimulators), and serve never
// starts them: it is handed their addresses through the demo's environment like any others.

// The demo's simulated resources: the UUIDs demopipelines/demo*.yaml name.
const (
	demoAPI    = "q8m2k4v7x1c9d3f6h0j5n2p8"
	demoWorker = "w3r7t1y5u9i2o6p0a4s8d2f6"
	demoWeb    = "e5b9n3m7k1l4z8x2c6v0b4n8"
	demoEnvKey = "demo-environment-key"
)

func cmdDemo(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("demo", "[--listen ADDR] [--once] [--pipelines DIR]",
		"Starts the daemon on the embedded SQLite backend (a temporary state dir) with built-in\n"+
			"Coolify, Flagsmith and Infisical simulators, loads the demo pipelines built into the binary\n"+
			"(demo.yaml and demo-web.yaml), triggers two overlapping runs that share services, prints\n"+
			"their progress and serves the dashboard. Without --once it keeps serving until Ctrl-C and\n"+
			"prints the commands to try against it.")
	fs.String("listen", orDefault(c.getenv("ORCH_LISTEN"), "127.0.0.1:8080"), "dashboard and API address (env ORCH_LISTEN)")
	once := fs.Bool("once", false, "exit when the runs end: code 0 only if both succeeded")
	dir := fs.String("pipelines", "", "directory holding demo.yaml and demo-web.yaml (default: the ones built in)")
	if done, err := parse(fs, args); done {
		return err
	}
	files, err := demoFiles(*dir)
	if err != nil {
		return err
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
	ds, err := loadDemo(c, fs, sims, state, *dir, files)
	if err != nil {
		return err
	}
	d, pipelines, getenv, triggerToken, adminToken := ds.d, ds.pipelines, ds.getenv, ds.triggerToken, ds.adminToken
	log, err := newLogger(c.stderr, "warn", "text")
	if err != nil {
		return err
	}
	c.warnUnknownEnv(ctx, log)

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
	fmt.Fprintf(c.stdout, "orchestrator demo: dashboard at %s/ (simulated Coolify at %s)\n\n", base, sims.coolify)

	ok, err := demoRuns(ctx, c.stdout, &outMu, base, triggerToken, c.getenv("TRACEPARENT"))
	if err != nil {
		stop()
		<-served
		return err
	}
	if !*once {
		fmt.Fprintf(c.stdout, "\nThe dashboard stays up at %s/ until Ctrl-C; log in with the admin token %s to cancel runs\nand release or freeze locks from it. In another terminal, try:\n\n", base, adminToken)
		for _, line := range demoHints(c.self, base, triggerToken, adminToken) {
			fmt.Fprintf(c.stdout, "  %s\n", line)
		}
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

// demoSetup is what the demo's daemon serves: its config and pipelines, the environment it
// reads (the simulators' addresses over the caller's) and the tokens the hints print.
type demoSetup struct {
	d                        *config.Daemon
	pipelines                map[string]*config.Pipeline
	getenv                   func(string) string
	triggerToken, adminToken string
}

// loadDemo builds the demo daemon's config, over the simulators sims and the state
// directory state, and loads its pipelines (files, read from dir or built in).
func loadDemo(c *cli, fs *pflag.FlagSet, sims *simulators, state, dir string, files map[string][]byte) (*demoSetup, error) {
	// Tokens from the environment when set (so the commands a person exported keep working
	// across demo restarts), else random ones, printed with the hints.
	triggerToken := orDefault(c.getenv("ORCH_TRIGGER_TOKEN"), randomKey())
	adminToken := orDefault(c.getenv("ORCH_ADMIN_TOKEN"), randomKey())
	env := sims.env()
	// --listen reaches the config as the flag it is (LoadDaemon reads fs), so a problem with it
	// names --listen, or ORCH_LISTEN when the address came from there.
	for k, v := range map[string]string{"ORCH_STATE_DIR": state, "ORCH_PUBLIC_READ": "true",
		"ORCH_TRIGGER_TOKEN": triggerToken, "ORCH_ADMIN_TOKEN": adminToken, "ORCH_LOG_LEVEL": "warn",
		"ORCH_COOLIFY_RATE_LIMIT": strconv.Itoa(demoRateLimit)} {
		env[k] = v
	}
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return c.getenv(k)
	}
	d, err := config.LoadDaemon("", getenv, fs)
	if err != nil {
		return nil, usageError("demo config:\n%w", err)
	}
	pipelines := map[string]*config.Pipeline{}
	for _, f := range demopipelines.Names {
		p, err := config.LoadPipelineBytes(filepath.Join(orDefault(dir, "(built in)"), f), files[f], getenv)
		if err != nil {
			return nil, usageError("demo pipelines:\n%w", err)
		}
		pipelines[p.Name] = p
	}
	return &demoSetup{d: d, pipelines: pipelines, getenv: getenv, triggerToken: triggerToken, adminToken: adminToken}, nil
}

// demoFiles reads the demo pipelines from dir, or from the binary when dir is "".
func demoFiles(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, f := range demopipelines.Names {
		var data []byte
		var err error
		if dir == "" {
			data, err = demopipelines.Files.ReadFile(f)
		} else if data, err = os.ReadFile(filepath.Join(dir, f)); err != nil {
			return nil, usageError("demo: %s not found in --pipelines %s (leave --pipelines out to use the built-in demo pipelines)", f, dir)
		}
		if err != nil {
			return nil, err
		}
		out[f] = data
	}
	return out, nil
}

// demoHints are the commands printed for a person to try against the running demo: each
// works as pasted (TestDemoHintsWorkWhenPasted runs them).
func demoHints(self, base, triggerToken, adminToken string) []string {
	return []string{
		fmt.Sprintf("export ORCH_URL=%s ORCH_TRIGGER_TOKEN=%s ORCH_ADMIN_TOKEN=%s", base, triggerToken, adminToken),
		self + " trigger demo --image-tag v1.5.0 --build 1003 --commit 9b1d3e7 --app-version 1.5.0",
		self + " runs list",
		self + " locks freeze coolify:phase2 --message 'release freeze' --for 10m",
		self + " locks list",
		self + " locks unfreeze coolify:phase2",
	}
}

// demoTuning makes the demo's clients poll briskly, so a person watching sees steps move.
var demoTuning = tuning{coolifyPoll: 300 * time.Millisecond, healthPoll: 250 * time.Millisecond}

// demoRuns triggers two overlapping runs through the API, prints their events and reports
// whether both succeeded. Its writes to w hold mu.
//
// The runs continue traceparent's trace when it is a valid W3C traceparent (TRACEPARENT in
// the environment, as the trigger command reads it in a CI job).
func demoRuns(ctx context.Context, w io.Writer, mu *sync.Mutex, base, token, traceparent string) (bool, error) {
	out := prefixWriter{w: w, mu: mu} // stdout is shared with the notification printer
	cl := newAPIClient(base, token, nil)
	type demoRun struct {
		pipeline string
		trigger  orchestrator.Trigger
	}
	specs := []demoRun{
		{"demo", orchestrator.Trigger{Build: "1001", ImageTag: "v1.4.0", Commit: "4f2c9e1", AppVersion: "1.4.0"}},
		{"demo-web", orchestrator.Trigger{Build: "1002", ImageTag: "v1.4.1", Params: map[string]string{"channel": "beta"}}},
	}
	var wg sync.WaitGroup
	results := make([]*runs.Run, len(specs))
	errs := make([]error, len(specs))
	for i, s := range specs {
		if orchestrator.ValidTraceparent(traceparent) {
			s.trigger.Origin = orchestrator.Origin{Provider: "cli", Traceparent: traceparent}
		}
		r, _, err := cl.trigger(ctx, s.pipeline, s.trigger, randomKey())
		if err != nil {
			return false, err
		}
		fmt.Fprintf(out, "[%s] run %s queued: %s/runs/%s\n", s.pipeline, r.ID, base, r.ID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			prefix := fmt.Sprintf("[%-8s] ", s.pipeline)
			p := newProgress(prefixWriter{w: w, prefix: prefix, mu: mu}, modePlain, false)
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
		if err := newProgress(out, modePlain, false).summary(*r); err != nil {
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
// loopback port with realistic latencies, and a notification receiver.
type simulators struct {
	coolify, flagsmith, infisical string
	infisicalSecret               string
	// receiver takes the demo pipeline's notifications (as a Slack webhook) at notify.
	receiver    *notifytest.Receiver
	notify      string
	notifyToken string
	servers     []*http.Server
}

// demoRateLimit is the simulated Coolify's API budget, calls per minute.
const demoRateLimit = 2000

func startSimulators() (*simulators, error) {
	s := &simulators{infisicalSecret: randomKey(), receiver: notifytest.New(), notifyToken: randomKey()}

	// The simulated Coolify throttles like the real one, at demoRateLimit: ten times Coolify's
	// default, so the demo's runs are paced (the daemon is told the same limit) but never wait.
	cf := coolifytest.New(coolifytest.WithTiming(coolifytest.DemoTiming), coolifytest.WithRateLimit(demoRateLimit, time.Minute))
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

// env is the environment the demo pipelines read: the simulators' URLs and credentials, and
// the value of their env-source secret.
func (s *simulators) env() map[string]string {
	return map[string]string{
		"COOLIFY_URL": s.coolify, "COOLIFY_TOKEN": coolifytest.DefaultToken,
		"INFISICAL_URL": s.infisical, "INFISICAL_CLIENT_ID": "demo-client", "INFISICAL_CLIENT_SECRET": s.infisicalSecret,
		"FLAGSMITH_URL": s.flagsmith, "FLAGSMITH_API_KEY": flagsmithtest.DefaultAPIKey, "FLAGSMITH_ENVIRONMENT": demoEnvKey,
		secretEnvPrefix + "SENTRY_DSN": "https://demo-public-key@sentry.example/42",
		"DEMO_SLACK_WEBHOOK_URL":       s.notify + "/services/T0DEMO/B0DEMO/" + s.notifyToken,
	}
}

func (s *simulators) close() {
	for _, srv := range s.servers {
		_ = srv.Close()
	}
}
