package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// redisServer is the private redis-server of one benchmark run.
type redisServer struct {
	addr string
	dir  string
	cmd  *exec.Cmd
}

// startRedis starts redis-server from PATH on a free loopback port in a temporary
// directory, without persistence, and waits until it answers PING.
func startRedis(ctx context.Context) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found in PATH: install it (apt-get install -y redis-server) or run `make bench-locks`, which does")
	}
	dir, err := os.MkdirTemp("", "benchlocks-redis-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	s.cmd = exec.Command(bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.command("PING"); err == nil {
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within 10s", s.addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *redisServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	os.RemoveAll(s.dir)
}

// command sends one inline command on a fresh connection and returns the raw reply.
func (s *redisServer) command(cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	switch {
	case strings.HasPrefix(line, "+"), strings.HasPrefix(line, ":"):
		return strings.TrimSpace(line[1:]), nil
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("reply to %s: %q", cmd, line)
}

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct {
	calls int64
	usec  int64 // time spent in the command; a script's includes the commands it calls
}

// commandStats returns every command's line of INFO commandstats, by name. Commands that
// scripts call count too.
func (s *redisServer) commandStats() (map[string]cmdStat, error) {
	info, err := s.command("INFO commandstats")
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	stats := make(map[string]cmdStat)
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			var dst *int64
			switch k {
			case "calls":
				dst = &st.calls
			case "usec":
				dst = &st.usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("INFO commandstats line %q: %w", line, err)
			}
			*dst = n
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return stats, nil
}
