package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/phases"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// triggerFlags are the run parameters shared by run, plan and trigger.
type triggerFlags struct {
	build, imageTag, commit, appVersion string
	set                                 []string
	rollback                            bool
	reason                              string
	// What asked for the run (orchestrator.Origin), over what the CI's environment says.
	repo, ref, jobURL, actor string
}

func addTriggerFlags(fs *pflag.FlagSet) *triggerFlags {
	t := &triggerFlags{}
	fs.StringVar(&t.build, "build", "", "build number (fills ${trigger.build})")
	fs.StringVar(&t.imageTag, "image-tag", "", "image tag (fills ${trigger.image_tag})")
	fs.StringVar(&t.commit, "commit", "", "commit SHA (fills ${trigger.commit})")
	fs.StringVar(&t.appVersion, "app-version", "", "app version (fills ${trigger.app_version})")
	fs.StringArrayVar(&t.set, "set", nil, "free-form param KEY=VALUE (fills ${trigger.params.KEY}); repeatable")
	fs.BoolVar(&t.rollback, "rollback", false, "deploy this build even when a newer one is on the services (recorded as a rollback)")
	fs.StringVar(&t.reason, "reason", "", "why you ask for the run, a --rollback above all (recorded in the run and the audit)")
	fs.StringVar(&t.repo, "repo", "", "the repository the commit belongs to, owner/name or group/project\n(default: the CI's, GITHUB_REPOSITORY or CI_PROJECT_PATH)")
	fs.StringVar(&t.ref, "ref", "", "the branch or tag the build is of (default: the CI's)")
	fs.StringVar(&t.jobURL, "job-url", "", "the CI job's page, shown with the run (default: the CI's)")
	fs.StringVar(&t.actor, "actor", "", "who asks for the run (default: the CI's user, or $USER)")
	return t
}

// trigger is the trigger the flags ask for; getenv gives the CI job's identity (ciOrigin)
// where the flags say nothing.
func (t *triggerFlags) trigger(by string, getenv func(string) string) (orchestrator.Trigger, error) {
	o := ciOrigin(getenv, t.commit)
	if t.repo != "" && t.repo != o.Repo {
		o.Repo, o.CommitURL = t.repo, ""
	}
	if t.ref != "" {
		o.Ref, o.Tag = t.ref, false
	}
	o.JobURL, o.Actor = cmp.Or(t.jobURL, o.JobURL), cmp.Or(t.actor, o.Actor)
	out := orchestrator.Trigger{Build: t.build, ImageTag: t.imageTag, Commit: t.commit, AppVersion: t.appVersion, By: by,
		Rollback: t.rollback, Reason: t.reason, Origin: o}
	for _, kv := range t.set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return out, usageError("--set %q: want KEY=VALUE", kv)
		}
		if out.Params == nil {
			out.Params = map[string]string{}
		}
		out.Params[k] = v
	}
	return out, nil
}

// localCmd holds the flags of the commands that run the engine in this process (run, plan).
type localCmd struct {
	cfgPath, file *string
	trigger       *triggerFlags
	// readOnly is set by plan: it opens the backend with openBackendsToRead, creating no
	// state directory or database.
	readOnly bool
}

func addLocalFlags(c *cli, fs *pflag.FlagSet) *localCmd {
	lc := &localCmd{
		cfgPath: fs.String("config", c.getenv("ORCH_CONFIG"), "daemon config file (env ORCH_CONFIG)"),
		file:    fs.StringP("file", "f", "", "pipeline file to use instead of the pipelines directory"),
		trigger: addTriggerFlags(fs),
	}
	config.AddFlagSubset(fs, "redis-url", "state-dir", "pipelines-dir", "log-level")
	return lc
}

// pipelinesError explains a pipelines directory that cannot be loaded, with the ways to name
// the right one when it is missing (exit code 2).
func pipelinesError(dir string, err error) error {
	if _, statErr := os.Stat(dir); statErr != nil {
		return usageError("pipelines directory %s: %w (name yours with --config FILE (its pipelines_dir), --pipelines-dir DIR or "+
			"ORCH_PIPELINES_DIR, or one file with -f FILE; samples: testdata/pipelines)", dir, errors.Unwrap(statErr))
	}
	return usageError("pipelines in %s:\n%w", dir, err)
}

// engine loads the daemon config (for the backend) and the pipelines, opens the backend and
// builds an engine owned by instance. The caller closes the backends.
func (lc *localCmd) engine(ctx context.Context, c *cli, fs *pflag.FlagSet, instance string) (*phases.Engine, *backends, error) {
	d, err := config.LoadDaemon(*lc.cfgPath, c.getenv, fs)
	if err != nil {
		return nil, nil, usageError("daemon config:\n%w", err)
	}
	// The run's progress is the output; the log shows only warnings unless asked for more.
	level := "warn"
	if f := fs.Lookup("log-level"); (f != nil && f.Changed) || c.getenv("ORCH_LOG_LEVEL") != "" {
		level = d.Log.Level
	}
	log, err := newLogger(c.stderr, level, "text")
	if err != nil {
		return nil, nil, err
	}
	// The progress ends with the run's result: the engine's "run ended" line would say it again.
	log = slog.New(dropMessage{Handler: log.Handler(), msg: "run ended"})
	var ps map[string]*config.Pipeline
	if *lc.file != "" {
		p, err := config.LoadPipelineFile(*lc.file, c.getenv)
		if err != nil {
			return nil, nil, usageError("pipeline file:\n%w", err)
		}
		ps = map[string]*config.Pipeline{p.Name: p}
	} else if ps, err = config.LoadPipelines(d.PipelinesDir, c.getenv); err != nil {
		return nil, nil, pipelinesError(d.PipelinesDir, err)
	}
	if err := d.ApplyEnvironments(ps); err != nil {
		return nil, nil, usageError("environments:\n%w", err)
	}
	c.warnUnknownEnv(ctx, log)
	var b *backends
	if lc.readOnly {
		b, err = openBackendsToRead(ctx, d, log)
	} else {
		b, err = openBackends(ctx, d, log, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	eng, err := newEngine(b, engineConfig{pipelines: ps, getenv: c.getenv, log: log, instance: instance,
		clients: newClients(log, nil, 0), livenessTTL: d.LivenessTTL, coolifyRateLimit: d.Coolify.RateLimit})
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return eng, b, nil
}

func cmdRun(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("run", "PIPELINE [--build B] [--image-tag T] [--set K=V]…",
		"Executes one run of PIPELINE on this host, on the same engine and lock backend as the daemon\n"+
			"(Redis when ORCH_REDIS_URL is set, else the state dir), and shows its progress. The exit\n"+
			"code is 0 only when the run succeeds. Ctrl-C cancels it: it stops at the next safe point\n"+
			"and puts back what it changed.")
	out := addOutputFlags(fs, jsonFollowUsage)
	lc := addLocalFlags(c, fs)
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("run: want one PIPELINE argument (see --help)")
	}
	t, err := lc.trigger.trigger("cli:"+userName(c.getenv), c.getenv)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	eng, b, err := lc.engine(ctx, c, fs, fmt.Sprintf("cli/%s/%d", host, os.Getpid()))
	if err != nil {
		return err
	}
	defer b.Close()
	// The run's owner holds a liveness lease like a daemon, so no daemon takes the run over.
	if _, err := eng.Start(ctx); err != nil {
		return err
	}
	// Every way out stops the engine (its liveness watch included) before the deferred
	// b.Close closes the locker under it.
	stopped := false
	shutdown := func() {
		if stopped {
			return
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = eng.Shutdown(sctx)
	}
	defer shutdown()
	r, _, err := eng.Submit(context.WithoutCancel(ctx), fs.Arg(0), t)
	if err != nil {
		return engineError(err)
	}
	mode := out.mode(c.stdout)
	if mode != modeJSON {
		fmt.Fprintf(c.stdout, "run %s of %s (backend: %s)\n", r.ID, r.Pipeline, b.where)
	}

	// Follow until the run ends; Ctrl-C asks the engine to cancel and keeps following, so the
	// compensation is shown and the locks are released before we exit.
	go func() {
		<-ctx.Done()
		_, _ = eng.Cancel(context.Background(), r.ID, t.By, "interrupted: Ctrl-C on orchestrator run")
	}()
	p := newProgress(c.stdout, mode, *out.verbose)
	if err := runs.Follow(context.Background(), b.store, r.ID, 0, p.event); err != nil {
		return err
	}
	shutdown()
	gctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	final, err := b.store.Get(gctx, r.ID)
	if err != nil {
		return err
	}
	return p.summary(final)
}

func cmdPlan(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("plan", "PIPELINE [--image-tag T] [--build B] [--json]",
		"Shows what a run of PIPELINE with these parameters would change in Coolify (env vars with\n"+
			"every flag and comment change, and image tags; values are never shown) and in Flagsmith\n"+
			"(each mobile step's value now and what it would write, with the never_downgrade verdicts),\n"+
			"which locks it would take and who holds them now, and the timeouts that decide its outcome.\n"+
			"It runs the preflight a run runs (Coolify's token and services, every secret, Flagsmith's\n"+
			"environments and features) and lists every problem that would make the run fail before it\n"+
			"writes anything, a stale build and a frozen key included: then it exits 1, so a CI job can\n"+
			"gate on it. Nothing is written and no lock is taken.")
	asJSON := fs.Bool("json", false, "print the plan as one JSON object")
	lc := addLocalFlags(c, fs)
	lc.readOnly = true
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("plan: want one PIPELINE argument (see --help)")
	}
	t, err := lc.trigger.trigger("cli:plan", c.getenv)
	if err != nil {
		return err
	}
	eng, b, err := lc.engine(ctx, c, fs, "cli/plan")
	if err != nil {
		return err
	}
	defer b.Close()
	plan, err := eng.Plan(ctx, fs.Arg(0), t)
	if err != nil {
		return engineError(err)
	}
	backend := b.where
	if b.absent != "" {
		backend += " (" + b.absent + ": " + b.lacks + ")"
	}
	if *asJSON {
		// stdout stays one JSON object; what the plan could not read goes to stderr.
		if b.absent != "" {
			fmt.Fprintf(c.stderr, "backend: %s\n", backend)
		}
		if err := json.NewEncoder(c.stdout).Encode(plan); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(c.stdout, "backend: %s\n", backend)
		printPlan(c.stdout, plan)
	}
	return planVerdict(plan)
}

// planVerdict is plan's exit: 1 when a run would fail, with every problem in the error.
func planVerdict(p *orchestrator.Plan) error {
	if !p.WouldFail {
		return nil
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("a run of %s would fail: %s", p.Pipeline, strings.Join(p.Problems, "; "))}
}

func printPlan(w io.Writer, p *orchestrator.Plan) {
	fmt.Fprintf(w, "Plan for %s\n\n", p.Pipeline)
	if p.Window != "" {
		fmt.Fprintf(w, "Deploy windows: %s\n\n", p.Window)
	}
	for _, prob := range p.Problems {
		fmt.Fprintf(w, "WOULD FAIL: %s\n", prob)
	}
	for _, warn := range p.Warnings {
		fmt.Fprintf(w, "WARNING: %s\n", warn)
	}
	if len(p.Warnings)+len(p.Problems) > 0 {
		fmt.Fprintln(w)
	}
	for _, s := range p.Services {
		fmt.Fprintf(w, "%s (%s %s)\n", s.Name, s.Kind, s.UUID)
		if s.Error != "" {
			fmt.Fprintf(w, "  cannot read: %s\n", s.Error)
			continue
		}
		if s.Stale != "" {
			fmt.Fprintf(w, "  left alone, %s\n", s.Stale)
		}
		if s.ImageTag != nil {
			fmt.Fprintf(w, "  image tag  %s → %s\n", orDefault(s.ImageTag.Old, "(none)"), s.ImageTag.New)
		}
		for _, e := range s.Env {
			fmt.Fprintf(w, "  env %-10s %s\n", e.Action, e.String())
		}
	}
	if len(p.Waves) > 1 || p.Parallel > 1 {
		fmt.Fprintf(w, "\nPhase 2, up to %d at once\n", p.Parallel)
		for i, wave := range p.Waves {
			fmt.Fprintf(w, "  wave %d: %s\n", i+1, strings.Join(wave, ", "))
		}
	}
	for _, m := range p.Mobile {
		fmt.Fprintf(w, "mobile %s: set %s of %s (%s)\n", m.Name, strings.Join(m.Fields, ", "), m.Feature, m.When)
		switch {
		case m.Error != "":
			fmt.Fprintf(w, "  cannot read: %s\n", m.Error)
		case m.Changes:
			fmt.Fprintf(w, "  %s now  %s\n  would write  %s\n", orDefault(m.Environment, "environment"), m.Current, m.Next)
		default:
			fmt.Fprintf(w, "  %s already holds it: nothing to write\n", orDefault(m.Environment, "environment"))
		}
		for _, k := range m.Kept {
			fmt.Fprintf(w, "  %s\n", k)
		}
	}
	printChecks(w, p.Checks)
	if len(p.Timeouts) > 0 {
		fmt.Fprintf(w, "\nTimeouts (deploy, cancel, health status, health http)\n")
		for _, t := range p.Timeouts {
			fmt.Fprintf(w, "  %-20s %s, %s, %s, %s\n", t.Service, t.Deploy, t.Cancel, orNoCheck(t.Status), orNoCheck(t.HTTP))
		}
	}
	printRequests(w, p.Requests)
	fmt.Fprintf(w, "\nLocks\n")
	for _, l := range p.Locks {
		if l.Free {
			fmt.Fprintf(w, "  %-40s free\n", l.Key)
			continue
		}
		fmt.Fprintf(w, "  %-40s held by %s (fence %d) until %s\n", l.Key, l.Current.Holder, l.Current.Fence,
			l.Current.ExpiresAt.Local().Format(time.TimeOnly))
	}
}

// printChecks lists the metric checks of the run's analysis, each with its query as sent.
func printChecks(w io.Writer, checks []orchestrator.CheckPlan) {
	if len(checks) == 0 {
		return
	}
	fmt.Fprintf(w, "\nAnalysis (after each wave and after the last)\n")
	for _, c := range checks {
		name := c.Name
		if c.Service != "" {
			name += " on " + c.Service
		}
		fail := ""
		if c.Failure != "" {
			fail = ", failed if " + c.Failure
		}
		fmt.Fprintf(w, "  %s: successful if %s%s; every %s, %d times, %d failure(s) allowed\n    %s\n",
			name, c.Success, fail, c.Interval, c.Count, c.FailureLimit, c.Query)
		if c.Error != "" {
			fmt.Fprintf(w, "    refused: %s\n", c.Error)
		}
	}
}

// printRequests prints a plan's estimate of a run's Coolify requests, by purpose.
func printRequests(w io.Writer, r orchestrator.RequestPlan) {
	var parts []string
	for _, p := range coolify.Purposes {
		if n := r.ByPurpose[string(p)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p, n))
		}
	}
	fmt.Fprintf(w, "\nCoolify requests (about): %d (%s)\n", r.Total, strings.Join(parts, ", "))
}

// engineError gives the engine's refusals of what was asked (an unknown pipeline, an invalid
// trigger) exit code 2.
func engineError(err error) error {
	if errors.Is(err, orchestrator.ErrUnknownPipeline) || errors.Is(err, orchestrator.ErrInvalid) {
		return &exitError{code: exitUsage, err: err}
	}
	return err
}

func userName(getenv func(string) string) string {
	for _, k := range []string{"USER", "LOGNAME"} {
		if u := getenv(k); u != "" {
			return u
		}
	}
	return "unknown"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// orNoCheck shows a health timeout, "-" for a check the service does not have.
func orNoCheck(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.String()
}

// dropMessage is a log handler that leaves out the records with message msg.
type dropMessage struct {
	slog.Handler
	msg string
}

// Handle passes every record but those with message msg on.
func (d dropMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == d.msg {
		return nil
	}
	return d.Handler.Handle(ctx, r)
}

// WithAttrs keeps dropping msg below the attributes.
func (d dropMessage) WithAttrs(as []slog.Attr) slog.Handler {
	return dropMessage{Handler: d.Handler.WithAttrs(as), msg: d.msg}
}

// WithGroup keeps dropping msg inside the group.
func (d dropMessage) WithGroup(name string) slog.Handler {
	return dropMessage{Handler: d.Handler.WithGroup(name), msg: d.msg}
}
