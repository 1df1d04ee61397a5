package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// binary is the daemon built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "orchestrator")
	args := []string{"build", "-o", binary}
	if os.Getenv("CHAOS_RACE") == "1" { // a slower build that also catches data races in the daemon
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "../cmd/orchestrator")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: build the daemon:", err)
		return 1
	}
	return m.Run()
}

// Tokens of every daemon the suite starts.
const (
	triggerToken = "chaos-trigger-token-0123456789"
	adminToken   = "chaos-admin-token-0123456789ab"
)

// logBuffer keeps every line a daemon wrote, safe for concurrent use.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuffer) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// daemon is one `orchestrator serve` process.
type daemon struct {
	t      *testing.T
	name   string
	base   string // http://127.0.0.1:port
	env    map[string]string
	cmd    *exec.Cmd
	log    *logBuffer
	exited chan struct{}
	err    error // the process's exit, valid after exited closes
	http   *http.Client
}

// startDaemon starts `orchestrator serve` with env (plus ORCH_LISTEN on a free port, JSON
// debug logs and the suite's tokens unless env sets them) and waits for /healthz. The process
// is killed when the test ends if it still runs.
func startDaemon(t *testing.T, name string, env map[string]string) *daemon {
	t.Helper()
	d := newDaemon(t, name, env)
	d.start()
	return d
}

// newDaemon prepares a daemon (not started); see startDaemon.
func newDaemon(t *testing.T, name string, env map[string]string) *daemon {
	t.Helper()
	e := map[string]string{
		"ORCH_LOG_FORMAT": "json", "ORCH_LOG_LEVEL": "debug",
		"ORCH_TRIGGER_TOKEN": triggerToken, "ORCH_ADMIN_TOKEN": adminToken,
		"ORCH_PUBLIC_READ": "true", "ORCH_SHUTDOWN_GRACE": "20s",
		"PATH": os.Getenv("PATH"), "HOME": t.TempDir(),
	}
	for k, v := range env {
		e[k] = v
	}
	if e["ORCH_LISTEN"] == "" {
		e["ORCH_LISTEN"] = freeAddr(t)
	}
	d := &daemon{t: t, name: name, base: "http://" + e["ORCH_LISTEN"], env: e, log: &logBuffer{},
		http: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(func() {
		d.kill()
		if strings.Contains(d.log.String(), "WARNING: DATA RACE") { // built with CHAOS_RACE=1
			t.Errorf("daemon %s reported a data race", d.name)
		}
		if t.Failed() {
			t.Logf("log of daemon %s:\n%s", d.name, d.log)
		}
	})
	return d
}

func (d *daemon) start() {
	d.t.Helper()
	d.spawn()
	d.waitHealthy()
}

// spawn starts the process and collects its output, without waiting for it to be healthy.
func (d *daemon) spawn() {
	d.t.Helper()
	cmd := exec.Command(binary, "serve")
	for k, v := range d.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		d.t.Fatalf("start daemon %s: %v", d.name, err)
	}
	d.cmd, d.exited = cmd, make(chan struct{})
	lines := make(chan struct{})
	go func() { // owned by the process: ends when its output closes after Wait
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			d.log.add(sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		d.err = cmd.Wait()
		pw.Close()
		<-lines
		close(d.exited)
	}()
}

// waitHealthy polls /healthz until it answers 200 (or the process exits, or 20s pass).
func (d *daemon) waitHealthy() {
	d.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			d.t.Fatalf("daemon %s exited before it was healthy: %v\n%s", d.name, d.err, d.log)
		default:
		}
		resp, err := d.http.Get(d.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond) // polling a starting process: nothing to wait on
	}
	d.t.Fatalf("daemon %s: %s/healthz never answered 200\n%s", d.name, d.base, d.log)
}

// restart starts the daemon again with the same environment (same listen address and
// ORCH_INSTANCE) after it exited.
func (d *daemon) restart() {
	d.t.Helper()
	select {
	case <-d.exited:
	default:
		d.t.Fatalf("restart of daemon %s while it runs", d.name)
	}
	d.start()
}

// kill sends SIGKILL and waits for the process (no-op when it has exited).
func (d *daemon) kill() {
	if d.cmd == nil {
		return
	}
	select {
	case <-d.exited:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// term sends SIGTERM and waits up to timeout for a clean exit.
func (d *daemon) term(timeout time.Duration) error {
	d.t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-d.exited:
		return d.err
	case <-time.After(timeout):
		d.t.Fatalf("daemon %s did not exit within %s of SIGTERM", d.name, timeout)
		return nil
	}
}

// do sends an API request with the admin token (tok overrides it) and returns status and body.
func (d *daemon) do(method, path string, body any, hdr map[string]string) (int, []byte) {
	d.t.Helper()
	code, b, err := d.try(method, path, body, hdr)
	if err != nil {
		d.t.Fatal(err)
	}
	return code, b
}

// try is do, returning a failure to get an answer (a timeout, a refused connection) instead
// of failing the test.
func (d *daemon) try(method, path string, body any, hdr map[string]string) (int, []byte, error) {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			d.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, d.base+path, rd)
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s on daemon %s: %w", method, path, d.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s on daemon %s: read body: %w", method, path, d.name, err)
	}
	return resp.StatusCode, b, nil
}

// trigger starts a run of pipeline through the API with the trigger token.
func (d *daemon) trigger(pipeline string, tr orchestrator.Trigger) runs.Run {
	d.t.Helper()
	body := map[string]any{"build": tr.Build, "image_tag": tr.ImageTag, "commit": tr.Commit, "app_version": tr.AppVersion}
	if len(tr.Params) > 0 {
		body["params"] = tr.Params
	}
	if tr.Rollback {
		body["rollback"], body["reason"] = true, tr.Reason
	}
	code, b := d.do(http.MethodPost, "/v1/pipelines/"+pipeline+"/runs", body,
		map[string]string{"Authorization": "Bearer " + triggerToken})
	if code != http.StatusAccepted {
		d.t.Fatalf("trigger %s on daemon %s: %d %s", pipeline, d.name, code, b)
	}
	var out struct {
		Run runs.Run `json:"run"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Run.ID == "" {
		d.t.Fatalf("trigger answer %s: %v", b, err)
	}
	return out.Run
}

// run returns GET /v1/runs/{id}.
func (d *daemon) run(id string) runs.Run {
	d.t.Helper()
	code, b := d.do(http.MethodGet, "/v1/runs/"+id, nil, nil)
	if code != http.StatusOK {
		d.t.Fatalf("GET run %s on daemon %s: %d %s", id, d.name, code, b)
	}
	var r runs.Run
	if err := json.Unmarshal(b, &r); err != nil {
		d.t.Fatalf("decode run %s: %v", b, err)
	}
	return r
}

// waitEnded waits until the run has ended, following its SSE stream (which closes with an
// "end" event when it has), and returns the run as the API reports it then.
func (d *daemon) waitEnded(id string, timeout time.Duration) runs.Run {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := d.events(ctx, id); err != nil {
		d.t.Fatalf("run %s on daemon %s did not end within %s: %v (last seen: %+v)", id, d.name, timeout, err, d.run(id).Status)
	}
	r := d.run(id)
	if !r.Status.Terminal() {
		d.t.Fatalf("run %s: the event stream ended but the run reads %q", id, r.Status)
	}
	return r
}

// sseMessage is one message of an SSE stream.
type sseMessage struct {
	Event, ID, Data string
}

// stream reads the run's SSE stream until it closes (the run ended) or ctx ends; it returns
// the raw text and the messages.
func (d *daemon) stream(ctx context.Context, id string) (string, []sseMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/v1/runs/"+id+"/events", nil)
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", nil, fmt.Errorf("events: %d %s", resp.StatusCode, b)
	}
	var raw strings.Builder
	var msgs []sseMessage
	var cur sseMessage
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		raw.WriteString(line + "\n")
		switch {
		case line == "":
			if cur != (sseMessage{}) {
				msgs = append(msgs, cur)
			}
			cur = sseMessage{}
		case strings.HasPrefix(line, "event:"):
			cur.Event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "id:"):
			cur.ID = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			cur.Data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		}
	}
	if err := sc.Err(); err != nil {
		return raw.String(), msgs, err
	}
	if len(msgs) == 0 || msgs[len(msgs)-1].Event != "end" {
		return raw.String(), msgs, errors.New("stream closed without an end event")
	}
	return raw.String(), msgs, nil
}

// events returns the run's events from its SSE stream, waiting for the run to end.
func (d *daemon) events(ctx context.Context, id string) ([]runs.Event, error) {
	_, msgs, err := d.stream(ctx, id)
	if err != nil {
		return nil, err
	}
	var evs []runs.Event
	for _, m := range msgs {
		if m.Event == "end" || m.Data == "" {
			continue
		}
		var ev runs.Event
		if err := json.Unmarshal([]byte(m.Data), &ev); err != nil {
			return nil, fmt.Errorf("decode event %q: %w", m.Data, err)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// locks returns GET /v1/locks.
func (d *daemon) locks() []locks.Info {
	d.t.Helper()
	code, b := d.do(http.MethodGet, "/v1/locks", nil, nil)
	if code != http.StatusOK {
		d.t.Fatalf("GET /v1/locks on daemon %s: %d %s", d.name, code, b)
	}
	var out struct {
		Locks []locks.Info `json:"locks"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		d.t.Fatalf("decode locks %s: %v", b, err)
	}
	return out.Locks
}

// waitFor polls cond (a check of a fake's state or of the API) until it holds or timeout
// passes. It is for waiting on state another process changes, which offers no signal.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// pipelineDir writes pipeline files (name → YAML) into a fresh directory and returns it.
func pipelineDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
