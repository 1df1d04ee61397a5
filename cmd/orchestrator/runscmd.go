package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// target is where the `runs` and `locks` commands read and act: a daemon's API when --url
// (or ORCH_URL) is set, else the backend the daemon config names (Redis, or the state dir).
type target struct {
	url, token, cfg *string
	fs              *pflag.FlagSet
	// readOnly is set by the commands that only read: on the embedded backend they create no
	// state directory or database (see open).
	readOnly bool
}

func addTargetFlags(c *cli, fs *pflag.FlagSet) *target {
	t := &target{
		url:   fs.String("url", c.getenv("ORCH_URL"), "daemon URL: work through its API (env ORCH_URL); without it, the local backend"),
		token: fs.String("token", "", "API token (default: env ORCH_READ_TOKEN, ORCH_TRIGGER_TOKEN or ORCH_ADMIN_TOKEN, as the action needs)"),
		cfg:   fs.String("config", c.getenv("ORCH_CONFIG"), "daemon config file naming the local backend, without --url (env ORCH_CONFIG)"),
		fs:    fs,
	}
	config.AddFlagSubset(fs, "redis-url", "state-dir")
	return t
}

// endpoint is an opened target: what it is (for the first line of every output), its locks
// and its runs.
type endpoint struct {
	source string
	locks  lockService
	runs   runService
	client *apiClient // nil on the local backend
	// daemon and marks are the daemon config and the mark store of the local backend (nil
	// through a daemon's API).
	daemon *config.Daemon
	marks  runs.MarkStore
	// audit is the local backend's audit log (nil through a daemon's API, which records).
	audit runs.AuditLog
	close func() error
	// absent, when set, says what of the embedded backend a read-only command found missing
	// ("no state directory at …"; see openBackendsToRead).
	absent string
}

// none is what a command prints when it found nothing: what ("no runs"), and why when the
// backend does not exist.
func (e *endpoint) none(what string) string {
	if e.absent != "" {
		return what + " (" + e.absent + ")"
	}
	return what
}

// lockService is what the `locks` commands need; localLocks and remoteLocks have it.
type lockService interface {
	List(ctx context.Context, prefix string) ([]locks.Info, error)
	// Audit reads the lock actions of the audit log, newest first (runs.LockAudit).
	Audit(ctx context.Context, limit int) ([]runs.LockAuditEntry, error)
	ForceRelease(ctx context.Context, r locks.ForceRequest) (locks.Info, error)
	Freeze(ctx context.Context, r locks.FreezeRequest) (locks.Info, error)
	// Unfreeze lifts a freeze and returns it (the zero Info through the API, whose answer
	// has none); by and reason go to the daemon's audit record through the API (the local
	// backend's caller records them itself).
	Unfreeze(ctx context.Context, key, by, reason string) (locks.Info, error)
}

// localLocks is the lock service of the local backend: its Locker, and the run store's
// audit log for the lock view of it.
type localLocks struct {
	*locks.Locker
	audit runs.AuditLog
}

func (l localLocks) Audit(ctx context.Context, limit int) ([]runs.LockAuditEntry, error) {
	return runs.LockAudit(ctx, l.audit, limit)
}

func (l localLocks) Unfreeze(ctx context.Context, key, _, _ string) (locks.Info, error) {
	return l.Locker.Unfreeze(ctx, key)
}

// runService is what the `runs` commands need, from a daemon or a local store.
type runService interface {
	get(ctx context.Context, id string) (runs.Run, error)
	list(ctx context.Context, f runs.Filter) (runs.Page, error)
	follow(ctx context.Context, id string, fn func(runs.Event) error) error
}

// localDaemon loads the daemon config a command that acts on the backend itself reads
// (cfg and fs's --redis-url and --state-dir), with a warn-level logger on stderr, and warns
// about unknown ORCH_* variables.
func localDaemon(ctx context.Context, c *cli, cfg string, fs *pflag.FlagSet) (*config.Daemon, *slog.Logger, error) {
	d, err := config.LoadDaemon(cfg, c.getenv, fs)
	if err != nil {
		return nil, nil, usageError("daemon config:\n%w", err)
	}
	log, err := newLogger(c.stderr, "warn", "text")
	if err != nil {
		return nil, nil, err
	}
	c.warnUnknownEnv(ctx, log)
	return d, log, nil
}

func (t *target) open(ctx context.Context, c *cli) (*endpoint, error) {
	if *t.url != "" {
		a := newAPIClient(*t.url, *t.token, c.getenv)
		return &endpoint{source: "daemon " + a.base, locks: remoteLocks{a}, runs: remoteRuns{a}, client: a,
			close: func() error { return nil }}, nil
	}
	d, log, err := localDaemon(ctx, c, *t.cfg, t.fs)
	if err != nil {
		return nil, err
	}
	var b *backends
	if t.readOnly {
		b, err = openBackendsToRead(ctx, d, log)
	} else {
		b, err = openBackends(ctx, d, log, nil)
	}
	if err != nil {
		return nil, err
	}
	return &endpoint{source: b.where, locks: localLocks{b.locker, b.store}, runs: localRuns{b.store, b.absent}, absent: b.absent,
		daemon: d, marks: b.store, audit: b.store, close: b.Close}, nil
}

// header names what the output was read from, first: on stdout for people, on stderr with
// --json so stdout stays one JSON object per line.
func (e *endpoint) header(c *cli, asJSON bool) {
	w := c.stdout
	if asJSON {
		w = c.stderr
	}
	fmt.Fprintf(w, "from %s\n", e.source)
}

type remoteRuns struct{ a *apiClient }

func (r remoteRuns) get(ctx context.Context, id string) (runs.Run, error) {
	run, err := r.a.run(ctx, id)
	if err != nil {
		return runs.Run{}, err
	}
	return *run, nil
}

func (r remoteRuns) list(ctx context.Context, f runs.Filter) (runs.Page, error) {
	return r.a.listRuns(ctx, f)
}

func (r remoteRuns) follow(ctx context.Context, id string, fn func(runs.Event) error) error {
	return r.a.follow(ctx, id, fn)
}

// localRuns reads a local run store; absent is the backends' (see openBackendsToRead).
type localRuns struct {
	s      runs.Store
	absent string
}

func (l localRuns) get(ctx context.Context, id string) (runs.Run, error) {
	r, err := l.s.Get(ctx, id)
	switch {
	case errors.Is(err, runs.ErrNotFound) && l.absent != "":
		return r, usageError("run %s: not found (%s)", id, l.absent)
	case errors.Is(err, runs.ErrNotFound):
		return r, usageError("run %s: not found in this backend", id)
	}
	return r, err
}

func (l localRuns) list(ctx context.Context, f runs.Filter) (runs.Page, error) {
	p, err := l.s.List(ctx, f)
	if errors.Is(err, runs.ErrInvalid) {
		return p, &exitError{code: exitUsage, err: err}
	}
	return p, err
}

func (l localRuns) follow(ctx context.Context, id string, fn func(runs.Event) error) error {
	if _, err := l.get(ctx, id); err != nil {
		return err
	}
	return runs.Follow(ctx, l.s, id, 0, fn)
}

func cmdRuns(ctx context.Context, c *cli, args []string) error {
	return subcommand(ctx, c, args, "runs", runsUsage, map[string]func(context.Context, *cli, []string) error{
		"list": cmdRunsList, "show": cmdRunsShow, "watch": cmdRunsWatch, "cancel": cmdRunsCancel,
		"rerun": cmdRunsRerun, "rollback": cmdRunsRollback,
		"approve": cmdRunsApprove, "reject": cmdRunsReject, "override": cmdRunsOverride,
	})
}

const runsUsage = `Usage: orchestrator runs <list|show|watch|cancel|rerun|rollback|approve|reject|override> [flags]

With --url (or ORCH_URL) through the daemon's API, with the token from --token or
ORCH_READ_TOKEN / ORCH_TRIGGER_TOKEN / ORCH_ADMIN_TOKEN; without it from the local backend
(Redis when ORCH_REDIS_URL or redis_url in --config is set, else the state dir). Every output
first names what it read.

  list      recent runs, newest first (--pipeline, --status, --limit)
  show ID   one run: status, reason, every step
  watch ID  follow a run live until it ends; exits with its result
  cancel ID cancel a run (daemon only): it stops at the next safe point and compensates
  rerun ID  start a new run with the run's parameters (daemon only)
  rollback ID --reason TEXT
            roll back to a run that succeeded: its build again, as a deliberate rollback
            (daemon only)
  approve ID --digest D  approve what a run waits on: its plan, or going on after an
            inconclusive analysis (daemon only; an approver's or the admin token)
  reject ID  reject it: the run ends failed (an inconclusive analysis: the release rolls back)
  override ID --reason R  let a run go ahead outside its deploy windows (daemon only; a second person may have to confirm)
`

func cmdRunsList(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs list", "[--pipeline P] [--status S]… [--limit N] [--json]", "Lists runs, newest first.")
	t := addTargetFlags(c, fs)
	t.readOnly = true
	pipeline := fs.String("pipeline", "", "only runs of this pipeline")
	names := make([]string, len(runs.Statuses))
	for i, s := range runs.Statuses {
		names[i] = string(s)
	}
	status := fs.StringSlice("status", nil, "only runs in these statuses ("+strings.Join(names, ", ")+"); repeatable")
	limit := fs.Int("limit", 20, "how many runs")
	asJSON := fs.Bool("json", false, "print one JSON run per line")
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() != 0 {
		return usageError("runs list takes no arguments (see --help)")
	}
	f := runs.Filter{Pipeline: *pipeline, Limit: *limit}
	for _, s := range *status {
		st := runs.Status(s)
		if !st.Valid() {
			return usageError("runs list: --status %q: not a run status", s)
		}
		f.Status = append(f.Status, st)
	}
	e, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	page, err := e.runs.list(ctx, f)
	if err != nil {
		return err
	}
	e.header(c, *asJSON)
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		for _, r := range page.Runs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	if len(page.Runs) == 0 {
		fmt.Fprintln(c.stdout, e.none("no runs"))
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPIPELINE\tSTATUS\tCREATED\tTOOK\tBUILD\tIMAGE TAG\tREASON OR WAITING ON")
	for _, r := range page.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Pipeline, r.Status, r.CreatedAt.Local().Format(time.DateTime),
			took(r, time.Now()), orDefault(r.Trigger.Build, "-"), orDefault(r.Trigger.ImageTag, "-"), shorten(cmp.Or(r.Reason, r.WaitingFor()), 100))
	}
	return tw.Flush()
}

// took is how long a run took ("-" before it started), or has been running at now ("3.2s…").
func took(r runs.Run, now time.Time) string {
	switch {
	case r.StartedAt.IsZero():
		return "-"
	case r.EndedAt.IsZero():
		return humanDuration(now.Sub(r.StartedAt)) + "…"
	}
	return humanDuration(r.EndedAt.Sub(r.StartedAt))
}

// humanDuration is "850ms", "12.3s" or "4m05s", as the dashboard words durations.
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return fmt.Sprintf("%dm%02ds", int64(d/time.Minute), int64((d%time.Minute).Round(time.Second)/time.Second))
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func runIDArg(fs *pflag.FlagSet, cmd string) (string, error) {
	if fs.NArg() != 1 {
		return "", usageError("%s: want one run ID argument (see --help)", cmd)
	}
	return fs.Arg(0), nil
}

func cmdRunsShow(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs show", "ID [--json] [-v]", "Shows one run: its trigger, status, reason and every step.")
	t := addTargetFlags(c, fs)
	t.readOnly = true
	out := addOutputFlags(fs, "print the run as one JSON object (as GET /v1/runs/{id} answers) instead of text")
	if done, err := parse(fs, args); done {
		return err
	}
	id, err := runIDArg(fs, "runs show")
	if err != nil {
		return err
	}
	e, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	r, err := e.runs.get(ctx, id)
	if err != nil {
		return err
	}
	e.header(c, *out.json)
	if *out.json {
		return json.NewEncoder(c.stdout).Encode(r)
	}
	tr := r.Trigger
	fmt.Fprintf(c.stdout, "trigger: build %s, image tag %s, commit %s, by %s\n", orDefault(tr.Build, "-"),
		orDefault(tr.ImageTag, "-"), orDefault(tr.Commit, "-"), orDefault(tr.By, "-"))
	if o := tr.Origin.String(); o != "" {
		fmt.Fprintf(c.stdout, "origin: %s\n", o)
	}
	if tr.Reason != "" {
		fmt.Fprintf(c.stdout, "reason: %s\n", tr.Reason)
	}
	printRun(c.stdout, r, *out.verbose)
	return nil
}

func cmdRunsWatch(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs watch", "ID [--json] [-v]",
		"Follows a run live until it ends, then prints its steps. Exits 0 only when it succeeded.")
	t := addTargetFlags(c, fs)
	t.readOnly = true
	out := addOutputFlags(fs, jsonFollowUsage)
	if done, err := parse(fs, args); done {
		return err
	}
	id, err := runIDArg(fs, "runs watch")
	if err != nil {
		return err
	}
	e, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	mode := out.mode(c.stdout)
	e.header(c, mode == modeJSON)
	p := newProgress(c.stdout, mode, *out.verbose)
	if e.client != nil {
		return watchRun(ctx, c, e.client, id, p)
	}
	if err := e.runs.follow(ctx, id, p.event); err != nil {
		return err
	}
	r, err := e.runs.get(ctx, id)
	if err != nil {
		return err
	}
	return p.summary(r)
}

func cmdRunsCancel(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs cancel", "ID --url URL [--reason TEXT]",
		"Cancels a run through the daemon that runs it: a queued run is dropped, a running one stops\n"+
			"at the next safe point and puts back what it changed. Needs the trigger or admin token.\n"+
			"The run records who asked (the token, and --by) and why.")
	t := addTargetFlags(c, fs)
	reason := fs.String("reason", "", "why (recorded in the run)")
	by := fs.String("by", "", "who asks, recorded with the token's name (default: the CI's user, or $USER)")
	if done, err := parse(fs, args); done {
		return err
	}
	e, id, err := openRunOnDaemon(ctx, c, t, fs, "runs cancel")
	if err != nil {
		return err
	}
	defer e.close()
	r, err := e.client.cancel(ctx, id, cmp.Or(*by, ciOrigin(c.getenv, "").Actor), *reason)
	if err != nil {
		return err
	}
	e.header(c, false)
	fmt.Fprintf(c.stdout, "cancel requested: run %s is %s; follow it with\n  orchestrator runs watch %s --url %s\n",
		r.ID, r.Status, r.ID, e.client.base)
	return nil
}

func cmdRunsApprove(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs approve", "ID --url URL --digest DIGEST [--reason TEXT] [--token T]",
		"Approves the plan a run waits on, through the daemon that runs it. Without --digest it shows\n"+
			"the plan's summary and digest: approve what you read, naming its digest. Needs an approver's\n"+
			"or the admin token (--token, or ORCH_ADMIN_TOKEN); the token's name is the approver.")
	t := addTargetFlags(c, fs)
	digest := fs.String("digest", "", "the digest of the plan you approve (from the run's decision)")
	reason := fs.String("reason", "", "why (recorded in the run and the audit log)")
	if done, err := parse(fs, args); done {
		return err
	}
	e, id, err := openRunOnDaemon(ctx, c, t, fs, "runs approve")
	if err != nil {
		return err
	}
	defer e.close()
	if *digest == "" {
		r, err := e.client.run(ctx, id)
		if err != nil {
			return err
		}
		if r.Decision == nil || r.Decision.Outcome != "" {
			return usageError("runs approve: run %s is %s and waits for no decision", id, r.Status)
		}
		return usageError("runs approve: run %s waits for %d approval(s) (%d given) of %s %s:\n  %s\napprove it with --digest %s",
			id, r.Decision.Needed, r.Decision.Approvals(), r.Decision.Kind, r.Decision.Digest, r.Decision.Summary, r.Decision.Digest)
	}
	r, err := e.client.approve(ctx, id, *digest, *reason)
	if err != nil {
		return err
	}
	e.header(c, false)
	fmt.Fprintf(c.stdout, "approved: run %s has %d of %d approval(s)\n", r.ID, r.Decision.Approvals(), r.Decision.Needed)
	return nil
}

func cmdRunsReject(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs reject", "ID --url URL [--reason TEXT] [--token T]",
		"Rejects the plan a run waits on: the run ends failed. Needs an approver's or the admin token.")
	t := addTargetFlags(c, fs)
	reason := fs.String("reason", "", "why (recorded in the run and the audit log)")
	if done, err := parse(fs, args); done {
		return err
	}
	e, id, err := openRunOnDaemon(ctx, c, t, fs, "runs reject")
	if err != nil {
		return err
	}
	defer e.close()
	r, err := e.client.reject(ctx, id, *reason)
	if err != nil {
		return err
	}
	e.header(c, false)
	fmt.Fprintf(c.stdout, "rejected: run %s ends failed\n", r.ID)
	return nil
}

// openDecision reads the run ID argument and opens the daemon's API (decisions need one).
func openRunOnDaemon(ctx context.Context, c *cli, t *target, fs *pflag.FlagSet, cmd string) (*endpoint, string, error) {
	id, err := runIDArg(fs, cmd)
	if err != nil {
		return nil, "", err
	}
	if *t.url == "" {
		return nil, "", &exitError{code: exitUsage, err: fmt.Errorf("%s: %w", cmd, errNeedsDaemon)}
	}
	e, err := t.open(ctx, c)
	return e, id, err
}

func cmdRunsOverride(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("runs override", "ID --url URL --reason TEXT [--by NAME] [--token T]",
		"Lets a run go ahead outside its pipeline's deploy windows. Needs an approver's or the admin\n"+
			"token. Where the windows say override_second_person, a second person must override too.")
	t := addTargetFlags(c, fs)
	reason := fs.String("reason", "", "why (required; recorded in the run and the audit log)")
	by := fs.String("by", "", "who asks, recorded with the token's name (default: the CI's user, or $USER)")
	if done, err := parse(fs, args); done {
		return err
	}
	e, id, err := openRunOnDaemon(ctx, c, t, fs, "runs override")
	if err != nil {
		return err
	}
	defer e.close()
	if *reason == "" {
		return usageError("runs override: --reason is required: say why the run may go ahead outside its deploy windows")
	}
	r, granted, err := e.client.override(ctx, id, cmp.Or(*by, ciOrigin(c.getenv, "").Actor), *reason)
	if err != nil {
		return err
	}
	e.header(c, false)
	if !granted {
		fmt.Fprintf(c.stdout, "override asked for run %s: it takes effect once a second person overrides too\n", r.ID)
		return nil
	}
	fmt.Fprintf(c.stdout, "overridden: run %s may go ahead outside its deploy windows\n", r.ID)
	return nil
}

func cmdRunsRerun(ctx context.Context, c *cli, args []string) error {
	return runsAction(ctx, c, args, "rerun", "ID --url URL [--reason TEXT]",
		"Starts a new run of the run's pipeline with its parameters (build, image tag, commit, app\n"+
			"version, params) through the daemon. Needs the trigger or admin token.", false)
}

func cmdRunsRollback(ctx context.Context, c *cli, args []string) error {
	return runsAction(ctx, c, args, "rollback", "ID --url URL --reason TEXT",
		"Rolls back to a run that succeeded: a new run deploys its build again as a deliberate\n"+
			"rollback (past the newest-build guard), recorded with who asked and why. Needs the trigger\n"+
			"or admin token.", true)
}

// runsAction is `runs rerun` and `runs rollback`: a new run started from the run ID names,
// through the daemon, printed with the command that follows it.
func runsAction(ctx context.Context, c *cli, args []string, name, usage, help string, needReason bool) error {
	fs := c.flags("runs "+name, usage, help)
	t := addTargetFlags(c, fs)
	reason := fs.String("reason", "", "why (recorded in the new run)")
	by := fs.String("by", "", "who asks, recorded with the token's name (default: the CI's user, or $USER)")
	if done, err := parse(fs, args); done {
		return err
	}
	id, err := runIDArg(fs, "runs "+name)
	if err != nil {
		return err
	}
	if needReason && *reason == "" {
		return usageError("runs %s: --reason is required: say why you roll back", name)
	}
	if *t.url == "" {
		return &exitError{code: exitUsage, err: fmt.Errorf("runs %s: %w", name, errNeedsDaemon)}
	}
	e, err := t.open(ctx, c)
	if err != nil {
		return err
	}
	defer e.close()
	act := e.client.rerun
	if name == "rollback" {
		act = e.client.rollbackTo
	}
	r, err := act(ctx, id, cmp.Or(*by, ciOrigin(c.getenv, "").Actor), *reason)
	if err != nil {
		return err
	}
	e.header(c, false)
	fmt.Fprintf(c.stdout, "run %s queued (%s); follow it with\n  orchestrator runs watch %s --url %s\n", r.ID, r.Trigger.Reason, r.ID, e.client.base)
	return nil
}
