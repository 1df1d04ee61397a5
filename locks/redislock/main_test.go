package redislock

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// quietRedis drops go-redis' own log lines: the fault tests make it report every refused
// dial, which would bury the test output. The driver's behaviour is asserted, not logged.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{})
	os.Exit(m.Run())
}
