package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The price of the Redis backend's guarantees on an uncontended acquire+release: the
// driver's two scripts reduced to their uncontended path, then with one guarantee taken
// out at a time, against bsm/redislock's scripts, each pair timed in turn in a random
// order (a paired comparison, like the uncontended phase). The scripts here are
// measurement copies of locks/redislock/scripts.go's fast paths, not the product's code:
// they tell what each part costs, so that a goal on the ratio to bsm/redislock can be
// weighed against what would have to go to reach it.
const (
	priceServerNow = "local t = redis.call('TIME')\nlocal nowUS = tonumber(t[1]) * 1000000 + tonumber(t[2])\nlocal now = math.floor(nowUS / 1000)\n"
	priceClientNow = "local nowUS = tonumber(ARGV[5])\nlocal now = math.floor(nowUS / 1000)\n"
	priceAcquire   = `
local l = redis.call('HMGET', KEYS[1], 'tok', 'holder', 'fence', 'acq', 'exp', 'msg', 'frozen', 'closed')
local live = l[1] and l[1] ~= '' and tonumber(l[5] or '0') > now
if not live and tonumber(l[8] or '0') <= now and QUEUE then
  local fence = tonumber(l[3] or '0') + 1
  if nowUS > fence then fence = nowUS end
  local fs, acq, exp = string.format('%d', fence), string.format('%d', now), string.format('%d', now + tonumber(ARGV[4]))
  redis.call('HSET', KEYS[1], 'tok', ARGV[1], META 'fence', fs, 'exp', exp)
  return {1, fs, acq, exp}
end
return {0}
`
	priceRelease = `
local l = redis.call('HMGET', KEYS[1], 'tok', 'exp')
if l[1] ~= ARGV[1] or tonumber(l[2] or '0') <= now then return 0 end
redis.call('HSET', KEYS[1], 'tok', '')
WAKE
return 1
`
	priceWake = `local head = ''
if redis.call('EXISTS', KEYS[2]) == 1 then head = redis.call('ZRANGE', KEYS[2], 0, 0)[1] or '' end
redis.call('PUBLISH', ARGV[2], head)`
	priceQueue = "redis.call('EXISTS', KEYS[2]) == 0"
	priceMeta  = "'holder', ARGV[2], 'acq', acq, 'msg', ARGV[3], 'frozen', '0', "
)

type priceVariant struct {
	name     string
	acq, rel *redis.Script
	// client, when set, takes the pair through the product's code instead of scripts.
	client client
}

func newPriceVariant(name, now, queue, meta, wake string) priceVariant {
	return priceVariant{
		name: name,
		acq:  redis.NewScript(strings.NewReplacer("QUEUE", queue, "META", meta).Replace(now + priceAcquire)),
		rel:  redis.NewScript(strings.ReplaceAll(now+priceRelease, "WAKE", wake)),
	}
}

func priceVariants() []priceVariant {
	return []priceVariant{
		newPriceVariant("all guarantees (the driver's fast paths)", priceServerNow, priceQueue, priceMeta, priceWake),
		newPriceVariant("without server-clock expiry (client clock)", priceClientNow, priceQueue, priceMeta, priceWake),
		newPriceVariant("without the FIFO queue check", priceServerNow, "true", priceMeta, priceWake),
		newPriceVariant("without holder metadata", priceServerNow, priceQueue, "", priceWake),
		newPriceVariant("without the wake-up PUBLISH", priceServerNow, priceQueue, priceMeta, ""),
		newPriceVariant("without all four", priceClientNow, "true", "", ""),
		{name: "without fences (SET NX PX, GET+DEL; clock, queue, PUBLISH kept)",
			acq: redis.NewScript(priceServerNow + `if redis.call('EXISTS', KEYS[2]) == 0 then return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[4]) end return 0`),
			rel: redis.NewScript(priceServerNow + `if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) ` + priceWake + ` return 1 end return 0`)},
		{name: "two PINGs (the round trips alone)"},
		{name: "bsm/redislock",
			acq: redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[4])`),
			rel: redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)},
	}
}

// priceResult is one variant's measures.
type priceResult struct {
	name  string
	p50   time.Duration // of a pair, taking turns with the other variants
	redis time.Duration // Redis' own time on a pair
}

// price measures n pairs of each variant, taking turns, for their p50s, and then, variant
// by variant, the time Redis itself spends on a pair (INFO commandstats over n pairs after
// CONFIG RESETSTAT): a figure of work, which the machine's round-trip time does not
// dilute. The first two variants are the product's own layers, the Locker over the driver
// and the driver alone, so that the table splits the paired ratio into what each layer adds
// to the scripts; the rest are in the order of priceVariants, the last bsm/redislock's.
func price(ctx context.Context, srv *redisServer, n int) ([]priceResult, error) {
	rc := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer rc.Close()
	ld, err := redislockDriver(srv.addr)
	if err != nil {
		return nil, err
	}
	locker, err := newOrchClient(ld, 0)
	if err != nil {
		return nil, err
	}
	defer locker.close()
	d, err := redislockDriver(srv.addr)
	if err != nil {
		return nil, err
	}
	driver := &driverClient{d: d}
	defer driver.close()
	vs := append([]priceVariant{
		{name: "the product: Locker over the driver", client: locker},
		{name: "the driver alone (TryAcquire, Release)", client: driver},
	}, priceVariants()...)
	const warmup = 100
	samples := make([][]time.Duration, len(vs))
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range warmup + n {
		for _, j := range rng.Perm(len(vs)) {
			start := time.Now()
			if err := pricePair(ctx, rc, vs[j], fmt.Sprintf("bench:price:%d:%d", j, i)); err != nil {
				return nil, err
			}
			if i >= warmup {
				samples[j] = append(samples[j], time.Since(start))
			}
		}
	}
	out := make([]priceResult, len(vs))
	for j, v := range vs {
		out[j] = priceResult{name: v.name, p50: percentile(samples[j], 50)}
	}
	for j, v := range vs {
		if _, err := srv.command("CONFIG RESETSTAT"); err != nil {
			return nil, fmt.Errorf("CONFIG RESETSTAT: %w", err)
		}
		for i := range n {
			if err := pricePair(ctx, rc, v, fmt.Sprintf("bench:price:server:%d:%d", j, i)); err != nil {
				return nil, err
			}
		}
		stats, err := srv.commandStats()
		if err != nil {
			return nil, err
		}
		// A script's time includes the commands it calls, which are counted apart as well.
		usec := stats["evalsha"].usec + stats["eval"].usec + stats["ping"].usec
		out[j].redis = time.Duration(usec) * time.Microsecond / time.Duration(n)
	}
	return out, nil
}

// pricePair runs one acquire+release pair of v (two PINGs for the variant without scripts
// or a client) on key.
func pricePair(ctx context.Context, rc *redis.Client, v priceVariant, key string) error {
	if v.client != nil {
		h, err := v.client.acquire(ctx, key)
		if err != nil {
			return fmt.Errorf("%s: acquire: %w", v.name, err)
		}
		if _, _, err := h.release(ctx); err != nil {
			return fmt.Errorf("%s: release: %w", v.name, err)
		}
		return nil
	}
	if v.acq == nil {
		if err := errors.Join(rc.Ping(ctx).Err(), rc.Ping(ctx).Err()); err != nil {
			return fmt.Errorf("PING: %w", err)
		}
		return nil
	}
	keys := []string{"{" + key + "}:lock", "{" + key + "}:q"}
	now := time.Now().UnixMicro()
	if err := v.acq.Run(ctx, rc, keys, "token", "bench#1/step", "", leaseTTL.Milliseconds(), now).Err(); err != nil {
		return fmt.Errorf("%s: acquire: %w", v.name, err)
	}
	if err := v.rel.Run(ctx, rc, keys, "token", "{"+key+"}:released", "", 0, now).Err(); err != nil {
		return fmt.Errorf("%s: release: %w", v.name, err)
	}
	return nil
}
