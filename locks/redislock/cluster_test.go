package redislock

import (
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

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/lockstest"
)

// TestConformanceCluster runs the conformance suite on a three-master Redis Cluster, so
// that the hash tags, the cross-master SCANs of List and Audit, and the pub/sub of a
// cluster are exercised for real: a script touching keys of two slots would fail here
// with CROSSSLOT.
func TestConformanceCluster(t *testing.T) {
	addrs, nodes := startCluster(t, 3)
	url := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	lockstest.Run(t, lockstest.Backend{
		Open: func(t *testing.T, space string) locks.Driver {
			d, err := Open(url, Options{Prefix: space + ":"})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		// Every master paused at once, for far less than the cluster's node timeout, so no
		// failover starts: the whole cluster simply stops answering for a while.
		Stall: func(t *testing.T) func() {
			signal := func(sig os.Signal) {
				for _, p := range nodes {
					if err := p.Signal(sig); err != nil {
						t.Errorf("signal %v to cluster node %d: %v", sig, p.Pid, err)
					}
				}
			}
			signal(syscall.SIGSTOP)
			return func() { signal(syscall.SIGCONT) }
		},
	})

	// List and Audit see keys on every master.
	d, err := Open(url, Options{Prefix: "spread:"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := t.Context()
	const keys = 12
	for i := range keys {
		key := fmt.Sprintf("coolify:svc%d", i)
		info, err := d.TryAcquire(ctx, grant(key, fmt.Sprintf("p#%d/s", i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.ForceRelease(ctx, locks.ForceRequest{Key: key, Fence: info.Fence, Reason: "spread", LockDelay: -1}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.TryAcquire(ctx, grant(key, fmt.Sprintf("p#%d/s", i))); err != nil {
			t.Fatal(err)
		}
	}
	list, err := d.List(ctx, "coolify:")
	if err != nil || len(list) != keys {
		t.Fatalf("list over the cluster: got %d leases, %v; want %d", len(list), err, keys)
	}
	audit, err := d.Audit(ctx, 0)
	if err != nil || len(audit) != keys {
		t.Fatalf("audit over the cluster: got %d entries, %v; want %d", len(audit), err, keys)
	}
}

// startCluster starts n redis-server processes in cluster mode on loopback, gives each an
// equal share of the slots, joins them and waits until the cluster is up. It returns the
// nodes' addresses and processes.
func startCluster(t *testing.T, n int) ([]string, []*os.Process) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found in PATH: run `make test` (it installs it) or `apt-get install -y redis-server`"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	addrs := make([]string, n)
	procs := make([]*os.Process, n)
	clients := make([]*redis.Client, n)
	for i := range n {
		port := clusterPort(t)
		dir := t.TempDir()
		cmd := exec.Command(bin,
			"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
			"--logfile", filepath.Join(dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		addrs[i], procs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd.Process
		clients[i] = redis.NewClient(&redis.Options{Addr: addrs[i]})
		t.Cleanup(func() { _ = clients[i].Close() })
		for clients[i].Ping(ctx).Err() != nil {
			if ctx.Err() != nil {
				t.Fatalf("cluster node %s did not answer PING", addrs[i])
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	const slots = 16384
	for i, c := range clients {
		first, last := i*slots/n, (i+1)*slots/n-1
		if err := c.ClusterAddSlotsRange(ctx, first, last).Err(); err != nil {
			t.Fatalf("assign slots to %s: %v", addrs[i], err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(addrs[0])
			p, _ := strconv.Atoi(port)
			if err := c.ClusterMeet(ctx, host, strconv.Itoa(p)).Err(); err != nil {
				t.Fatalf("join %s: %v", addrs[i], err)
			}
		}
	}
	for _, c := range clients {
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("cluster not up within 30s: %s", info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return addrs, procs
}

// clusterPort finds a free port whose cluster bus port (port+10000) is free as well.
func clusterPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		l.Close()
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}
