package redislock

import (
	"context"
	"net"

	"github.com/redis/go-redis/v9"
)

// NewClient returns a go-redis client for a redis://, rediss://, unix://, redis+cluster://
// or rediss+cluster:// URL (a master_name query parameter selects Sentinel), the same way
// Open does, so the daemon can share one client between the lock driver and the run store.
// Errors never repeat the URL (it may hold a password).
func NewClient(rawURL string) (redis.UniversalClient, error) { return newClient(rawURL) }

// reloadOnDialError makes a Cluster client reload its slot map when it cannot dial a node.
// Without it go-redis keeps sending a killed master's slots to that address long after its
// replica took over (more than 30 s in TestClusterMasterKilledInPhase2); with it the next
// command after the takeover finds the new master.
type reloadOnDialError struct{ c *redis.ClusterClient }

func (h reloadOnDialError) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			h.c.ReloadState(ctx)
		}
		return conn, err
	}
}

func (reloadOnDialError) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (reloadOnDialError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
