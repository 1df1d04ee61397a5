package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// runWrite runs script as a write callers rely on: confirmed by replicas when the store
// has a Confirmer (Options.Confirm), else plainly. An unconfirmed write's command carries
// an error wrapping redisack.ErrUnconfirmed, which runs.Fail turns into ErrUnavailable.
func (d *driver) runWrite(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	err := d.ack.Write(ctx, d.rdb, keys[0], func(c redis.Cmdable) error {
		cmd = script.Run(ctx, c, keys, args...)
		return cmd.Err()
	})
	if err != nil && (cmd == nil || cmd.Err() == nil) {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
	}
	return cmd
}
