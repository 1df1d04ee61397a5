package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/locks"
	orchredis "github.com/deploy-orchestrator/orchestrator/locks/redislock"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
)

// impl is one lock implementation under test.
type impl struct {
	name string
	// redis is true when the implementation talks to the benchmark's redis-server.
	redis bool
	// diagnostic implementations are measured uncontended only and reported on stderr:
	// they split a result into its parts.
	diagnostic bool
	// newClient returns a client with connections of its own, as a separate process has.
	newClient func() (client, error)
}

// client takes locks. acquire blocks until the key is held (or ctx ends).
type client interface {
	acquire(ctx context.Context, key string) (held, error)
	close() error
}

// held is a granted lock: when it was asked for and granted, and its release, which
// returns when it started and ended. The times are taken where the lock is taken, so a
// client in another process reports them without the pipe's delay.
type held struct {
	asked, granted time.Time
	release        func(context.Context) (start, end time.Time, err error)
}

// timed turns a blocking acquire into a held with the times taken around it.
func timed(acquire func() (func(context.Context) error, error)) (held, error) {
	asked := time.Now()
	release, err := acquire()
	if err != nil {
		return held{}, err
	}
	return held{asked: asked, granted: time.Now(), release: func(ctx context.Context) (time.Time, time.Time, error) {
		start := time.Now()
		err := release(ctx)
		return start, time.Now(), err
	}}, nil
}

// leaseTTL is long enough for every phase; no lease expires during the benchmark.
const leaseTTL = time.Minute

func implementations(redisAddr, sqliteDir string) []impl {
	procsDB := filepath.Join(sqliteDir, "procs", "locks.db")
	newRedis := func() *redis.Client { return redis.NewClient(&redis.Options{Addr: redisAddr}) }
	var holders atomic.Int64
	orch := func(open func() (locks.Driver, error)) func() (client, error) {
		return func() (client, error) {
			d, err := open()
			if err != nil {
				return nil, err
			}
			return newOrchClient(d, holders.Add(1))
		}
	}
	bsm := func(backoff time.Duration) func() (client, error) {
		return func() (client, error) {
			rc := newRedis()
			return &bsmClient{rc: rc, c: redislock.New(rc), backoff: backoff}, nil
		}
	}
	return []impl{
		{name: "orchestrator-redis", redis: true, newClient: orch(func() (locks.Driver, error) {
			return redislockDriver(redisAddr)
		})},
		{name: "orchestrator-sqlite", newClient: orch(func() (locks.Driver, error) {
			return sqlitelock.Open(filepath.Join(sqliteDir, "locks.db"))
		})},
		{name: "orchestrator-sqlite-procs", newClient: func() (client, error) {
			return startChild(procsDB)
		}},
		{name: "orchestrator-redis-driver", redis: true, diagnostic: true, newClient: func() (client, error) {
			d, err := redislockDriver(redisAddr)
			if err != nil {
				return nil, err
			}
			return &driverClient{d: d}, nil
		}},
		{name: "redislock-10ms", redis: true, newClient: bsm(10 * time.Millisecond)},
		{name: "redislock-100ms", redis: true, newClient: bsm(100 * time.Millisecond)},
		{name: "redsync", redis: true, newClient: func() (client, error) {
			rc := newRedis()
			return &redsyncClient{rc: rc, rs: redsync.New(goredis.NewPool(rc))}, nil
		}},
	}
}

func redislockDriver(addr string) (locks.Driver, error) {
	return orchredis.Open("redis://"+addr+"/0", orchredis.Options{Prefix: "benchlocks:"})
}

// orchClient is the product's path: locks.Locker over a driver, one per "process".
type orchClient struct {
	l  *locks.Locker
	id int64
}

// newOrchClient returns a client of a Locker with its defaults over d.
func newOrchClient(d locks.Driver, id int64) (*orchClient, error) {
	l := locks.New(d, locks.Options{})
	if err := l.RegisterNamespace("bench:"); err != nil {
		_ = l.Close()
		return nil, err
	}
	return &orchClient{l: l, id: id}, nil
}

func (c *orchClient) acquire(ctx context.Context, key string) (held, error) {
	return timed(func() (func(context.Context) error, error) {
		le, err := c.l.Acquire(ctx, locks.Request{
			Key:    key,
			Holder: fmt.Sprintf("bench#%d/step", c.id),
			TTL:    leaseTTL,
			Budget: locks.Budget{Timeout: time.Minute},
		})
		if err != nil {
			return nil, err
		}
		return le.Release, nil
	})
}

func (c *orchClient) close() error { return c.l.Close() }

// driverClient uses the Redis driver without a Locker: one TryAcquire, one Release. It
// cannot wait, so it serves the uncontended measure only.
type driverClient struct {
	d locks.Driver
}

func (c *driverClient) acquire(ctx context.Context, key string) (held, error) {
	g := locks.Grant{Key: key, Token: rand.Text(), Holder: "bench#0/driver", TTL: leaseTTL}
	return timed(func() (func(context.Context) error, error) {
		if _, err := c.d.TryAcquire(ctx, g); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return c.d.Release(ctx, key, g.Token) }, nil
	})
}

func (c *driverClient) close() error { return c.d.Close() }

// bsmClient is github.com/bsm/redislock: SET NX by script, retried at a fixed interval.
type bsmClient struct {
	rc      *redis.Client
	c       *redislock.Client
	backoff time.Duration
}

func (c *bsmClient) acquire(ctx context.Context, key string) (held, error) {
	return timed(func() (func(context.Context) error, error) {
		lock, err := c.c.Obtain(ctx, key, leaseTTL, &redislock.Options{RetryStrategy: redislock.LinearBackoff(c.backoff)})
		if err != nil {
			return nil, err
		}
		return lock.Release, nil
	})
}

func (c *bsmClient) close() error { return c.rc.Close() }

// redsyncClient is github.com/go-redsync/redsync/v4 with its defaults (8 s expiry, 32
// tries 50-250 ms apart); a waiter whose tries run out starts again, as a caller that
// must get the lock would.
type redsyncClient struct {
	rc *redis.Client
	rs *redsync.Redsync
}

func (c *redsyncClient) acquire(ctx context.Context, key string) (held, error) {
	m := c.rs.NewMutex(key)
	return timed(func() (func(context.Context) error, error) {
		for {
			err := m.LockContext(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil, err
			}
		}
		return func(ctx context.Context) error {
			_, err := m.UnlockContext(ctx)
			return err
		}, nil
	})
}

func (c *redsyncClient) close() error { return c.rc.Close() }
