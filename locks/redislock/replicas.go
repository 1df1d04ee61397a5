package redislock

import (
	"context"
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

// runScript runs script on keys, through the driver's Confirmer: without MinReplicas
// plainly on the driver's client; with it on one connection to the master of keys[0], and
// when confirm says the reply is a write that must be confirmed, WAIT follows on that
// connection (redisack.Confirmer.WriteIf). The reply is returned with an error wrapping
// redisack.ErrUnconfirmed when too few replicas confirmed it in time.
func (d *Driver) runScript(ctx context.Context, script *redis.Script, keys []string, args []any, confirm func([]any) bool) ([]any, error) {
	var res []any
	err := d.ack.WriteIf(ctx, d.client, keys[0], func(c redis.Cmdable) (bool, error) {
		var err error
		if res, err = script.Run(ctx, c, keys, args...).Slice(); err != nil {
			d.reloadOnRedirect(ctx, err)
			return false, err
		}
		return confirm(res), nil
	})
	return res, err
}

// reloadOnRedirect makes a Cluster client reload its slot map when a node answered that it
// no longer serves the slot (after a failover): a confirmed write bypasses the client's own
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
