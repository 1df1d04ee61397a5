// Package promtest starts a real Prometheus server for a test (the prometheus binary from
// PATH, Debian's package; scripts/ensure-deps.sh installs it) and provides App, a small
// service whose request counters, error rate and latency the test sets, for it to scrape.
package promtest

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	log *os.File
}

// ErrNotInstalled is Run's error when no prometheus binary is in PATH.
var ErrNotInstalled = errors.New("prometheus not found in PATH: run `make deps` (it installs it) or `apt-get install -y prometheus`")

// Start starts Prometheus (Run) for a test and stops it when the test ends. Without the
// binary it skips the test, or fails it in CI.
func Start(t testing.TB, targets ...string) *Server {
	t.Helper()
	s, err := Run(targets...)
	if errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("promtest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Run starts Prometheus on a free loopback port with a temporary config and data
// directory, scraping each target (host:port) every ScrapeInterval, and waits until it is
// ready and has scraped every target once. Close stops it.
func Run(targets ...string) (*Server, error) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, ErrNotInstalled
	}
	dir, err := os.MkdirTemp("", "promtest-")
	if err != nil {
		return nil, err
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	conf := fmt.Sprintf("global:\n  scrape_interval: %s\n  evaluation_interval: %s\nscrape_configs:\n  - job_name: app\n    static_configs:\n      - targets: [%s]\n",
		ScrapeInterval, ScrapeInterval, strings.Join(quoted, ", "))
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{URL: "http://" + addr, dir: dir, log: logf}
	s.cmd = exec.Command(bin, "--config.file="+confPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1h", "--log.level=warn")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	if err := s.waitReady(len(targets)); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// waitReady waits until /-/ready answers 200 and every target has been scraped up.
func (s *Server) waitReady(targets int) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if s.get("/-/ready") && (targets == 0 || s.upTargets() >= targets) {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // polling a child process' readiness; nothing to wait on
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "prometheus.log"))
	return fmt.Errorf("prometheus at %s not ready with %d target(s) up within 30s; log:\n%s", s.URL, targets, log)
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
	b, _ := io.ReadAll(resp.Body)
	return strings.Count(string(b), `"health":"up"`)
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	if s.cmd.Process != nil {
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
	s.log.Close()
	os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitScrapes waits until Prometheus has scraped app n more times than when it was called
// (so a change of its rates is in the data), or fails the test after a while.
func (s *Server) WaitScrapes(t testing.TB, app *App, n int) {
	t.Helper()
	if err := app.WaitScrapes(context.Background(), n); err != nil {
		t.Fatalf("promtest: %v", err)
	}
}
