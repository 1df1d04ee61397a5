package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ClusterOptions shape a Cluster; zero values take the defaults.
type ClusterOptions struct {
	Masters  int // default 3
	Replicas int // replicas per master (default 0)
	// NodeTimeout is the cluster-node-timeout: how long a master must not answer before its
	// replica may take over (default 5s, longer than a conformance stall).
	NodeTimeout time.Duration
}

// Cluster is a Redis Cluster on loopback: the slots split evenly over the masters, each
// with its replicas.
type Cluster struct {
	Nodes []*Server // the masters first, then the replicas
	t     testing.TB
}

// StartCluster starts the nodes in cluster mode, gives each master an equal share of the
// slots, joins them, makes the replicas replicate their masters and waits until the
// cluster is up with every replica in sync. Everything is stopped when the test ends.
func StartCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Masters == 0 {
		o.Masters = 3
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = 5 * time.Second
	}
	c := &Cluster{t: t}
	n := o.Masters * (1 + o.Replicas)
	for range n {
		c.Nodes = append(c.Nodes, startServer(t, clusterPort(t), "", []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10),
			"--repl-diskless-sync-delay", "0"}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const slots = 16384
	host, port, _ := net.SplitHostPort(c.Nodes[0].Addr)
	// Distinct config epochs before the nodes meet, as redis-cli --cluster create gives them.
	// Left at 0, the masters resolve the collision among themselves by bumping epochs after
	// the meet; a replica that has not heard its master's new epoch when the master dies asks
	// for the master's slots at the old one and every vote is denied ("slot epoch (3) >
	// reqEpoch (0)"), forever: seen as a replica never promoted in 1 of 40 kills.
	for i, node := range c.Nodes {
		if err := node.client().Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatalf("redistest: config epoch of %s: %v", node.Addr, err)
		}
	}
	for i, node := range c.Nodes {
		if i < o.Masters {
			first, last := i*slots/o.Masters, (i+1)*slots/o.Masters-1
			if err := node.client().ClusterAddSlotsRange(ctx, first, last).Err(); err != nil {
				t.Fatalf("redistest: assign slots to %s: %v", node.Addr, err)
			}
		}
		if i > 0 {
			if err := node.client().ClusterMeet(ctx, host, port).Err(); err != nil {
				t.Fatalf("redistest: join %s: %v", node.Addr, err)
			}
		}
	}
	for _, node := range c.Nodes {
		waitUntil(ctx, t, "node "+node.Addr+" to know every node", func() (bool, string) {
			info, err := node.client().ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)), info
		})
	}
	for i, r := range c.Nodes[o.Masters:] {
		master := c.Nodes[i%o.Masters]
		id, err := master.client().Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("redistest: id of %s: %v", master.Addr, err)
		}
		waitUntil(ctx, t, "replica "+r.Addr+" to replicate "+master.Addr, func() (bool, string) {
			err := r.client().ClusterReplicate(ctx, id).Err()
			return err == nil, fmt.Sprint(err)
		})
	}
	for _, node := range c.Nodes {
		waitUntil(ctx, t, "the cluster to be up on "+node.Addr, func() (bool, string) {
			info, err := node.client().ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false, info
			}
			repl, err := node.client().Info(ctx, "replication").Result()
			if err != nil {
				return false, err.Error()
			}
			if strings.Contains(repl, "role:slave") {
				return strings.Contains(repl, "master_link_status:up"), repl
			}
			return strings.Contains(repl, fmt.Sprintf("connected_slaves:%d", o.Replicas)), repl
		})
	}
	if o.Replicas > 0 {
		// Every master's replicas acknowledge a write: replication flows, not just the link.
		// The write matters: after a diskless sync the master holds its command stream back
		// until the replica's first REPLCONF ACK (up to a second later), and a WAIT with
		// nothing written on its connection is answered by that link at offset 0, so a
		// master killed in that second took every write with it (seen in
		// TestClusterMasterKilledInPhase2: the promoted replica had none of the runs).
		for i, m := range c.Nodes[:o.Masters] {
			key := c.keyIn(ctx, m, i*slots/o.Masters, (i+1)*slots/o.Masters-1)
			waitUntil(ctx, t, "the replicas of "+m.Addr+" to acknowledge a write", func() (bool, string) {
				conn := m.client().Conn()
				defer conn.Close()
				if err := conn.Set(ctx, key, "1", 0).Err(); err != nil {
					return false, err.Error()
				}
				n, err := conn.Wait(ctx, o.Replicas, time.Second).Result()
				return err == nil && int(n) == o.Replicas, fmt.Sprintf("%d acknowledged, %v", n, err)
			})
		}
	}
	return c
}

// keyIn returns a key whose slot lies in first..last, as node computes slots.
func (c *Cluster) keyIn(ctx context.Context, node *Server, first, last int) string {
	c.t.Helper()
	for i := 0; ; i++ {
		key := "redistest:replicated:{" + strconv.Itoa(i) + "}"
		slot, err := node.client().ClusterKeySlot(ctx, key).Result()
		if err != nil {
			c.t.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
		}
		if int64(first) <= slot && slot <= int64(last) {
			return key
		}
	}
}

// URL is the cluster URL naming every node (redis+cluster://…?addr=…), as the daemon's
// redis_url takes it.
func (c *Cluster) URL() string {
	rest := make([]string, 0, len(c.Nodes)-1)
	for _, n := range c.Nodes[1:] {
		rest = append(rest, "addr="+n.Addr)
	}
	return "redis+cluster://" + c.Nodes[0].Addr + "?" + strings.Join(rest, "&")
}

// MasterOf returns the node that serves key's slot now, as that node itself says.
func (c *Cluster) MasterOf(key string) *Server {
	c.t.Helper()
	ctx := context.Background()
	slot, err := c.Nodes[0].client().ClusterKeySlot(ctx, key).Result()
	if err != nil {
		c.t.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
	}
	for _, n := range c.Nodes {
		//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; the tests run on 6.2 too (scripts/ensure-deps.sh)
		ranges, err := n.client().ClusterSlots(ctx).Result()
		if err != nil {
			continue // a dead node
		}
		for _, r := range ranges {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				if m := c.node(r.Nodes[0].Addr); m != nil {
					return m
				}
			}
		}
	}
	c.t.Fatalf("redistest: no node serves the slot of %q", key)
	return nil
}

// ReplicaOf returns a replica of master.
func (c *Cluster) ReplicaOf(master *Server) *Server {
	c.t.Helper()
	ctx := context.Background()
	for _, n := range c.Nodes {
		info, err := n.client().Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") &&
			strings.Contains(info, "master_port:"+strconv.Itoa(master.port)+"\r\n") {
			return n
		}
	}
	c.t.Fatalf("redistest: %s has no replica", master.Addr)
	return nil
}

// Failover runs CLUSTER FAILOVER on replica and waits until it serves its slots as a
// master. A manual failover that does not complete in time (its master busy, the machine
// loaded) is dropped by Redis without a word, so the command is sent again every 5 s,
// within 30 s in all.
func (c *Cluster) Failover(replica *Server) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	last := ""
	for ctx.Err() == nil {
		if err := replica.client().ClusterFailover(ctx).Err(); err != nil && ctx.Err() == nil {
			c.t.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica.Addr, err)
		}
		attempt, stop := context.WithTimeout(ctx, 5*time.Second)
		var ok bool
		for ok, last = c.serving(attempt, replica); !ok && attempt.Err() == nil; ok, last = c.serving(attempt, replica) {
			select {
			case <-attempt.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		stop()
		if ok {
			return
		}
	}
	c.t.Fatalf("redistest: timed out waiting for %s to become a master; last: %s", replica.Addr, last)
}

// WaitMaster waits until node is a master serving slots and the cluster is up.
func (c *Cluster) WaitMaster(node *Server, timeout time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	waitUntil(ctx, c.t, node.Addr+" to become a master", func() (bool, string) { return c.serving(ctx, node) })
}

// serving reports whether node is a master and the cluster is up, with what it answered.
func (c *Cluster) serving(ctx context.Context, node *Server) (bool, string) {
	repl, err := node.client().Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(repl, "role:master") {
		return false, repl
	}
	info, err := node.client().ClusterInfo(ctx).Result()
	return err == nil && strings.Contains(info, "cluster_state:ok"), info
}

// Signal sends sig to every node that runs (SIGSTOP/SIGCONT pause and resume the whole
// cluster at once).
func (c *Cluster) Signal(sig os.Signal) {
	c.t.Helper()
	for _, n := range c.Nodes {
		if n.cmd == nil || n.cmd.Process == nil {
			continue
		}
		if err := n.cmd.Process.Signal(sig); err != nil {
			c.t.Errorf("redistest: signal %v to %s: %v", sig, n.Addr, err)
		}
	}
}

// Pause freezes every node at once (SIGSTOP).
func (c *Cluster) Pause() { c.Signal(syscall.SIGSTOP) }

// Resume continues every node (SIGCONT).
func (c *Cluster) Resume() { c.Signal(syscall.SIGCONT) }

func (c *Cluster) node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// clusterPort finds a free port whose cluster bus port (port+10000) is free as well.
func clusterPort(t testing.TB) int {
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
	t.Fatal("redistest: no free port pair for a cluster node")
	return 0
}
