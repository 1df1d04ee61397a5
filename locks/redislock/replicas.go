package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultReplicaTimeout bounds each WAIT for Options.MinReplicas when Options names none.
const DefaultReplicaTimeout = time.Second

// Replica-acknowledged grants (Options.MinReplicas).
//
// Redis replicates asynchronously: a master that dies right after a grant may take the grant
// with it, and the replica promoted in its place then hands the key to someone else while
// the first holder still believes in its lease. With MinReplicas N, a grant and a renewal
// count only once WAIT N has confirmed that N replicas have them: the script and the WAIT
// run on one connection to the key's master (WAIT waits for that connection's writes), and
// a grant not confirmed within ReplicaTimeout is released and reported as ErrUnavailable,
// so the Locker retries it within the acquire budget. A failover that promotes one of the
// replicas that confirmed (Sentinel and Cluster promote the most up-to-date replica they
// can reach) keeps the lease. WAIT does not make Redis strongly consistent: a failover to a
// replica that had not confirmed, or a stale replica promoted by hand, can still lose it.

// errUnconfirmed is returned by runConfirmed when fewer replicas than MinReplicas confirmed
// the write within ReplicaTimeout.
var errUnconfirmed = errors.New("not confirmed by enough replicas")

// runScript runs script on keys. Without MinReplicas it is script.Run on the driver's
// client. With it, script runs on one connection to the master of keys[0] and, when
// confirm says the reply is a write that must be confirmed, WAIT follows on that
// connection; the reply is returned with an error wrapping errUnconfirmed when too few
// replicas confirmed it in time.
func (d *Driver) runScript(ctx context.Context, script *redis.Script, keys []string, args []any, confirm func([]any) bool) ([]any, error) {
	if d.minReplicas == 0 {
		return script.Run(ctx, d.client, keys, args...).Slice()
	}
	node, err := d.masterFor(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	conn := node.Conn()
	defer conn.Close()
	res, err := script.Run(ctx, conn, keys, args...).Slice()
	if err != nil {
		d.reloadOnRedirect(ctx, err)
		return nil, err
	}
	if !confirm(res) {
		return res, nil
	}
	need, err := d.replicasNeeded(ctx)
	if err != nil {
		return nil, err
	}
	n, err := conn.Wait(ctx, need, d.replicaTimeout).Result()
	if err != nil {
		return nil, err
	}
	if int(n) < need {
		d.ack.Missed()
		return res, fmt.Errorf("%w: %d of %d replicas within %s", errUnconfirmed, n, need, d.replicaTimeout)
	}
	return res, nil
}

// replicasNeeded is how many replicas a WAIT needs: MinReplicas, or what Options.Confirm
// says (on Sentinel, every replica the sentinels list alive) when that is more.
func (d *Driver) replicasNeeded(ctx context.Context) (int, error) {
	if d.ack == nil {
		return d.minReplicas, nil
	}
	n, err := d.ack.Need(ctx)
	if err != nil {
		return 0, err
	}
	return max(d.minReplicas, n), nil
}

// masterFor returns the client of the master that serves key: the driver's own client for
// one server or Sentinel (go-redis' failover client follows the master), the slot's master
// of a Cluster.
func (d *Driver) masterFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := d.client.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	default:
		return nil, fmt.Errorf("min_replicas needs a single-server, Sentinel or Cluster client, not %T", d.client)
	}
}

// reloadOnRedirect makes a Cluster client reload its slot map when a node answered that it
// no longer serves the slot (after a failover): runScript bypasses the client's own
// redirect handling, so it must tell the client.
func (d *Driver) reloadOnRedirect(ctx context.Context, err error) {
	c, ok := d.client.(*redis.ClusterClient)
	if !ok {
		return
	}
	for _, p := range []string{"MOVED", "ASK", "READONLY", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, p) {
			c.ReloadState(ctx)
			return
		}
	}
}
