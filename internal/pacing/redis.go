package pacing

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the Redis key prefix when Options.Prefix is empty.
const DefaultPrefix = "orch:pace:"

// RedisTimeout bounds one take from the Redis bucket (a round trip takes well under 1 ms);
// after a failure the pacer uses its local bucket for RedisRetryAfter.
const (
	RedisTimeout    = 250 * time.Millisecond
	RedisRetryAfter = time.Second
)

// NewRedisPool returns a pool whose budgets live in Redis: every daemon using rdb with the
// same prefix waits on the same bucket per instance and token. rdb must have
// ContextTimeoutEnabled (redislock.NewClient's clients do). Errors: an invalid budget.
//
// While Redis does not answer (within RedisTimeout), each pacer falls back to a bucket of the
// same shape in this process for RedisRetryAfter before it asks Redis again, so calls (a
// cancel when a lease is lost in a Redis stall, a restore) are still made at once and still
// paced, only no longer shared with other daemons; a 429 that may then come is retried after
// its Retry-After.
//
// The bucket is this package's own Lua script rather than github.com/go-redis/redis_rate: the
// priority reserve needs "take a token only if more than keep remain" in one atomic step on
// one shared bucket, which redis_rate's Allow cannot express (two buckets would split or
// double the budget), and the script is a dozen lines where redis_rate would be a new
// dependency.
func NewRedisPool(rdb redis.UniversalClient, b Budget, o Options) (*Pool, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	p, err := newPool(b, o, func(key string, s Shape) bucket {
		return &redisBucket{rdb: rdb, key: o.Prefix + key, shape: s, fallback: newLocalBucket(s)}
	})
	if p != nil {
		p.rdb = rdb
	}
	return p, err
}

// takeScript is a token bucket on Redis's clock (so daemons' clocks need not agree).
// KEYS[1]: the bucket, a hash {tokens, ts (µs), hold (µs: no token before it)}. ARGV: refill
// per µs, burst, keep. Returns 0 when a token was taken, else the µs until more than keep
// tokens will be there (or the hold ends).
var takeScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local keep = tonumber(ARGV[3])
local s = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'hold')
local hold = tonumber(s[3])
if hold ~= nil and hold > now then
  return math.ceil(hold - now)
end
local tokens = tonumber(s[1])
local ts = tonumber(s[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate)
  ts = now
end
local wait = 0
if tokens >= keep + 1 then
  tokens = tokens - 1
else
  wait = math.max(1, math.ceil((keep + 1 - tokens) / rate))
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate / 1000) + 1000)
return wait
`)

// holdScript holds the bucket of takeScript: no token is taken for ARGV[1] µs from now on
// Redis's clock, unless a hold that ends later is there; the key lives at least that long.
var holdScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local hold = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[1], 'hold'))
if cur == nil or cur < hold then
  redis.call('HSET', KEYS[1], 'hold', string.format('%.0f', hold))
  local ttl = math.ceil((hold - now) / 1000) + 1000
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
end
return 0
`)

type redisBucket struct {
	rdb      redis.UniversalClient
	key      string
	shape    Shape
	fallback *localBucket // while Redis fails
	// downUntil (Unix ns) is when to ask Redis again after a failure.
	downUntil atomic.Int64
}

func (b *redisBucket) take(ctx context.Context, keep int) (time.Duration, error) {
	if time.Now().UnixNano() < b.downUntil.Load() {
		return b.fallback.take(ctx, keep)
	}
	perMicro := strconv.FormatFloat(b.shape.PerSecond/1e6, 'g', -1, 64)
	rctx, cancel := context.WithTimeout(ctx, RedisTimeout)
	defer cancel()
	us, err := takeScript.Run(rctx, b.rdb, []string{b.key}, perMicro, b.shape.Burst, keep).Int64()
	if err != nil {
		if ctx.Err() != nil {
			return 0, err
		}
		b.downUntil.Store(time.Now().Add(RedisRetryAfter).UnixNano())
		return b.fallback.take(ctx, keep)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// hold holds the bucket in Redis, for every daemon sharing it, and the local fallback, which
// this daemon uses while Redis does not answer. When Redis does not take the hold, it holds
// this daemon only; the others meet the server's 429 themselves and hold then.
func (b *redisBucket) hold(ctx context.Context, d time.Duration) {
	b.fallback.hold(ctx, d)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RedisTimeout)
	defer cancel()
	_ = holdScript.Run(rctx, b.rdb, []string{b.key}, d.Microseconds()).Err()
}
