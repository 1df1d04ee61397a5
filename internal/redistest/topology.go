package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinels of StartSentinel monitor the master by.
const MasterName = "orch"

// SentinelOptions shape a Sentinel topology; zero values take the defaults.
type SentinelOptions struct {
	Replicas  int // replicas of the master (default 2)
	Sentinels int // sentinel processes (default 3); the quorum is a majority of them
	// DownAfter is how long the master must not answer before a sentinel thinks it down
	// (default 5s, longer than a conformance stall; failover tests use 1s).
	DownAfter time.Duration
	// ReplicaLink, when set, returns the address replica i replicates the master (at
	// master) from: a test puts a fault proxy there to make a replica lag. Once a failover
	// reconfigures the replicas, they replicate the new master directly. Sentinels "fix" a
	// replica that replicates another address than the master's once failover-timeout has
	// passed, so with a ReplicaLink the failover timeout is 30s instead of 4 × DownAfter:
	// the links hold for the first 30s of the test.
	ReplicaLink func(i int, master string) string
	// MinReplicasToWrite sets the data nodes' min-replicas-to-write (with
	// min-replicas-max-lag 2): a master that lost its replicas — the old master after a
	// forced failover, whose replicas the sentinels moved to the new one — refuses writes
	// instead of accepting what the failover will throw away. 0 leaves it off.
	MinReplicasToWrite int
}

// Sentinel is a master with replicas, watched by sentinels, all on loopback. Nodes[0] is
// the first master; after a failover Master names the current one.
type Sentinel struct {
	Nodes     []*Server // the data nodes: Nodes[0] starts as master, the others as its replicas
	Sentinels []*Server
	t         testing.TB
}

// StartSentinel starts a master, its replicas and the sentinels, and waits until every
// sentinel knows every replica and every other sentinel, so that a failover can start at
// once. Everything is stopped when the test ends.
func StartSentinel(t testing.TB, o SentinelOptions) *Sentinel {
	t.Helper()
	if o.Replicas == 0 {
		o.Replicas = 2
	}
	if o.Sentinels == 0 {
		o.Sentinels = 3
	}
	if o.DownAfter == 0 {
		o.DownAfter = 5 * time.Second
	}
	s := &Sentinel{t: t}
	// No delay before a full sync: a replica moved to a new master is in sync at once.
	common := []string{"--repl-diskless-sync-delay", "0"}
	if o.MinReplicasToWrite > 0 {
		common = append(common, "--min-replicas-to-write", strconv.Itoa(o.MinReplicasToWrite), "--min-replicas-max-lag", "2")
	}
	master := startServer(t, freePort(t), "", common)
	s.Nodes = append(s.Nodes, master)
	host, port, _ := net.SplitHostPort(master.Addr)
	for i := range o.Replicas {
		rhost, rport := host, port
		if o.ReplicaLink != nil {
			rhost, rport, _ = net.SplitHostPort(o.ReplicaLink(i, master.Addr))
		}
		s.Nodes = append(s.Nodes, startServer(t, freePort(t), "", append([]string{"--replicaof", rhost, rport}, common...)))
	}
	failoverTimeout := 4 * o.DownAfter
	if o.ReplicaLink != nil {
		failoverTimeout = 30 * time.Second
	}
	conf := fmt.Sprintf("sentinel monitor %s %s %s %d\n"+
		"sentinel down-after-milliseconds %[1]s %[5]d\n"+
		"sentinel failover-timeout %[1]s %[6]d\n"+
		"sentinel parallel-syncs %[1]s %[7]d\n",
		MasterName, host, port, o.Sentinels/2+1, o.DownAfter.Milliseconds(), failoverTimeout.Milliseconds(), o.Replicas)
	for range o.Sentinels {
		s.Sentinels = append(s.Sentinels, startServer(t, freePort(t), conf, []string{"--sentinel"}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, sn := range s.Sentinels {
		waitUntil(ctx, t, "sentinel "+sn.Addr+" to know every replica and sentinel", func() (bool, string) {
			m, err := sentinelClient(sn).Master(ctx, MasterName).Result()
			if err != nil {
				return false, err.Error()
			}
			ok := m["num-slaves"] == strconv.Itoa(o.Replicas) && m["num-other-sentinels"] == strconv.Itoa(o.Sentinels-1)
			return ok, fmt.Sprintf("%v", m)
		})
	}
	for _, r := range s.Nodes[1:] {
		waitUntil(ctx, t, "replica "+r.Addr+" to be in sync", func() (bool, string) {
			info, err := r.client().Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "master_link_status:up"), info
		})
	}
	// Every replica acknowledges a write: replication flows, not just the link is up.
	waitUntil(ctx, t, "every replica to acknowledge a write", func() (bool, string) {
		conn := master.client().Conn()
		defer conn.Close()
		if err := conn.Set(ctx, "redistest:replicated", "1", 0).Err(); err != nil {
			return false, err.Error()
		}
		n, err := conn.Wait(ctx, o.Replicas, time.Second).Result()
		return err == nil && int(n) == o.Replicas, fmt.Sprintf("%d acknowledged, %v", n, err)
	})
	return s
}

// URL is the Sentinel URL of the topology (redis://sentinel/0?master_name=…&addr=…), as
// the daemon's redis_url takes it.
func (s *Sentinel) URL() string {
	u := "redis://" + s.Sentinels[0].Addr + "/0?master_name=" + MasterName
	for _, sn := range s.Sentinels[1:] {
		u += "&addr=" + sn.Addr
	}
	return u
}

// Master returns the node every sentinel names as master right now, failing the test if
// they disagree or name none of Nodes.
func (s *Sentinel) Master() *Server {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr, err := s.agreedMaster(ctx)
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	return s.node(addr)
}

// Replicas returns the nodes that are not the current master.
func (s *Sentinel) Replicas() []*Server {
	s.t.Helper()
	m := s.Master()
	var out []*Server
	for _, n := range s.Nodes {
		if n != m {
			out = append(out, n)
		}
	}
	return out
}

// Failover asks a sentinel to fail the master over (SENTINEL FAILOVER) and waits until a
// replica is the new master; it returns the new master.
func (s *Sentinel) Failover() *Server {
	s.t.Helper()
	old := s.Master()
	if err := sentinelClient(s.Sentinels[0]).Failover(context.Background(), MasterName).Err(); err != nil {
		s.t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	return s.WaitNewMaster(old, 30*time.Second)
}

// WaitNewMaster waits until every sentinel names a master other than old and that node
// answers as a master and takes a write (under min-replicas-to-write, only once a replica
// has synced with it: until then it answers NOREPLICAS), and returns it. The write is to
// probeKey.
func (s *Sentinel) WaitNewMaster(old *Server, timeout time.Duration) *Server {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var next *Server
	waitUntil(ctx, s.t, "a new master after "+old.Addr, func() (bool, string) {
		addr, err := s.agreedMaster(ctx)
		if err != nil {
			return false, err.Error()
		}
		if addr == old.Addr {
			return false, "sentinels still name " + addr
		}
		next = s.node(addr)
		if next == nil {
			return false, "sentinels name an unknown node " + addr
		}
		role, err := next.client().Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			return false, fmt.Sprintf("%s answers ROLE %v %v", addr, role, err)
		}
		if err := next.client().Set(ctx, probeKey, addr, 0).Err(); err != nil {
			return false, fmt.Sprintf("%s refuses a write: %v", addr, err)
		}
		return true, ""
	})
	return next
}

// probeKey is the key WaitNewMaster writes to learn that a new master serves writes.
const probeKey = "redistest:probe"

// agreedMaster asks every live sentinel for the master's address; they must agree.
func (s *Sentinel) agreedMaster(ctx context.Context) (string, error) {
	var addr string
	for _, sn := range s.Sentinels {
		a, err := sentinelClient(sn).GetMasterAddrByName(ctx, MasterName).Result()
		if err != nil {
			return "", fmt.Errorf("sentinel %s: %w", sn.Addr, err)
		}
		got := net.JoinHostPort(a[0], a[1])
		if addr != "" && got != addr {
			return "", fmt.Errorf("sentinels disagree on the master: %s and %s", addr, got)
		}
		addr = got
	}
	return addr, nil
}

func (s *Sentinel) node(addr string) *Server {
	for _, n := range s.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// client returns a client for the server, closed when the test ends.
func (s *Server) client() *redis.Client {
	if s.rdb == nil {
		s.rdb = redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		s.t.Cleanup(func() { _ = s.rdb.Close() })
	}
	return s.rdb
}

// Client returns a go-redis client talking to this one server (not following failovers),
// closed when the test ends: for tests that look at or change one node directly.
func (s *Server) Client() *redis.Client { return s.client() }

func sentinelClient(s *Server) *redis.SentinelClient {
	if s.sentinel == nil {
		s.sentinel = redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		s.t.Cleanup(func() { _ = s.sentinel.Close() })
	}
	return s.sentinel
}

// waitUntil polls cond (state of other processes, which offer no signal) every 20ms until
// it holds, failing the test with cond's last word when ctx ends first.
func waitUntil(ctx context.Context, t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: timed out waiting for %s; last: %s", what, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
