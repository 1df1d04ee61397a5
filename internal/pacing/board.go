package pacing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/coolify"
)

// Board is the look at a Coolify instance's active deployments that the daemons sharing a
// Redis share (it implements coolify.Board): for each point of the waits' tick grid, one
// daemon (the one that takes a short lease first) asks Coolify and stores the answer under
// the instance and token's key; the others read it. A daemon that dies while it holds the
// lease holds up the others' look by at most BoardLease: then one of them takes it. While
// Redis fails, each daemon asks Coolify itself. Inside a daemon, asks for the same point go
// to Redis once.
type Board struct {
	rdb   redis.UniversalClient
	key   string // the stored list: "<point in Unix ms>\n<list>"
	lease string // the fetcher's lease
	local coolify.LocalBoard
}

// Board timings: how long a fetcher's lease lasts, how often the others look for its
// answer, and how long the stored list is kept.
const (
	BoardLease = 5 * time.Second
	boardPoll  = 20 * time.Millisecond
	boardKeep  = 10 * time.Minute
)

// Board returns the shared look at the active deployments of the instance at url used with
// token, or nil (each client keeps its own) when the pool is not on Redis.
func (p *Pool) Board(url, token string) *Board {
	if p == nil || p.rdb == nil {
		return nil
	}
	key := Key(url, token)
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.boards[key]; ok {
		return b
	}
	b := &Board{rdb: p.rdb, key: p.opts.Prefix + "active:" + key, lease: p.opts.Prefix + "active-lease:" + key}
	p.boards[key] = b
	return b
}

// Share returns the list stored for point at or a later one, else fetches it (one daemon
// per point) and stores it.
func (b *Board) Share(ctx context.Context, at time.Time, fetch func(context.Context) ([]byte, error)) ([]byte, error) {
	return b.local.Share(ctx, at, func(ctx context.Context) ([]byte, error) { return b.shareRedis(ctx, at, fetch) })
}

func (b *Board) shareRedis(ctx context.Context, at time.Time, fetch func(context.Context) ([]byte, error)) ([]byte, error) {
	token := newToken()
	for {
		data, found, err := b.stored(ctx, at)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, err
		case err != nil: // Redis fails: ask Coolify alone
			return fetch(ctx)
		case found:
			return data, nil
		}
		rctx, cancel := context.WithTimeout(ctx, RedisTimeout)
		won, err := b.rdb.SetNX(rctx, b.lease, token, BoardLease).Result()
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return fetch(ctx)
		}
		if won {
			return b.fetchAndStore(ctx, at, token, fetch)
		}
		// Another daemon fetches: read its answer when it is there (or take the lease when it
		// is gone, the fetcher having failed or died).
		t := time.NewTimer(boardPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// stored returns the list stored for at or a later point, and whether there is one.
func (b *Board) stored(ctx context.Context, at time.Time) ([]byte, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, RedisTimeout)
	defer cancel()
	v, err := b.rdb.Get(rctx, b.key).Result()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	head, data, ok := strings.Cut(v, "\n")
	ms, perr := strconv.ParseInt(head, 10, 64)
	if !ok || perr != nil || ms < at.UnixMilli() {
		return nil, false, nil
	}
	return []byte(data), true, nil
}

// releaseScript deletes the lease if it still holds token.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// fetchAndStore asks Coolify under the lease and stores the answer for at (unless a later
// point's is stored already), then lets the lease go.
func (b *Board) fetchAndStore(ctx context.Context, at time.Time, token string, fetch func(context.Context) ([]byte, error)) ([]byte, error) {
	data, err := fetch(ctx)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RedisTimeout)
	defer cancel()
	if err == nil {
		_ = storeScript.Run(wctx, b.rdb, []string{b.key}, at.UnixMilli(), string(data), boardKeep.Milliseconds()).Err()
	}
	_ = releaseScript.Run(wctx, b.rdb, []string{b.lease}, token).Err()
	return data, err
}

// storeScript stores "<point>\n<list>" unless a later point's list is stored.
var storeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  local nl = string.find(v, "\n", 1, true)
  if nl and tonumber(string.sub(v, 1, nl - 1)) > tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1] .. "\n" .. ARGV[2], 'PX', ARGV[3])
return 1
`)

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
