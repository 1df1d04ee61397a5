package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
)

// exitInterrupted is trigger's exit code when Ctrl-C stopped it before the run ended and the
// run was left going (128 + SIGINT, as shells report it).
const exitInterrupted = 130

func cmdTrigger(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("trigger", "PIPELINE --url URL [--image-tag T] [--build B] [--set K=V]…",
		"Asks a running daemon for a run of PIPELINE (the CI side), then follows it until it ends.\n"+
			"The exit code is 0 only when the run succeeds.\n\n"+
			"Idempotency: inside a CI job the Idempotency-Key is derived from the job's identity (GitHub\n"+
			"Actions GITHUB_RUN_ID, GITHUB_RUN_ATTEMPT and GITHUB_JOB; GitLab CI_JOB_ID; Buildkite\n"+
			"BUILDKITE_JOB_ID; CircleCI CIRCLE_WORKFLOW_JOB_ID; Jenkins BUILD_TAG), the pipeline and the\n"+
			"trigger's values, so a step retried inside the same job gets the same run; re-running the\n"+
			"job (a new attempt) asks for a new run. Outside CI the key is random.\n\n"+
			"Ctrl-C while following: on a terminal it asks whether to cancel the run; otherwise the run\n"+
			"goes on, trigger prints the `runs cancel` command and exits 130.")
	base := fs.String("url", c.getenv("ORCH_URL"), "daemon URL, e.g. https://orchestrator.internal (env ORCH_URL)")
	token := fs.String("token", "", "trigger token (default: env ORCH_TRIGGER_TOKEN)")
	key := fs.String("idempotency-key", "", "idempotency key (default: from the CI job's identity, random outside CI)")
	allowAhead := fs.Bool("allow-build-ahead", false, "let a build further ahead of the pipeline's newest than its max_build_ahead through\n"+
		"(sends the admin token: --token or ORCH_ADMIN_TOKEN)")
	noFollow := fs.Bool("no-follow", false, "return once the run is queued")
	quiet := fs.BoolP("quiet", "q", false, "with --no-follow, print only the run ID (for scripts: run=$(orchestrator trigger … --no-follow -q))")
	out := addOutputFlags(fs, jsonFollowUsage)
	tf := addTriggerFlags(fs)
	if done, err := parse(fs, args); done {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("trigger: want one PIPELINE argument (see --help)")
	}
	if *quiet && !*noFollow {
		return usageError("trigger: -q/--quiet prints only the run ID, so it needs --no-follow (a followed run prints its progress)")
	}
	if *base == "" {
		return usageError("trigger: --url (or ORCH_URL) is required")
	}
	pipeline := fs.Arg(0)
	t, err := tf.trigger("", c.getenv)
	if err != nil {
		return err
	}
	t.AllowBuildAhead = *allowAhead
	keySource := "--idempotency-key"
	if *key == "" {
		*key, keySource = idempotencyKey(c.getenv, pipeline, t)
	}
	cl := newAPIClient(*base, *token, c.getenv)
	r, existing, err := cl.trigger(ctx, pipeline, t, *key)
	if err != nil {
		return err
	}
	mode := out.mode(c.stdout)
	if *quiet && *noFollow {
		fmt.Fprintln(c.stdout, r.ID)
		return nil
	}
	if mode == modeJSON {
		_ = json.NewEncoder(c.stdout).Encode(map[string]any{"queued": r, "existing": existing, "idempotency_key": *key})
	} else {
		again := ""
		if existing {
			again = " (the same Idempotency-Key asked before: this is that run)"
		}
		fmt.Fprintf(c.stdout, "run %s of %s queued%s: %s/runs/%s\n  idempotency key %s (%s)\n",
			r.ID, r.Pipeline, again, cl.base, r.ID, *key, keySource)
	}
	if *noFollow {
		return nil
	}
	return watchRun(ctx, c, cl, r.ID, newProgress(c.stdout, mode, *out.verbose))
}

// watchRun follows a daemon's run until it ends and returns its result. When ctx ends first
// (Ctrl-C), it asks on a terminal whether to cancel the run, and otherwise leaves it going.
func watchRun(ctx context.Context, c *cli, cl *apiClient, id string, p *progress) error {
	err := cl.follow(ctx, id, p.event)
	if err != nil && ctx.Err() == nil {
		return err
	}
	if ctx.Err() != nil {
		cancelCmd := fmt.Sprintf("orchestrator runs cancel %s --url %s", id, cl.base)
		if !isTerminal(c.stdin) || !isTerminal(c.stdout) {
			fmt.Fprintf(c.stderr, "\ninterrupted: run %s goes on. To cancel it:\n  %s\n", id, cancelCmd)
			return &exitError{code: exitInterrupted}
		}
		p.detach() // the question goes below the step lines
		if !askYes(c.stdin, c.stdout, fmt.Sprintf("\nCancel run %s? It stops at the next safe point and puts back what it changed. [y/N] ", id)) {
			fmt.Fprintf(c.stdout, "run %s goes on. To cancel it later:\n  %s\n", id, cancelCmd)
			return &exitError{code: exitInterrupted}
		}
		// The signal context has ended: the cancel and the rest of the run are followed on a
		// fresh one, so the person sees the compensation finish.
		ctx = context.Background()
		if _, err := cl.cancel(ctx, id, ciOrigin(c.getenv, "").Actor, "interrupted: Ctrl-C on orchestrator trigger"); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "cancel requested; following run %s until it stops\n", id)
		if err := cl.follow(ctx, id, p.event); err != nil {
			return err
		}
	}
	final, err := cl.run(ctx, id)
	if err != nil {
		return err
	}
	return p.summary(*final)
}

// askYes prints question and reads one line from in: true for y or yes.
func askYes(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprint(out, question)
	line, _ := bufio.NewReader(in).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

// ciIdentity lists, per CI system, the variables that name one attempt of one job. The first
// system whose variables are all set wins.
var ciIdentity = []struct {
	system string
	vars   []string
}{
	{"github", []string{"GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT", "GITHUB_JOB"}},
	{"gitlab", []string{"CI_JOB_ID"}},
	{"buildkite", []string{"BUILDKITE_JOB_ID"}},
	{"circleci", []string{"CIRCLE_WORKFLOW_JOB_ID"}},
	{"jenkins", []string{"BUILD_TAG"}},
}

// idempotencyKey derives trigger's Idempotency-Key and says where it came from. Inside a CI
// job it is a digest of the job's identity, the pipeline and every trigger value, so a step
// retried in the same job (a flaky network, a retry wrapper) asks for the same run, and two
// jobs, or a re-run of the job (a new attempt, a new job ID), ask for their own. Outside CI
// it is random: each call is a new request.
func idempotencyKey(getenv func(string) string, pipeline string, t orchestrator.Trigger) (key, source string) {
	for _, ci := range ciIdentity {
		vals := make([]string, len(ci.vars))
		for i, v := range ci.vars {
			vals[i] = getenv(v)
		}
		if slices.Contains(vals, "") {
			continue
		}
		body, _ := json.Marshal(t) // map keys are sorted: the same trigger, the same bytes
		h := sha256.New()
		for _, part := range append(append([]string{ci.system}, vals...), pipeline, string(body)) {
			fmt.Fprintf(h, "%d:%s;", len(part), part)
		}
		return "ci-" + ci.system + "-" + hex.EncodeToString(h.Sum(nil))[:32],
			"from " + strings.Join(ci.vars, ", ") + ", the pipeline and the trigger"
	}
	return randomKey(), "random: no CI job identity in the environment"
}

func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "cli-" + hex.EncodeToString(b[:])
}

// errNeedsDaemon is returned by the commands that only a daemon can carry out.
var errNeedsDaemon = errors.New("needs the daemon that runs it: pass --url (or set ORCH_URL)")
