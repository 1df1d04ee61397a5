// Package promtest starts a real Prometheus server for a test (the prometheus binary from
// PATH, Debian's package; scripts/ensure-deps.sh installs it) and provides App, a small
// service whose request counters, error rate and latency the test sets, for it to scrape.
package promtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ScrapeInterval is how often the server scrapes its targets.
const ScrapeInterval = time.Second

// Server is a running Prometheus.
type Server struct {
	// URL is its base URL (http://127.0.0.1:<port>).
	URL string
	cmd *exec.Cmd
	dir string
}

// binary finds prometheus in PATH, or skips the test (fails it in CI).
func binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		msg := "prometheus not found in PATH: run `make deps` (it installs it) or `apt-get install -y prometheus`"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// Start starts Prometheus on a free loopback port with a temporary data directory,
// scraping each target (host:port) every ScrapeInterval, and waits until it is ready and has
// scraped every target once. It is stopped when the test ends.
func Start(t testing.TB, targets ...string) *Server {
	t.Helper()
	bin := binary(t)
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	conf := fmt.Sprintf("global:\n  scrape_interval: %s\n  evaluation_interval: %s\nscrape_configs:\n  - job_name: app\n    static_configs:\n      - targets: [%s]\n",
		ScrapeInterval, ScrapeInterval, strings.Join(quoted, ", "))
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{URL: "http://" + addr, dir: dir}
	s.cmd = exec.Command(bin, "--config.file="+confPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1h", "--log.level=warn")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("promtest: start prometheus: %v", err)
	}
	t.Cleanup(func() {
		s.stop()
		logf.Close()
	})
	s.waitReady(t, len(targets))
	return s
}

// waitReady waits until /-/ready answers 200 and every target has been scraped up.
func (s *Server) waitReady(t testing.TB, targets int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if s.get("/-/ready") && (targets == 0 || s.upTargets() >= targets) {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling a child process' readiness; nothing to wait on
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "prometheus.log"))
	t.Fatalf("promtest: prometheus at %s not ready with %d target(s) up within 30s; log:\n%s", s.URL, targets, log)
}

func (s *Server) get(path string) bool {
	resp, err := http.Get(s.URL + path)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// upTargets counts the targets whose last scrape succeeded.
func (s *Server) upTargets() int {
	resp, err := http.Get(s.URL + "/api/v1/targets?state=active")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.WriteString(string(buf[:n]))
		if err != nil {
			break
		}
	}
	return strings.Count(b.String(), `"health":"up"`)
}

func (s *Server) stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// WaitScrapes waits until Prometheus has scraped n more times than when it was called (so a
// change of an App's rates is in its data), or fails the test after a while.
func (s *Server) WaitScrapes(t testing.TB, app *App, n int) {
	t.Helper()
	target := app.Scrapes() + int64(n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n+10)*ScrapeInterval)
	defer cancel()
	for app.Scrapes() < target {
		select {
		case <-ctx.Done():
			t.Fatalf("promtest: prometheus scraped %d times, want %d", app.Scrapes(), target)
		case <-app.scraped:
		}
	}
}
