package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/internal/testutil"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// serveInProcess runs `serve` with env on a free port until the test ends; it returns the URL.
// With quiet, the shutdown (nothing running by then) must log no warning.
func serveInProcess(t *testing.T, env map[string]string, quiet bool) string {
	t.Helper()
	d := serveDaemon(t, env)
	t.Cleanup(func() { // before serveDaemon's: stop first
		d.stop()
		if d.err != nil {
			t.Errorf("serve: %v\n%s", d.err, d.log)
		}
		if _, tail, _ := strings.Cut(d.log, `"msg":"shutting down"`); quiet && strings.Contains(tail, `"level":"WARN"`) {
			t.Errorf("a clean shutdown logged a warning:\n%s", tail)
		}
	})
	return d.base
}

// slowDeploys makes every deployment take 2 s, so a run is still going when a test acts.
var slowDeploys = coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 2 * time.Second, RunMax: 2 * time.Second})

// openPTY opens a pseudo-terminal: what the program sees as its terminal (tty) and the
// person's side (pty).
func openPTY(t *testing.T) (pty, tty *os.File) {
	t.Helper()
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		skipOutsideCI(t, fmt.Sprintf("no pseudo-terminals here: %v", err))
	}
	if err := unix.IoctlSetPointerInt(int(pty.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(pty.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open tty: %v", err)
	}
	t.Cleanup(func() { tty.Close(); pty.Close() })
	return pty, tty
}

// screen collects what the program writes to its terminal and signals when a text appears.
type screen struct {
	lines chan string
	all   testutil.SyncBuffer
}

func readScreen(pty *os.File) *screen {
	s := &screen{lines: make(chan string, 1024)}
	go func() {
		r := bufio.NewReader(pty)
		var cur strings.Builder
		for {
			b, err := r.ReadByte()
			if err != nil {
				close(s.lines)
				return
			}
			s.all.Write([]byte{b})
			cur.WriteByte(b)
			// A prompt ends without a newline: hand over what is there at "] ".
			if b == '\n' || strings.HasSuffix(cur.String(), "[y/N] ") {
				s.lines <- cur.String()
				cur.Reset()
			}
		}
	}()
	return s
}

func (s *screen) waitFor(t *testing.T, text string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("the terminal closed before %q appeared:\n%s", text, s.all.String())
			}
			if strings.Contains(l, text) {
				return
			}
		case <-timeout:
			t.Fatalf("%q did not appear on the terminal within 60s:\n%s", text, s.all.String())
		}
	}
}

// Ctrl-C on a terminal while trigger follows a run asks whether to cancel it; "y" cancels it
// through the API, trigger follows the run until it stops and exits 1 (canceled). The steps
// are drawn in place (cursor-up sequences), without lock traffic.
func TestTriggerCtrlCAsksOnATerminal(t *testing.T) {
	env, cf := daemonEnv(t, slowDeploys)
	// Two services: the cancel is taken at the safe point after the first one's deploy.
	cf.AddApplication(coolifytest.Application{UUID: "app-web-uuid-000000000002", Name: "web", ImageTag: "v1"})
	two := fmt.Sprintf(`coolify: { url: %q, token: "${COOLIFY_TOKEN}" }
services:
  - { name: api, uuid: app-api-uuid-000000000001, image_tag: "${trigger.image_tag}", deploy_timeout: 10s }
  - { name: web, uuid: app-web-uuid-000000000002, image_tag: "${trigger.image_tag}", deploy_timeout: 10s }
`, cf.URL)
	if err := os.WriteFile(filepath.Join(env["ORCH_PIPELINES_DIR"], "two.yaml"), []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	base := serveInProcess(t, env, false)
	pty, tty := openPTY(t)
	scr := readScreen(pty)

	ctx, interrupt := context.WithCancel(context.Background()) // what Ctrl-C does to main's context
	defer interrupt()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"orchestrator", "trigger", "two", "--url", base, "--image-tag", "v2", "--build", "1"},
			func(k string) string { return env[k] }, tty, tty, tty)
	}()
	scr.waitFor(t, "deploy.started")
	interrupt()
	scr.waitFor(t, "Cancel run")
	if _, err := pty.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("trigger did not end after the cancel:\n%s", scr.all.String())
	}
	if exitCode(err) == exitFailed {
		scr.waitFor(t, "of two: canceled") // the summary, still on its way through the terminal
	}
	out := scr.all.String()
	if exitCode(err) != exitFailed || !strings.Contains(out, "cancel requested") || !strings.Contains(out, ": canceled") {
		t.Errorf("trigger after Ctrl-C and y: exit %d (%v), want 1 and a canceled run:\n%s", exitCode(err), err, out)
	}
	if !strings.Contains(out, "\x1b[") {
		t.Errorf("on a terminal the steps are not redrawn in place:\n%q", out)
	}
	if strings.Contains(out, "lock.acquired") {
		t.Errorf("lock detail shown without -v:\n%s", out)
	}
}

// Ctrl-C while trigger follows a run from a pipe (CI) leaves the run going, prints the
// command that cancels it and exits 130; the run then succeeds.
func TestTriggerCtrlCInCILeavesTheRun(t *testing.T) {
	env, _ := daemonEnv(t, slowDeploys)
	base := serveInProcess(t, env, false)
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	var out, errOut testutil.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"orchestrator", "trigger", "prod", "--url", base, "--image-tag", "v2", "--build", "1"},
			func(k string) string { return env[k] }, strings.NewReader("y\n"), &out, &errOut)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "deploy.started") {
		if time.Now().After(deadline) {
			t.Fatalf("no deploy.started within 60s:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	interrupt()
	err := <-done
	if exitCode(err) != exitInterrupted || !strings.Contains(errOut.String(), "goes on") ||
		!strings.Contains(errOut.String(), "orchestrator runs cancel ") {
		t.Fatalf("Ctrl-C from a pipe: exit %d, stderr:\n%s", exitCode(err), errOut.String())
	}
	if strings.Contains(out.String()+errOut.String(), "Cancel run") {
		t.Errorf("asked a question with no terminal to answer it")
	}
	id := strings.Fields(out.String())[1]
	wout, _, err := invoke(context.Background(), map[string]string{"ORCH_URL": base}, "runs", "watch", id)
	if err != nil || !strings.Contains(wout, ": succeeded") {
		t.Errorf("the run left going: %v\n%s", err, wout)
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Errorf("escape sequences on a pipe:\n%q", out.String())
	}
}

func TestIdempotencyKeyFromCI(t *testing.T) {
	tr := orchestrator.Trigger{Build: "812", ImageTag: "v1.4.0"}
	gh := map[string]string{"GITHUB_RUN_ID": "9876", "GITHUB_RUN_ATTEMPT": "1", "GITHUB_JOB": "deploy"}
	get := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	k1, src := idempotencyKey(get(gh), "production", tr)
	k2, _ := idempotencyKey(get(gh), "production", tr)
	if k1 != k2 || !strings.HasPrefix(k1, "ci-github-") || !strings.Contains(src, "GITHUB_RUN_ID") {
		t.Errorf("a retried step in the same GitHub job: keys %q, %q (%s), want equal ci-github- keys", k1, k2, src)
	}
	for name, change := range map[string]func(m map[string]string) (string, orchestrator.Trigger){
		"a re-run (attempt 2)": func(m map[string]string) (string, orchestrator.Trigger) {
			m["GITHUB_RUN_ATTEMPT"] = "2"
			return "production", tr
		},
		"another job": func(m map[string]string) (string, orchestrator.Trigger) {
			m["GITHUB_JOB"] = "deploy-eu"
			return "production", tr
		},
		"another pipeline": func(map[string]string) (string, orchestrator.Trigger) { return "staging", tr },
		"another build": func(map[string]string) (string, orchestrator.Trigger) {
			t2 := tr
			t2.Build = "813"
			return "production", t2
		},
		"another image tag too": func(map[string]string) (string, orchestrator.Trigger) {
			t2 := tr
			t2.ImageTag = "v9"
			return "production", t2
		},
	} {
		m := map[string]string{}
		for k, v := range gh {
			m[k] = v
		}
		p, t2 := change(m)
		if k, _ := idempotencyKey(get(m), p, t2); k == k1 {
			t.Errorf("%s: same key %q", name, k)
		}
	}
	for _, ci := range []map[string]string{{"CI_JOB_ID": "1"}, {"BUILDKITE_JOB_ID": "b"}, {"CIRCLE_WORKFLOW_JOB_ID": "c"}, {"BUILD_TAG": "jenkins-x-1"}} {
		if k, _ := idempotencyKey(get(ci), "production", tr); !strings.HasPrefix(k, "ci-") || strings.HasPrefix(k, "ci-github") {
			t.Errorf("%v: key %q", ci, k)
		}
	}
	r1, src := idempotencyKey(get(nil), "production", tr)
	r2, _ := idempotencyKey(get(nil), "production", tr)
	if r1 == r2 || !strings.Contains(src, "random") {
		t.Errorf("outside CI: %q, %q (%s), want random keys", r1, r2, src)
	}
}

// Two triggers from the same CI job (a retried step) get one run.
func TestTriggerRetriedInCIGetsTheSameRun(t *testing.T) {
	env, _ := daemonEnv(t)
	base := serveInProcess(t, env, false)
	ci := map[string]string{"ORCH_TRIGGER_TOKEN": env["ORCH_TRIGGER_TOKEN"], "CI_JOB_ID": "4242"}
	var ids []string
	for range 2 {
		out, _, err := invoke(context.Background(), ci, "trigger", "prod", "--url", base, "--image-tag", "v7", "--build", "9", "--no-follow", "-q")
		if err != nil {
			t.Fatalf("trigger: %v", err)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	if ids[0] == "" || ids[0] != ids[1] {
		t.Errorf("a retried CI step got runs %v, want one", ids)
	}
}

// runs and locks through the daemon and on the local backend: each output names its source;
// the lock-key rule, exit codes, --json lines.
func TestRunsAndLocksCommands(t *testing.T) {
	env, _ := daemonEnv(t)
	base := serveInProcess(t, env, true)
	remote := map[string]string{"ORCH_URL": base, "ORCH_TRIGGER_TOKEN": env["ORCH_TRIGGER_TOKEN"],
		"ORCH_ADMIN_TOKEN": env["ORCH_ADMIN_TOKEN"], "USER": "ops"}
	ctx := context.Background()
	id, _, err := invoke(ctx, remote, "trigger", "prod", "--image-tag", "v3", "--build", "3", "--no-follow", "-q")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	out, _, err := invoke(ctx, remote, "runs", "watch", id)
	if err != nil || !strings.HasPrefix(out, "from daemon "+base+"\n") || !strings.Contains(out, ": succeeded") {
		t.Errorf("runs watch: %v\n%s", err, out)
	}
	out, _, err = invoke(ctx, remote, "runs", "list", "--pipeline", "prod", "--status", "succeeded")
	if err != nil || !strings.HasPrefix(out, "from daemon "+base+"\n") || !strings.Contains(out, id) {
		t.Errorf("runs list: %v\n%s", err, out)
	}
	out, errOut, err := invoke(ctx, remote, "runs", "list", "--json")
	var r runs.Run
	if err != nil || json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &r) != nil || r.ID != id ||
		!strings.Contains(errOut, "from daemon") {
		t.Errorf("runs list --json: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	// The same run from the state dir the daemon writes.
	local := map[string]string{"ORCH_STATE_DIR": env["ORCH_STATE_DIR"], "USER": "ops"}
	out, _, err = invoke(ctx, local, "runs", "show", id)
	if err != nil || !strings.HasPrefix(out, "from state dir ") || !strings.Contains(out, "succeeded") {
		t.Errorf("runs show on the state dir: %v\n%s", err, out)
	}
	if _, _, err := invoke(ctx, remote, "runs", "cancel", id); exitCode(err) != exitFailed || !strings.Contains(err.Error(), "409") {
		t.Errorf("cancel of an ended run: exit %d %v, want 1 and the daemon's 409", exitCode(err), err)
	}
	if _, _, err := invoke(ctx, local, "runs", "cancel", id); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--url") {
		t.Errorf("cancel without --url: exit %d %v, want 2 naming --url", exitCode(err), err)
	}

	// Freeze through the API; the local list shows it, naming the state dir.
	if out, _, err := invoke(ctx, remote, "locks", "freeze", "coolify:phase2", "--message", "release freeze", "--for", "1h"); err != nil {
		t.Fatalf("freeze via the API: %v\n%s", err, out)
	}
	out, _, err = invoke(ctx, local, "locks", "list", "--prefix", "coolify:")
	if err != nil || !strings.HasPrefix(out, "from state dir ") || !strings.Contains(out, "release freeze") {
		t.Errorf("locks list on the state dir: %v\n%s", err, out)
	}
	out, _, err = invoke(ctx, remote, "locks", "list", "--json", "--prefix", "coolify:")
	if err != nil || !strings.Contains(out, `"key":"coolify:phase2"`) {
		t.Errorf("locks list --json: %v\n%s", err, out)
	}
	if _, _, err := invoke(ctx, remote, "locks", "unfreeze", "coolify:phase2", "--reason", "done"); err != nil {
		t.Errorf("unfreeze via the API: %v", err)
	}
	out, _, _ = invoke(ctx, remote, "locks", "audit")
	if !strings.Contains(out, "freeze") || !strings.Contains(out, "cli:ops") {
		t.Errorf("audit via the API:\n%s", out)
	}
	// One lock-key rule, before anything is sent or opened.
	for _, e := range []map[string]string{remote, local} {
		if _, _, err := invoke(ctx, e, "locks", "freeze", "whatever", "--message", "m"); exitCode(err) != exitUsage ||
			!strings.Contains(err.Error(), "coolify:, mobile:") {
			t.Errorf("freeze whatever: exit %d %v, want 2 naming the namespaces", exitCode(err), err)
		}
	}
	// A daemon that does not answer: exit 3.
	gone := map[string]string{"ORCH_URL": "http://" + freeAddr(t)}
	if _, _, err := invoke(ctx, gone, "runs", "list"); exitCode(err) != exitUnreachable {
		t.Errorf("runs list of a daemon that is not there: exit %d %v, want 3", exitCode(err), err)
	}
	if _, _, err := invoke(ctx, gone, "health"); exitCode(err) != exitUnreachable {
		t.Errorf("health of a daemon that is not there: exit %d, want 3", exitCode(err))
	}
	if out, _, err := invoke(ctx, map[string]string{"ORCH_URL": base}, "health"); err != nil || !strings.Contains(out, "ready") {
		t.Errorf("health of a ready daemon: %v %s", err, out)
	}
}

// TestServicesCommand: two pipelines deploy api; `services` shows, through the daemon and
// from the state dir it writes (with its pipelines), the pipelines that deploy api, the run
// that wrote it last and each pipeline's newest build there; --json prints the API's form.
// Without a state directory it reads the pipelines, says no run wrote anything and creates
// nothing.
func TestServicesCommand(t *testing.T) {
	env, _ := daemonEnv(t)
	prod, err := os.ReadFile(filepath.Join(env["ORCH_PIPELINES_DIR"], "prod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	hotfix := strings.Replace(string(prod), "  - name: api\n", "  - name: backend\n", 1)
	if err := os.WriteFile(filepath.Join(env["ORCH_PIPELINES_DIR"], "hotfix.yaml"), []byte(hotfix), 0o644); err != nil {
		t.Fatal(err)
	}
	base := serveInProcess(t, env, true)
	remote := map[string]string{"ORCH_URL": base, "ORCH_TRIGGER_TOKEN": env["ORCH_TRIGGER_TOKEN"], "USER": "ops"}
	ctx := context.Background()
	ids := map[string]string{}
	for _, tr := range []struct{ pipeline, build string }{{"prod", "3"}, {"hotfix", "7"}} {
		out, _, err := invoke(ctx, remote, "trigger", tr.pipeline, "--image-tag", "v"+tr.build, "--build", tr.build, "--no-follow", "-q")
		if err != nil {
			t.Fatal(err)
		}
		ids[tr.pipeline] = strings.TrimSpace(out)
		if out, _, err := invoke(ctx, remote, "runs", "watch", ids[tr.pipeline]); err != nil {
			t.Fatalf("%s build %s: %v\n%s", tr.pipeline, tr.build, err, out)
		}
	}

	local := map[string]string{"ORCH_STATE_DIR": env["ORCH_STATE_DIR"], "ORCH_PIPELINES_DIR": env["ORCH_PIPELINES_DIR"],
		"COOLIFY_TOKEN": env["COOLIFY_TOKEN"]}
	for from, e := range map[string]map[string]string{"from daemon " + base: remote, "from state dir ": local} {
		out, _, err := invoke(ctx, e, "services")
		if err != nil || !strings.HasPrefix(out, from) {
			t.Errorf("services (%s): %v\n%s", from, err, out)
			continue
		}
		for _, want := range []string{
			"api, backend (app-api-uuid-000000000001): deployed by hotfix, prod\n",
			"last written: run " + ids["hotfix"] + " deployed it at ",
			"carrying build 7 of hotfix\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("services (%s) lacks %q:\n%s", from, want, out)
			}
		}
		for _, want := range [][]string{{"hotfix", "backend", "7", ids["hotfix"], "deployed"}, {"prod", "api", "3", ids["prod"], "deployed"}} {
			if !regexp.MustCompile(`(?m)^  ` + strings.Join(want, `\s+`) + `\s`).MatchString(out) {
				t.Errorf("services (%s): no line %q:\n%s", from, want, out)
			}
		}
	}
	out, errOut, err := invoke(ctx, remote, "services", "--json")
	var s orchestrator.Service
	if err != nil || json.Unmarshal([]byte(out), &s) != nil || !strings.Contains(errOut, "from daemon") {
		t.Fatalf("services --json: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if len(s.Pipelines) != 2 || s.Pipelines[0].Newest == nil || s.Pipelines[0].Newest.RunID != ids["hotfix"] ||
		s.Pipelines[1].Newest == nil || s.Pipelines[1].Newest.Build != "3" || s.Mark == nil || s.Mark.RunID != ids["hotfix"] {
		t.Errorf("services --json: %+v, want hotfix's build 7 and prod's build 3, hotfix's run last", s)
	}

	state := filepath.Join(t.TempDir(), "state")
	fresh := map[string]string{"ORCH_STATE_DIR": state, "ORCH_PIPELINES_DIR": env["ORCH_PIPELINES_DIR"], "COOLIFY_TOKEN": env["COOLIFY_TOKEN"]}
	out, _, err = invoke(ctx, fresh, "services")
	if err != nil || !strings.Contains(out, "no run has written any (no state directory at "+state+")\n") ||
		!strings.Contains(out, "last written: by no recorded run\n") {
		t.Errorf("services without a state directory: %v\n%s", err, out)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("services created the state directory (stat: %v)", err)
	}
}

func TestHelpVersionAndUsageErrors(t *testing.T) {
	ctx := context.Background()
	out, errOut, err := invoke(ctx, nil, "locks", "list", "--help")
	if err != nil || errOut != "" || !strings.Contains(out, "--state-dir") || strings.Contains(out, "--listen") ||
		strings.Contains(out, "--public-read") || !strings.Contains(out, "Exit codes") {
		t.Errorf("locks list --help: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	out, _, _ = invoke(ctx, nil, "validate", "--help")
	if strings.Contains(out, "Flags:\n\n") || strings.HasSuffix(strings.TrimSpace(out), "Flags:") {
		t.Errorf("validate --help shows an empty Flags section:\n%s", out)
	}
	out, _, err = invoke(ctx, nil, "--help")
	if err != nil || !strings.Contains(out, "runs") || !strings.Contains(out, "3  the daemon") {
		t.Errorf("--help: %v\n%s", err, out)
	}
	out, _, err = invoke(ctx, nil, "--version")
	if err != nil || !strings.HasPrefix(out, "orchestrator ") {
		t.Errorf("--version: %v %q", err, out)
	}
	_, errOut, err = invoke(ctx, nil, "runs", "list", "--bogus")
	if exitCode(err) != exitUsage || errOut != "" || !strings.Contains(err.Error(), "--bogus") {
		t.Errorf("unknown flag: exit %d, err %v, stderr %q (want 2, one error, printed by main)", exitCode(err), err, errOut)
	}
	// run on a fresh clone without a pipelines directory names the ways to give one.
	_, _, err = invoke(ctx, map[string]string{"ORCH_STATE_DIR": t.TempDir(), "ORCH_PIPELINES_DIR": "/nonexistent/pipelines"}, "run", "production")
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--config") || !strings.Contains(err.Error(), "--pipelines-dir") {
		t.Errorf("run without pipelines: exit %d %v, want 2 naming --config and --pipelines-dir", exitCode(err), err)
	}
}

// The steps of a run on a terminal: one line each, rewritten in place as they move; piped:
// plain lines.
func TestProgressOnATerminalRewritesSteps(t *testing.T) {
	evs := []runs.Event{
		{Type: runs.EventPhaseStarted, Phase: runs.Phase1, LockKey: "coolify:phase1"},
		{Type: runs.EventLockWaiting, Phase: runs.Phase1, Service: "api", LockKey: "coolify:u1"},
		{Type: runs.EventServiceSynced, Phase: runs.Phase1, Service: "api", LockKey: "coolify:u1", Fence: 17},
		{Type: runs.EventServiceSynced, Phase: runs.Phase1, Service: "web"},
		{Type: runs.EventServiceUnchanged, Phase: runs.Phase1, Service: "api"},
	}
	var tty strings.Builder
	p := newProgress(&tty, modeTTY, false)
	for _, e := range evs {
		if err := p.event(e); err != nil {
			t.Fatal(err)
		}
	}
	// api's line is 2 lines above the cursor when it changes again.
	if !strings.Contains(tty.String(), "\x1b[2A\r\x1b[2K") || strings.Count(tty.String(), "\n") != 3 {
		t.Errorf("terminal output: %q, want 3 lines and api's rewritten in place", tty.String())
	}
	if strings.Contains(tty.String(), "lock.waiting") || strings.Contains(tty.String(), "fence=") {
		t.Errorf("lock detail without -v: %q", tty.String())
	}
	var plain strings.Builder
	p = newProgress(&plain, modePlain, true)
	for _, e := range evs {
		_ = p.event(e)
	}
	if strings.Contains(plain.String(), "\x1b") || strings.Count(plain.String(), "\n") != 5 || !strings.Contains(plain.String(), "fence=17") {
		t.Errorf("plain -v output: %q, want 5 lines with the fence and no escapes", plain.String())
	}
}

// A wait recorded with who holds the key (one that lasted) is shown without -v; the quick
// waits recorded with their grant are not.
func TestProgressShowsALastingWaitWithoutVerbose(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, modePlain, false)
	for _, e := range []runs.Event{
		{Type: runs.EventLockWaiting, Phase: runs.Phase1, LockKey: "coolify:phase1",
			Message: "frozen by operator:alice until 2026-12-03T20:00:00Z: db migration"},
		{Type: runs.EventLockWaiting, Phase: runs.Phase1, Service: "api", LockKey: "coolify:u1"},
		{Type: runs.EventLockAcquired, Phase: runs.Phase1, Service: "api", LockKey: "coolify:u1", Fence: 3},
	} {
		if err := p.event(e); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Count(out.String(), "\n") != 1 || !strings.Contains(out.String(), "coolify:phase1  frozen by operator:alice") {
		t.Errorf("output without -v: %q, want only the lasting wait, with its key and holder", out.String())
	}
}

// The commands the demo prints work when pasted (run here through a shell-like split).
func TestDemoHintsWorkWhenPasted(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out testutil.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"orchestrator", "demo", "--listen", "127.0.0.1:0"}, func(string) string { return "" },
			strings.NewReader(""), &out, &out)
	}()
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(out.String(), "locks unfreeze") {
		if time.Now().After(deadline) {
			t.Fatalf("the demo printed no hints within 90s:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, hints, _ := strings.Cut(out.String(), "try:\n")
	env := map[string]string{}
	ran := 0
	for _, line := range strings.Split(strings.TrimSpace(hints), "\n") {
		words := shellSplit(t, strings.TrimSpace(line))
		if words[0] == "export" {
			for _, kv := range words[1:] {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			continue
		}
		if words[0] != "orchestrator" {
			t.Fatalf("hint %q does not start with the program's name as started", line)
		}
		hout, herr, err := invoke(ctx, env, words[1:]...)
		if err != nil {
			t.Errorf("hint %q: %v\n%s%s", line, err, hout, herr)
		}
		ran++
	}
	if ran < 4 {
		t.Errorf("ran %d hints:\n%s", ran, hints)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("demo: %v", err)
	}
}

// shellSplit splits a command line on blanks, honoring single quotes (what the hints use).
func shellSplit(t *testing.T, s string) []string {
	var out []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// On the Redis backend, locks and runs name the server (never a password), and a server that
// does not answer is exit code 3.
func TestLocksOnRedisNameTheServer(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	env := map[string]string{"ORCH_REDIS_URL": srv.URL(), "USER": "ops"}
	if _, _, err := invoke(ctx, env, "locks", "freeze", "coolify:phase1", "--message", "maintenance", "--for", "10m"); err != nil {
		t.Fatal(err)
	}
	out, _, err := invoke(ctx, env, "locks", "list")
	if err != nil || !strings.HasPrefix(out, "from "+srv.URL()+"\n") || !strings.Contains(out, "maintenance") {
		t.Errorf("locks list on Redis: %v\n%s", err, out)
	}
	if got := redactRedisURL("redis://user:sentinel-pw@10.0.0.5:6380/2?dial_timeout=3s"); got != "redis://10.0.0.5:6380/2" {
		t.Errorf("redactRedisURL = %q, want the host, port and database only", got)
	}
	gone := map[string]string{"ORCH_REDIS_URL": "redis://" + freeAddr(t) + "/0"}
	if _, _, err := invoke(ctx, gone, "runs", "list"); exitCode(err) != exitUnreachable {
		t.Errorf("runs list on a Redis that is not there: exit %d %v, want 3", exitCode(err), err)
	}
}

// Lifting a freeze that is not there, or force-releasing a key nobody holds, is a refusal
// (exit 1, as for a stale fence), through the daemon as on the local backend: the lease the
// operator saw is gone, not the key misspelt.
func TestLockRefusalsExitOneThroughTheDaemonToo(t *testing.T) {
	env, _ := daemonEnv(t)
	base := serveInProcess(t, env, true)
	remote := map[string]string{"ORCH_URL": base, "ORCH_ADMIN_TOKEN": env["ORCH_ADMIN_TOKEN"], "USER": "ops"}
	local := map[string]string{"ORCH_STATE_DIR": t.TempDir(), "USER": "ops"}
	ctx := context.Background()
	for name, e := range map[string]map[string]string{"daemon": remote, "local": local} {
		for _, args := range [][]string{
			{"locks", "unfreeze", "coolify:phase2", "--reason", "done"},
			{"locks", "release", "coolify:phase1", "--fence", "7", "--reason", "crashed"},
			{"locks", "release", "coolify:phase1", "--holder", "prod#3/phase1", "--reason", "crashed"},
		} {
			_, _, err := invoke(ctx, e, args...)
			if exitCode(err) != exitFailed || strings.Contains(fmt.Sprint(err), "check the name") {
				t.Errorf("%s: %s: exit %d %v, want 1 saying the key is not held (or not frozen)",
					name, strings.Join(args, " "), exitCode(err), err)
			}
		}
	}
}

// `runs show --json` prints the run as one JSON object (no events: show does not read
// them), and its --help says so instead of promising events first.
func TestRunsShowJSONIsWhatItsHelpSays(t *testing.T) {
	env, _ := daemonEnv(t)
	base := serveInProcess(t, env, false) // the run may still be going at the end
	remote := map[string]string{"ORCH_URL": base, "ORCH_TRIGGER_TOKEN": env["ORCH_TRIGGER_TOKEN"]}
	ctx := context.Background()
	id, _, err := invoke(ctx, remote, "trigger", "prod", "--image-tag", "v3", "--build", "3", "--no-follow", "-q")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	out, _, err := invoke(ctx, remote, "runs", "show", id, "--json")
	var r runs.Run
	if err != nil || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &r) != nil || r.ID != id {
		t.Fatalf("runs show --json: %v\n%s", err, out)
	}
	help, _, _ := invoke(ctx, nil, "runs", "show", "--help")
	for _, l := range strings.Split(help, "\n") {
		if strings.Contains(l, "--json") && !strings.Contains(l, "Usage") &&
			(strings.Contains(l, "events") || !strings.Contains(l, "the run as one JSON object")) {
			t.Errorf("runs show --help describes --json as %q; it prints the run as one JSON object", strings.TrimSpace(l))
		}
	}
}

// -q is documented as "with --no-follow": without it trigger refuses before asking for a run,
// instead of ignoring -q and following (a script's run=$(… -q) would hold the whole log).
func TestTriggerQuietNeedsNoFollow(t *testing.T) {
	env, _ := daemonEnv(t)
	base := serveInProcess(t, env, true)
	remote := map[string]string{"ORCH_URL": base, "ORCH_TRIGGER_TOKEN": env["ORCH_TRIGGER_TOKEN"]}
	ctx := context.Background()
	out, _, err := invoke(ctx, remote, "trigger", "prod", "--image-tag", "v3", "--build", "3", "-q")
	if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "--no-follow") {
		t.Errorf("trigger -q without --no-follow: exit %d %v, want 2 naming --no-follow\n%s", exitCode(err), err, out)
	}
	list, _, err := invoke(ctx, remote, "runs", "list", "--json")
	if err != nil || strings.TrimSpace(list) != "" {
		t.Errorf("a refused trigger -q asked for a run: %v\n%s", err, list)
	}
}

// locks freeze checks --for and --until itself, naming the flag the operator gave, and holds
// the local backend to the API's longest freeze: the same command is refused the same way
// with and without --url.
func TestLocksFreezeChecksItsFlags(t *testing.T) {
	env, _ := daemonEnv(t)
	base := serveInProcess(t, env, true)
	remote := map[string]string{"ORCH_URL": base, "ORCH_ADMIN_TOKEN": env["ORCH_ADMIN_TOKEN"], "USER": "ops"}
	local := map[string]string{"ORCH_STATE_DIR": t.TempDir(), "USER": "ops"}
	ctx := context.Background()
	soon := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	for name, e := range map[string]map[string]string{"daemon": remote, "local": local} {
		for _, c := range []struct {
			flags []string
			want  string
		}{
			{[]string{"--for", "-1h"}, "--for"},
			{[]string{"--for", "0s"}, "--for"},
			{[]string{"--for", "1h", "--until", soon}, "not both"},
			{[]string{"--for", "1000h"}, "720h"},
		} {
			args := append([]string{"locks", "freeze", "coolify:phase2", "--message", "m"}, c.flags...)
			_, _, err := invoke(ctx, e, args...)
			if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), c.want) {
				t.Errorf("%s: %s: exit %d %v, want 2 saying %q", name, strings.Join(c.flags, " "), exitCode(err), err, c.want)
			}
		}
		out, _, err := invoke(ctx, e, "locks", "list", "--prefix", "coolify:")
		if err != nil || strings.Contains(out, "coolify:phase2") {
			t.Errorf("%s: a refused freeze froze the key: %v\n%s", name, err, out)
		}
	}
}

// A run the engine refuses (unknown pipeline, a trigger missing what the pipeline needs) is
// one error, printed once: the engine stops before the backend closes, so its liveness
// watch does not log the closed locker as a lost lease.
func TestRunRefusedSaysOnlyWhy(t *testing.T) {
	env, _ := daemonEnv(t)
	delete(env, "ORCH_LOG_FORMAT")
	ctx := context.Background()
	for _, args := range [][]string{
		{"run", "nope", "--build", "1"},
		{"run", "prod", "--build", "1"}, // no --image-tag
	} {
		_, errOut, err := invoke(ctx, env, args...)
		if exitCode(err) != exitUsage {
			t.Errorf("%s: exit %d %v, want 2", strings.Join(args, " "), exitCode(err), err)
		}
		if errOut != "" {
			t.Errorf("%s: besides the error, stderr got:\n%s", strings.Join(args, " "), errOut)
		}
	}
}

// runs list --help names every status --status accepts (runs.Statuses), none left out.
func TestRunsListHelpNamesEveryStatus(t *testing.T) {
	help, _, err := invoke(context.Background(), nil, "runs", "list", "--help")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(help, "\n") {
		if strings.Contains(l, "--status") && !strings.Contains(l, "Usage") {
			line = l
		}
	}
	for _, s := range runs.Statuses {
		if !strings.Contains(line, string(s)) {
			t.Errorf("runs list --help does not name status %q: %q", s, strings.TrimSpace(line))
		}
	}
}

// A run held by a freeze says so in `runs show` and `runs list` (not only "phase1"), and once
// it ends, `runs show` gives its start, end and duration.
func TestRunsSayWhatARunWaitsOn(t *testing.T) {
	env, _ := daemonEnv(t)
	base := serveInProcess(t, env, true)
	remote := map[string]string{"ORCH_URL": base, "ORCH_TRIGGER_TOKEN": env["ORCH_TRIGGER_TOKEN"],
		"ORCH_ADMIN_TOKEN": env["ORCH_ADMIN_TOKEN"], "USER": "ops"}
	ctx := context.Background()
	if out, _, err := invoke(ctx, remote, "locks", "freeze", "coolify:phase2", "--message", "release freeze", "--for", "1h"); err != nil {
		t.Fatalf("freeze: %v\n%s", err, out)
	}
	id, _, err := invoke(ctx, remote, "trigger", "prod", "--image-tag", "v3", "--build", "3", "--no-follow", "-q")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	const want = "waiting for coolify:phase2, frozen by operator:api:admin (cli:ops) until "
	var show string
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(show, want); {
		if time.Now().After(deadline) {
			t.Fatalf("runs show never said what the run waits on; last:\n%s", show)
		}
		time.Sleep(300 * time.Millisecond)
		if show, _, err = invoke(ctx, remote, "runs", "show", id); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(show, ": release freeze") {
		t.Errorf("runs show lacks the freeze's message:\n%s", show)
	}
	list, _, err := invoke(ctx, remote, "runs", "list")
	if err != nil || !strings.Contains(list, "REASON OR WAITING ON") || !strings.Contains(list, want) {
		t.Errorf("runs list does not say what the run waits on: %v\n%s", err, list)
	}
	if _, _, err := invoke(ctx, remote, "locks", "unfreeze", "coolify:phase2", "--reason", "done"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := invoke(ctx, remote, "runs", "watch", id); err != nil {
		t.Fatalf("runs watch: %v\n%s", err, out)
	}
	show, _, err = invoke(ctx, remote, "runs", "show", id)
	if err != nil || strings.Contains(show, "waiting for") || !strings.Contains(show, "  started ") || !strings.Contains(show, ", ended ") ||
		!strings.Contains(show, ", took ") {
		t.Errorf("runs show of the ended run: %v, want start, end and duration and no wait:\n%s", err, show)
	}
}

// --version names the commit set at build time (the README's build command sets it), and
// says how to get one when none was recorded.
func TestVersionNamesTheCommit(t *testing.T) {
	if got := (versionInfo{version: "(devel)", commit: "5f2c3e1"}).String(); got != "orchestrator (devel) commit 5f2c3e1" {
		t.Errorf("with a commit: %q", got)
	}
	if got := (versionInfo{version: "(devel)"}).String(); !strings.Contains(got, `-ldflags "-X main.commit=$(git rev-parse HEAD)"`) {
		t.Errorf("without a commit: %q, want how to build with one", got)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), `go build -ldflags "-X main.commit=$(git rev-parse HEAD 2>/dev/null)" -o orchestrator ./cmd/orchestrator`) {
		t.Error("the README's build command does not set main.commit")
	}
}

// `runs rerun` starts the same parameters again; `runs rollback` needs a reason and
// deploys a succeeded run's build again as a rollback, past the newest-build guard.
func TestRunsRerunAndRollback(t *testing.T) {
	env, cf := daemonEnv(t)
	base := serveInProcess(t, env, true)
	remote := map[string]string{"ORCH_URL": base, "ORCH_TRIGGER_TOKEN": env["ORCH_TRIGGER_TOKEN"], "USER": "ops"}
	ctx := context.Background()
	trigger := func(tag, build string) string {
		out, _, err := invoke(ctx, remote, "trigger", "prod", "--image-tag", tag, "--build", build, "--no-follow", "-q")
		if err != nil {
			t.Fatalf("trigger %s: %v", tag, err)
		}
		id := strings.TrimSpace(out)
		if out, _, err := invoke(ctx, remote, "runs", "watch", id); err != nil {
			t.Fatalf("run of %s: %v\n%s", tag, err, out)
		}
		return id
	}
	old := trigger("v3", "3")
	trigger("v4", "4")
	out, _, err := invoke(ctx, remote, "runs", "rerun", old)
	if err != nil || !strings.Contains(out, "(re-run of run "+old+")") {
		t.Errorf("runs rerun: %v\n%s", err, out)
	}
	if _, _, err := invoke(ctx, remote, "runs", "rollback", old); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--reason") {
		t.Errorf("runs rollback without --reason: exit %d %v, want 2 naming --reason", exitCode(err), err)
	}
	out, _, err = invoke(ctx, remote, "runs", "rollback", old, "--reason", "v4 breaks checkout")
	if err != nil || !strings.Contains(out, "roll back to run "+old+" (build 3): v4 breaks checkout") {
		t.Fatalf("runs rollback: %v\n%s", err, out)
	}
	id := strings.Fields(strings.SplitN(out, "\n", 3)[1])[1]
	if out, _, err := invoke(ctx, remote, "runs", "watch", id); err != nil {
		t.Fatalf("the rollback did not succeed: %v\n%s", err, out)
	}
	if app, _ := cf.App("app-api-uuid-000000000001"); app.DeployedImageTag != "v3" {
		t.Errorf("api runs %q after the rollback, want v3", app.DeployedImageTag)
	}
}
