package redislock

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
)

// TestSentinelURL opens the driver through a Sentinel URL and takes, waits for and
// releases a lock through the master the sentinel names.
func TestSentinelURL(t *testing.T) {
	master := redistest.Start(t)
	sentinel := startSentinel(t, master.Addr)

	d, err := Open("redis://"+sentinel+"/0?master_name=orch", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := t.Context()
	g := grant("coolify:s", "p#1/s")
	if _, err := d.TryAcquire(ctx, g); err != nil {
		t.Fatalf("acquire through sentinel: %v", err)
	}
	sub, err := d.Subscribe(ctx, g.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := d.Release(ctx, g.Key, g.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C():
	case <-time.After(5 * time.Second):
		t.Fatal("no release signal through sentinel within 5s")
	}

	// The lease is on the master the sentinel named.
	direct := New(redis.NewClient(&redis.Options{Addr: master.Addr}), Options{})
	defer direct.Close()
	if _, err := d.TryAcquire(ctx, g); err != nil {
		t.Fatal(err)
	}
	if info, err := direct.Get(ctx, g.Key); err != nil || info.Holder != "p#1/s" {
		t.Fatalf("lease on the master: got %+v, %v", info, err)
	}
}

// startSentinel runs redis-server in sentinel mode watching master as "orch".
func startSentinel(t *testing.T, master string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err) // redistest.Start found it a moment ago
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	host, mport, _ := net.SplitHostPort(master)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := "bind 127.0.0.1\nport " + strconv.Itoa(port) + "\ndir " + dir + "\n" +
		"sentinel monitor orch " + host + " " + mport + " 1\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel", "--logfile", filepath.Join(dir, "sentinel.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sentinel: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		if a, err := sc.GetMasterAddrByName(ctx, "orch").Result(); err == nil && len(a) == 2 {
			return addr
		}
		if ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			t.Fatalf("sentinel on %s did not name the master within 10s; log:\n%s", addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
