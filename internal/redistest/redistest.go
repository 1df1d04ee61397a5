// Package redistest starts private redis-servers for a test: from PATH, on free loopback
// ports, in the test's temp dir, with no persistence. Start runs one server; StartSentinel a
// master with replicas watched by sentinels (topology.go); StartCluster a Cluster with
// replicas (cluster.go). In CI (CI=true) a missing redis-server fails the test; elsewhere it
// skips with a message saying how to install it.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a running redis-server owned by one test.
type Server struct {
	Addr string // host:port
	dir  string
	port int
	cmd  *exec.Cmd
	t    testing.TB
	// conf, when set, is the config file given first on the command line (sentinels need
	// one they can rewrite); args are appended after the common arguments.
	conf string
	args []string
	// rdb and sentinel are admin clients, made on first use (topology.go).
	rdb      *redis.Client
	sentinel *redis.SentinelClient
}

// URL is a redis:// URL for the server.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Start starts a redis-server and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return startServer(t, freePort(t), "", nil)
}

// binary finds redis-server in PATH, or skips (fails in CI) the test.
func binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found in PATH: run `make test` (it installs it) or `apt-get install -y redis-server`"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// startServer starts redis-server on port with the config file conf (when set) and the
// extra arguments, and stops it when the test ends.
func startServer(t testing.TB, port int, conf string, args []string) *Server {
	t.Helper()
	bin := binary(t)
	s := &Server{dir: t.TempDir(), port: port, t: t, args: args}
	if conf != "" {
		s.conf = filepath.Join(s.dir, "redis.conf")
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	s.start(bin)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start(bin string) {
	s.t.Helper()
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	args = append(args,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--dir", s.dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "yes",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	s.cmd = exec.Command(bin, append(args, s.args...)...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if err := ping(s.Addr); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.Stop()
			s.t.Fatalf("redis-server on %s did not answer PING within 10s; log:\n%s", s.Addr, log)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Stop kills the server with SIGKILL, as kill -9 does (idempotent). Its data is lost: the
// server keeps nothing on disk.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause freezes the server process (SIGSTOP): connections stay open but nothing is
// answered, and keys whose expiry passes meanwhile are expired when it resumes, as after a
// long stall of a real server. Resume undoes it; Stop works on a paused server too.
func (s *Server) Pause() {
	s.t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		s.t.Fatal("redistest: Pause of a stopped server")
	}
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("redistest: pause: %v", err)
	}
}

// Resume continues a paused server (SIGCONT) with its data intact.
func (s *Server) Resume() {
	s.t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		s.t.Fatal("redistest: Resume of a stopped server")
	}
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("redistest: resume: %v", err)
	}
}

// Restart stops the server and starts an empty one on the same port (with the same role:
// a replica comes back as a replica of the master it was started with).
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start(binary(s.t))
}

// ping sends an inline PING and waits for +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
