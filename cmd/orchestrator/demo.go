package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// demoHelp is `demo --help`'s text.
const demoHelp = "Starts the daemon on the embedded SQLite backend (a temporary state dir) with built-in\n" +
	"Coolify, Flagsmith and Infisical simulators, loads the demo pipelines built into the binary\n" +
	"(demo.yaml and demo-web.yaml), triggers two overlapping runs that share services, prints\n" +
	"their progress and serves the dashboard. Without --once it keeps serving until Ctrl-C and\n" +
	"prints the commands to try against it.\n\n" +
	"With --pipelines DIR (the playground) it runs your pipeline files instead: the simulators\n" +
	"take the place of the Coolify, Flagsmith and Infisical they name and hold every service\n" +
	"UUID, environment, feature and secret they name; each pipeline runs once with placeholder\n" +
	"parameters (build 1001…, image tag playground-1, app version 1.0.0)."

func cmdDemo(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("demo", "[--listen ADDR] [--once] [--pipelines DIR]", demoHelp)
	fs.String("listen", orDefault(c.getenv("ORCH_LISTEN"), "127.0.0.1:8080"), "dashboard and API address (env ORCH_LISTEN)")
	once := fs.Bool("once", false, "exit when the runs end: code 0 only if both succeeded")
	dir := fs.String("pipelines", "", "the playground: run the pipeline files of this directory on the simulators (default: the demo's, built in)")
	if done, err := parse(fs, args); done {
		return err
	}
	play, files, err := demoInputs(c.getenv, *dir)
	if err != nil {
		return err
	}

	sims, err := startSimulators(play)
	if err != nil {
		return err
	}
	defer sims.close()

	state, err := os.MkdirTemp("", "orchestrator-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	ds, err := loadDemo(c, fs, sims, state, files, play)
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
	printSimulators(c.stdout, sims, play)

	var ok bool
	if play != nil {
		ok, err = playgroundRuns(ctx, c.stdout, &outMu, base, triggerToken, c.self, play)
	} else {
		ok, err = demoRuns(ctx, c.stdout, &outMu, base, triggerToken, c.getenv("TRACEPARENT"))
	}
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

// demoInputs is what the demo runs: the playground of the pipeline files in dir, or (dir
// empty) the demo's own files, built in.
func demoInputs(getenv func(string) string, dir string) (*playground, map[string][]byte, error) {
	if dir != "" {
		play, err := loadPlayground(getenv, dir)
		return play, nil, err
	}
	files, err := demoFiles()
	return nil, files, err
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
func loadDemo(c *cli, fs *pflag.FlagSet, sims *simulators, state string, files map[string][]byte, play *playground) (*demoSetup, error) {
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
		if v := c.getenv(k); v != "" || play == nil || !strings.HasPrefix(k, config.EnvSecretPrefix) {
			return v
		}
		return "playground-" + strings.ToLower(strings.TrimPrefix(k, config.EnvSecretPrefix)) // the playground's env-source secrets
	}
	d, err := config.LoadDaemon("", getenv, fs)
	if err != nil {
		return nil, usageError("demo config:\n%w", err)
	}
	pipelines := map[string]*config.Pipeline{}
	if play != nil {
		play.pointAt(sims)
		pipelines = play.pipelines
	}
	for _, f := range demopipelines.Names {
		if play != nil {
			break
		}
		p, err := config.LoadPipelineBytes(filepath.Join("(built in)", f), files[f], getenv)
		if err != nil {
			return nil, usageError("demo pipelines:\n%w", err)
		}
		pipelines[p.Name] = p
	}
	return &demoSetup{d: d, pipelines: pipelines, getenv: getenv, triggerToken: triggerToken, adminToken: adminToken}, nil
}

// printSimulators says where the simulators listen and with which credentials, so a person
// can look at them (and point their own tools at them), and what the playground left out.
func printSimulators(w io.Writer, s *simulators, play *playground) {
	fmt.Fprintf(w, "Simulators (in this process, state in memory):\n")
	fmt.Fprintf(w, "  Coolify    %s  token %s\n", s.coolify, coolifytest.DefaultToken)
	fmt.Fprintf(w, "  Flagsmith  %s  Admin API key %s\n", s.flagsmith, flagsmithtest.DefaultAPIKey)
	fmt.Fprintf(w, "  Infisical  %s  client id demo-client, client secret %s\n", s.infisical, s.infisicalSecret)
	if play != nil {
		fmt.Fprintf(w, "Playground: your pipelines talk to these whatever URLs and credentials their files name;\n"+
			"every service UUID, Flagsmith environment and feature, and Infisical secret they name exists there.\n")
		for _, n := range play.notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
	fmt.Fprintln(w)
}

// playgroundRuns triggers one run of each playground pipeline with placeholder parameters,
// follows them and reports whether all succeeded. A pipeline the placeholders do not fill
// (it needs a param) is not started: the refusal is printed with the command to start it.
func playgroundRuns(ctx context.Context, w io.Writer, mu *sync.Mutex, base, token, self string, play *playground) (bool, error) {
	out := prefixWriter{w: w, mu: mu}
	cl := newAPIClient(base, token, nil)
	ok := true
	var started []*runs.Run
	for i, name := range slices.Sorted(maps.Keys(play.pipelines)) {
		tr := orchestrator.Trigger{Build: strconv.Itoa(1001 + i), ImageTag: "playground-1", Commit: "0000000", AppVersion: "1.0.0"}
		r, _, err := cl.trigger(ctx, name, tr, randomKey())
		if err != nil {
			ok = false
			fmt.Fprintf(out, "[%s] not started: %v\n  start it with: %s trigger %s --url %s --image-tag playground-1 --build %s --app-version 1.0.0 [--set KEY=VALUE]…\n",
				name, err, self, name, base, tr.Build)
			continue
		}
		fmt.Fprintf(out, "[%s] run %s queued: %s/runs/%s\n", name, r.ID, base, r.ID)
		started = append(started, r)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(started))
	for i, r := range started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := newProgress(prefixWriter{w: w, prefix: fmt.Sprintf("[%-8s] ", r.Pipeline), mu: mu}, modePlain, false)
			if errs[i] = cl.follow(ctx, r.ID, p.event); errs[i] == nil {
				started[i], errs[i] = cl.run(ctx, r.ID)
			}
		}()
	}
	wg.Wait()
	fmt.Fprintln(out)
	for i, r := range started {
		if errs[i] != nil {
			return false, errs[i]
		}
		if err := newProgress(out, modePlain, false).summary(*r); err != nil {
			ok = false
		}
	}
	return ok, nil
}

// demoFiles reads the demo pipelines built into the binary.
func demoFiles() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, f := range demopipelines.Names {
		data, err := demopipelines.Files.ReadFile(f)
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

// startSimulators starts the simulators seeded for the demo's pipelines, and for pl's when
// it is not nil (the playground).
func startSimulators(pl *playground) (*simulators, error) {
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

	infOpts := []infisicaltest.Option{
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "demo-client", ClientSecret: s.infisicalSecret}),
		infisicaltest.WithSecrets(infisicaltest.Folder{ProjectID: "demo-project", Environment: "prod", Path: "/"},
			map[string]string{"DATABASE_URL": "postgres://app:demo-db-password@db.internal:5432/app"}),
		infisicaltest.WithLatency(30 * time.Millisecond)}
	if pl != nil {
		folders, err := pl.seed(cf, fs)
		if err != nil {
			return nil, err
		}
		for f, kv := range folders {
			infOpts = append(infOpts, infisicaltest.WithSecrets(f, kv))
		}
	}
	inf := infisicaltest.NewHandler(infOpts...)

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

// playground is what `demo --pipelines DIR` runs: the pipeline files of DIR, pointed at the
// simulators, which are seeded with every service UUID, Flagsmith environment and feature,
// and Infisical secret the files name.
type playground struct {
	pipelines map[string]*config.Pipeline
	// notes say what the playground changed in the files (checks against real hosts left
	// out), for the demo's output.
	notes []string
}

// playgroundPlaceholder stands in for a variable the environment does not set while the files
// are read: the simulators' addresses and credentials replace what the files point at.
func playgroundPlaceholder(name string) string {
	if strings.HasSuffix(name, "_URL") {
		return "http://playground.invalid"
	}
	return "playground-" + strings.ToLower(name)
}

// loadPlayground reads every pipeline file of dir, a variable the environment lacks read as
// a placeholder. A file that is invalid for any other reason fails the demo, naming it.
func loadPlayground(getenv func(string) string, dir string) (*playground, error) {
	ps, err := config.LoadPipelines(dir, func(k string) string { return cmp.Or(getenv(k), playgroundPlaceholder(k)) })
	if err != nil {
		return nil, usageError("demo --pipelines %s:\n%w", dir, err)
	}
	if len(ps) == 0 {
		return nil, usageError("demo --pipelines %s: no pipeline files (*.yaml, *.yml) there", dir)
	}
	return &playground{pipelines: ps}, nil
}

// seed adds to the simulators what the playground's pipelines name: an application (or a
// Coolify service) per service UUID, each mobile step's environment and feature (a JSON
// document when the step sets fields), and a value for every Infisical secret.
func (pl *playground) seed(cf *coolifytest.Fake, fs *flagsmithtest.Fake) (map[infisicaltest.Folder]map[string]string, error) {
	folders := map[infisicaltest.Folder]map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(pl.pipelines)) {
		p := pl.pipelines[name]
		for _, s := range p.Services {
			if _, ok := cf.App(s.UUID); ok {
				continue
			}
			if _, ok := cf.ServiceState(s.UUID); ok {
				continue
			}
			if s.Kind == config.KindService {
				cf.AddService(coolifytest.Service{UUID: s.UUID, Name: s.Name})
			} else {
				cf.AddApplication(coolifytest.Application{UUID: s.UUID, Name: s.Name, ImageName: "registry.playground/" + s.Name, ImageTag: "playground-0"})
			}
		}
		for _, m := range p.Mobile {
			if _, err := fs.AddEnvironment(flagsmithtest.Environment{APIKey: m.Flagsmith.Environment, Name: m.Flagsmith.Environment}); err != nil &&
				!strings.Contains(err.Error(), "exists") {
				return nil, fmt.Errorf("playground: Flagsmith environment %q: %w", m.Flagsmith.Environment, err)
			}
			value := ""
			if !slices.Contains(slices.Collect(maps.Keys(m.Set)), "") {
				value = "{}"
			}
			if err := fs.SetValue(m.Flagsmith.Environment, m.Feature, value); err != nil {
				return nil, fmt.Errorf("playground: Flagsmith feature %q: %w", m.Feature, err)
			}
		}
		for _, s := range p.Services {
			for _, e := range s.Env {
				if e.Secret == nil || e.Secret.Source == config.EnvSource {
					continue
				}
				src := p.Secrets[e.Secret.Source].Infisical
				if src == nil {
					continue
				}
				f := infisicaltest.Folder{ProjectID: src.ProjectID, Environment: src.Environment, Path: src.Path}
				if folders[f] == nil {
					folders[f] = map[string]string{}
				}
				folders[f][e.Secret.Key] = "playground-" + strings.ToLower(e.Secret.Key)
			}
		}
	}
	return folders, nil
}

// pointAt makes the playground's pipelines talk to the simulators: Coolify, Flagsmith and
// Infisical addresses and credentials replaced, and what would reach real hosts left out
// (HTTP health checks, version probes, notifications, Git host statuses), each said in notes.
func (pl *playground) pointAt(s *simulators) {
	for _, name := range slices.Sorted(maps.Keys(pl.pipelines)) {
		p := pl.pipelines[name]
		p.Coolify.URL, p.Coolify.Token = s.coolify, config.Secret(coolifytest.DefaultToken)
		for i := range p.Services {
			h := &p.Services[i].Health
			if h.HTTP != nil || h.Version != nil {
				pl.notes = append(pl.notes, fmt.Sprintf("%s/%s: its HTTP health check and version probe are left out (they would call your hosts)", name, p.Services[i].Name))
				h.HTTP, h.Version = nil, nil
			}
		}
		for i := range p.Mobile {
			p.Mobile[i].Flagsmith.URL, p.Mobile[i].Flagsmith.APIKey = s.flagsmith, config.Secret(flagsmithtest.DefaultAPIKey)
		}
		for k, src := range p.Secrets {
			if src.Infisical != nil {
				inf := *src.Infisical
				inf.URL, inf.ClientID, inf.ClientSecret = s.infisical, "demo-client", config.Secret(s.infisicalSecret)
				p.Secrets[k] = config.SecretSource{Infisical: &inf}
			}
		}
		if p.Notify != nil || p.Statuses != nil {
			pl.notes = append(pl.notes, name+": its notifications and Git host statuses are left out")
			p.Notify, p.Statuses = nil, nil
		}
	}
}
