// Package redisack makes a Redis write count only once replicas confirmed it with WAIT, in
// a way that also survives a Sentinel failover forced while the old master is alive.
//
// WAIT N alone is not enough with Sentinel. SENTINEL FAILOVER (or a failover of a master
// that is slow, not dead) leaves the old master running: the sentinels send REPLICAOF NO
// ONE to the replica they promote, see it report itself master about a second later, and
// only then move the other replicas to it. In between, the old master still accepts writes
// and still has those other replicas, so WAIT 1 there is satisfied by a replica that is
// about to full-resync from the new master and drop the write. What the old master cannot
// get in that window is the promoted replica's acknowledgement: it left at once. So on a
// Sentinel URL a write waits for every replica the sentinels list for the master as alive
// (answering their pings within 3 s, not down, reporting itself a replica), and for at
// least MinReplicas: the promoted replica stays in that list until the sentinels switch the
// master, so a write the old master takes in the window is never confirmed, and a sentinel
// caught switching (naming as master a node it still lists as a replica) confirms nothing.
// A replica that dies leaves the count once it has not answered a sentinel for 3 s; the old
// master, listed as a replica after the switch, joins it once it reports itself a replica.
package redisack

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTimeout bounds each WAIT when New is given none.
const DefaultTimeout = time.Second

// ErrUnconfirmed is wrapped by Write's error when fewer replicas than needed confirmed the
// write in time. The write may or may not survive a failover; the caller treats it as a
// failed write of a store that is unavailable for now.
var ErrUnconfirmed = errors.New("not confirmed by enough replicas")

// countTTL is how long a count of the sentinels' replicas is reused before it is asked
// again (an unconfirmed write asks again at once).
const countTTL = time.Second

// Confirmer runs writes that count once replicas confirmed them. A nil *Confirmer, or one
// with MinReplicas 0, runs writes plainly. It is safe for concurrent use.
type Confirmer struct {
	min      int
	timeout  time.Duration
	sentinel *sentinelCount // nil unless the URL names a Sentinel master
}

// New returns the Confirmer for the Redis URL rawURL (the daemon's redis_url): with min 0,
// nil (writes are not confirmed); on a Sentinel URL (master_name), one that also waits for
// every replica the sentinels list alive. timeout 0 takes DefaultTimeout. Errors never
// repeat the URL (it may hold a password).
func New(rawURL string, min int, timeout time.Duration) (*Confirmer, error) {
	if min < 0 {
		return nil, fmt.Errorf("min_replicas %d is negative", min)
	}
	if min == 0 {
		return nil, nil
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	c := &Confirmer{min: min, timeout: timeout}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("parse redis URL: invalid URL")
	}
	if (u.Scheme == "redis" || u.Scheme == "rediss") && u.Query().Has("master_name") {
		o, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("parse redis sentinel URL: %w", err)
		}
		c.sentinel = newSentinelCount(o)
	}
	return c, nil
}

// Close closes the Confirmer's connections to the sentinels.
func (c *Confirmer) Close() error {
	if c == nil || c.sentinel == nil {
		return nil
	}
	return c.sentinel.close()
}

// Fixed returns a Confirmer that waits for min replicas, with no Sentinel to ask for more:
// nil (writes are not confirmed) when min is 0. timeout 0 takes DefaultTimeout.
func Fixed(min int, timeout time.Duration) *Confirmer {
	if min <= 0 {
		return nil
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Confirmer{min: min, timeout: timeout}
}

// Write runs write on one connection to the master that serves key and then, on that
// connection, WAITs for the replicas it needs (see the package doc). It returns write's
// error, or one wrapping ErrUnconfirmed when too few replicas confirmed in time.
func (c *Confirmer) Write(ctx context.Context, client redis.UniversalClient, key string, write func(redis.Cmdable) error) error {
	return c.WriteIf(ctx, client, key, func(cmd redis.Cmdable) (bool, error) { return true, write(cmd) })
}

// WriteIf is Write for a write that may turn out to change nothing that needs confirming
// (a lock script that granted nothing): write reports whether the WAIT must follow.
func (c *Confirmer) WriteIf(ctx context.Context, client redis.UniversalClient, key string, write func(redis.Cmdable) (bool, error)) error {
	if c == nil || c.min == 0 {
		_, err := write(client)
		return err
	}
	node, err := masterFor(ctx, client, key)
	if err != nil {
		return err
	}
	need, err := c.need(ctx) // before the write: a write that cannot be confirmed is not made
	if err != nil {
		return err
	}
	conn := node.Conn()
	defer conn.Close()
	if confirm, err := write(conn); err != nil || !confirm {
		return err
	}
	n, err := conn.Wait(ctx, need, c.timeout).Result()
	if err != nil {
		return err
	}
	if int(n) < need {
		c.Missed()
		return fmt.Errorf("%w: %d of %d replicas within %s", ErrUnconfirmed, n, need, c.timeout)
	}
	return nil
}

// Missed makes the next write ask the sentinels again: a WAIT fell short, and the replicas
// may have changed.
func (c *Confirmer) Missed() {
	if c != nil && c.sentinel != nil {
		c.sentinel.forget()
	}
}

// need is how many replicas must confirm a write: MinReplicas, or on Sentinel the
// sentinels' count of live replicas when that is more.
func (c *Confirmer) need(ctx context.Context) (int, error) {
	if c.sentinel == nil {
		return c.min, nil
	}
	n, err := c.sentinel.count(ctx)
	if err != nil {
		return 0, err
	}
	return max(c.min, n), nil
}

// masterFor returns the client of the master that serves key: client itself for one server
// or Sentinel (go-redis' failover client follows the master), the slot's master of a Cluster.
func masterFor(ctx context.Context, client redis.UniversalClient, key string) (*redis.Client, error) {
	switch c := client.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	default:
		return nil, fmt.Errorf("min_replicas needs a single-server, Sentinel or Cluster client, not %T", client)
	}
}

// sentinelCount asks the sentinels how many replicas of the master are alive, and keeps
// the answer for countTTL.
type sentinelCount struct {
	master  string
	clients []*redis.SentinelClient

	mu    sync.Mutex
	n     int
	at    time.Time // when n was asked; zero: ask again
	known bool      // a sentinel has answered once: n is the last count they gave
}

func newSentinelCount(o *redis.FailoverOptions) *sentinelCount {
	s := &sentinelCount{master: o.MasterName}
	for _, addr := range o.SentinelAddrs {
		s.clients = append(s.clients, redis.NewSentinelClient(&redis.Options{
			Addr: addr, Username: o.SentinelUsername, Password: o.SentinelPassword,
			TLSConfig: o.TLSConfig, DialTimeout: o.DialTimeout, ContextTimeoutEnabled: true,
		}))
	}
	return s
}

// forget makes the next count ask the sentinels again.
func (s *sentinelCount) forget() {
	s.mu.Lock()
	s.at = time.Time{}
	s.mu.Unlock()
}

// count returns the number of live replicas, asking the first sentinel that answers
// when the kept answer is older than countTTL. When no sentinel answers, the last count
// they gave stands for another countTTL (writes go on while the master does); before any
// answer, that is an error. A sentinel caught switching the master (it names as master a
// node it still lists as a replica) makes the write unconfirmed.
func (s *sentinelCount) count(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < countTTL {
		return s.n, nil
	}
	var errs []error
	for _, sc := range s.clients {
		n, err := s.ask(ctx, sc)
		if errors.Is(err, errSwitching) {
			return 0, err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.n, s.at, s.known = n, time.Now(), true
		return n, nil
	}
	if s.known {
		s.at = time.Now()
		return s.n, nil
	}
	return 0, fmt.Errorf("ask the sentinels for the replicas of %q: %w", s.master, errors.Join(errs...))
}

// errSwitching is count's error while a sentinel is switching the master.
var errSwitching = fmt.Errorf("%w: the sentinels are switching the master", ErrUnconfirmed)

// ask returns one sentinel's count of live replicas.
func (s *sentinelCount) ask(ctx context.Context, sc *redis.SentinelClient) (int, error) {
	addr, err := sc.GetMasterAddrByName(ctx, s.master).Result()
	if err != nil {
		return 0, err
	}
	reps, err := sc.Replicas(ctx, s.master).Result()
	if err != nil {
		return 0, err
	}
	if len(addr) == 2 && slices.ContainsFunc(reps, func(r map[string]string) bool {
		return r["ip"] == addr[0] && r["port"] == addr[1]
	}) {
		return 0, errSwitching
	}
	return inSync(reps), nil
}

// pingSilence is how long a replica may leave a sentinel's pings unanswered and still count
// (the sentinels ping every second): a replica killed leaves the count after it.
const pingSilence = 3000 // ms

// inSync counts the replicas of a SENTINEL REPLICAS answer that answer the sentinel's pings,
// are not down, and report themselves replicas. Not the flag "disconnected": a replica
// being promoted drops the sentinels' connections (REPLICAOF NO ONE comes with CLIENT KILL),
// and must still count. Not "master-link-status" either: the sentinels refresh it every 10 s
// outside a failover, and a stale "err" would undercount. An old master the sentinels have
// not yet converted reports role master and does not count.
func inSync(reps []map[string]string) int {
	n := 0
	for _, r := range reps {
		flags := strings.Split(r["flags"], ",")
		if slices.Contains(flags, "s_down") || slices.Contains(flags, "o_down") || r["role-reported"] == "master" {
			continue
		}
		if silent, err := strconv.Atoi(r["last-ok-ping-reply"]); err != nil || silent > pingSilence {
			continue
		}
		n++
	}
	return n
}

func (s *sentinelCount) close() error {
	var errs []error
	for _, sc := range s.clients {
		errs = append(errs, sc.Close())
	}
	return errors.Join(errs...)
}
