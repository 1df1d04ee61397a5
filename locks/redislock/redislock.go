// Package redislock is the Redis backend of the lock protocol: a locks.Driver on go-redis'
// UniversalClient, so standalone, Sentinel and Cluster deployments all work.
//
// Every Driver method is one atomic step: one Lua script (one round trip once the script is
// cached by the server) that reads the time from Redis, so every expiry is on one clock.
//
// # Keys
//
// All keys of one lock carry the hash tag {<key>}, so they share a Cluster slot and one
// script can touch them all. With the default prefix "orch:lock:" the lock "coolify:phase1"
// is stored as
//
//	orch:lock:{coolify:phase1}:lock    hash: the fence counter, the lease (token, holder, times, message) and the lock-delay
//	orch:lock:{coolify:phase1}:q       waiters in arrival order (FIFO)
//	orch:lock:{coolify:phase1}:qdl     each waiter's deadline; dead waiters are dropped when they reach the head
//	orch:lock:{coolify:phase1}:qc      each waiter's claim (token, holder, message, TTL), for a release to hand it the key
//
// and releases are published on the channel orch:lock:{coolify:phase1}:released. Several
// installations share one Redis by choosing different prefixes. (Earlier versions kept an
// audit list per key, orch:lock:{…}:audit; nothing reads or writes it now: operator actions
// are recorded in the run store's audit log, and the lists left behind may be deleted.)
//
// A lease's expiry is a field that every script compares with the server's TIME, not a
// key TTL: the lease, its fence and its lock-delay then live in one hash that is never
// deleted, and an uncontended grant is four calls inside one script (TIME, HMGET, EXISTS,
// HSET). The hash of a key that is never used again stays behind, a few fields in size.
//
// # Fences across restarts
//
// A grant's fence is max(previous+1, the server's clock in microseconds). While Redis keeps
// its data this is the previous fence plus one (a key cannot be granted more than once per
// microsecond); when Redis loses it (restart without persistence, failover to a replica
// that had not seen the last grants) the clock floor is above every fence handed out
// before, as long as the server's clock does not step back by more than the outage.
// Fences therefore look like timestamps, and only their order matters.
package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redisack"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

// DefaultPrefix is the key prefix when Options names none.
const DefaultPrefix = "orch:lock:"

// Options configure a Driver.
type Options struct {
	// Prefix starts every Redis key and channel the driver uses (default DefaultPrefix).
	// Installations sharing one Redis need different prefixes. It must not contain '{' or
	// '}', which would break the hash tags that keep a lock's keys in one Cluster slot.
	Prefix string
	// Logger receives pub/sub connection events (default: discard). Tokens are never logged.
	Logger *slog.Logger
	// MinReplicas, when positive, makes a grant and a renewal count only once WAIT has
	// confirmed that this many replicas of the key's master have them (see replicas.go);
	// a release then never hands the key to the next waiter (see locks.Handover), which
	// takes it by a confirmed try of its own. 0 (the default) does not wait for replicas.
	MinReplicas int
	// ReplicaTimeout bounds each WAIT for MinReplicas (default DefaultReplicaTimeout).
	ReplicaTimeout time.Duration
	// Confirm, when not nil with MinReplicas positive, confirms grants and renewals instead
	// of a WAIT for MinReplicas: built with the same MinReplicas from a Sentinel URL
	// (redisack.New), it waits for every replica the sentinels list alive, which a forced
	// failover's promotion window cannot meet.
	Confirm *redisack.Confirmer
}

// Driver is a locks.Driver on Redis. It is safe for concurrent use.
type Driver struct {
	client     redis.UniversalClient
	ownsClient bool
	prefix     string
	log        *slog.Logger
	hub        *hub
	// minReplicas is Options.MinReplicas; ack confirms grants and renewals (nil without
	// MinReplicas): Options.Confirm, or a WAIT for MinReplicas within ReplicaTimeout.
	minReplicas int
	ack         *redisack.Confirmer

	// unsafeDelRelease replaces the compare-and-delete release by a plain DEL. It exists
	// only so the fault-injection test can show that it catches the bug.
	unsafeDelRelease bool
}

var _ locks.Driver = (*Driver)(nil)

// New returns a Driver that uses client. The caller keeps ownership of client: Close stops
// the driver's subscriptions but leaves client open. Build the client with
// ContextTimeoutEnabled (as Open does), so that a context deadline bounds every call. New panics if opts.Prefix contains
// '{' or '}' (see Options.Prefix) or opts.MinReplicas is negative; Open returns an error instead.
func New(client redis.UniversalClient, opts Options) *Driver {
	if err := opts.validate(); err != nil {
		panic(err)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ReplicaTimeout <= 0 {
		opts.ReplicaTimeout = DefaultReplicaTimeout
	}
	d := &Driver{
		client:      client,
		prefix:      opts.Prefix,
		log:         opts.Logger,
		minReplicas: opts.MinReplicas,
		ack:         redisack.Fixed(opts.MinReplicas, opts.ReplicaTimeout),
	}
	if opts.MinReplicas > 0 && opts.Confirm != nil {
		d.ack = opts.Confirm
	}
	d.hub = newHub(client, d.prefix, opts.Logger)
	return d
}

func (o Options) validate() error {
	if strings.ContainsAny(o.Prefix, "{}") {
		return fmt.Errorf("redislock: key prefix %q must not contain '{' or '}': %w", o.Prefix, locks.ErrInvalid)
	}
	if o.MinReplicas < 0 {
		return fmt.Errorf("redislock: MinReplicas %d is negative: %w", o.MinReplicas, locks.ErrInvalid)
	}
	return nil
}

// Open connects to the Redis named by rawURL and returns a Driver that owns the client
// (Close closes it). It does not contact the server; call Ping for that.
//
// URL forms:
//
//	redis://[user:password@]host:port[/db][?options]    standalone (rediss:// for TLS, unix:///path.sock)
//	redis://host:port[/db]?master_name=NAME[&addr=host:port...]   Sentinel (the hosts are sentinels)
//	redis+cluster://host:port[?addr=host:port...]        Cluster (rediss+cluster:// for TLS)
//
// Options are go-redis' (dial_timeout, read_timeout, pool_size, ...). Errors wrap
// locks.ErrInvalid and never include the password.
func Open(rawURL string, opts Options) (*Driver, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	client, err := newClient(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redislock: open: %w: %w", locks.ErrInvalid, err)
	}
	d := New(client, opts)
	d.ownsClient = true
	return d, nil
}

// newClient parses rawURL into a client that honors context deadlines on the wire
// (ContextTimeoutEnabled): without it go-redis waits out its read timeout and retries on a
// stalled server whatever the context says, so a renewal bounded by the lease's local
// deadline would return seconds after the lease expired — while another holder may already
// have the key.
func newClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included; keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("parse redis URL: %w", err)
	}
	switch u.Scheme {
	case "redis+cluster", "rediss+cluster":
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("parse redis cluster URL: %w", err)
		}
		o.ContextTimeoutEnabled = true
		c := redis.NewClusterClient(o)
		c.OnNewNode(func(node *redis.Client) { node.AddHook(reloadOnDialError{c}) })
		return c, nil
	case "redis", "rediss":
		if u.Query().Has("master_name") {
			o, err := redis.ParseFailoverURL(rawURL)
			if err != nil {
				return nil, fmt.Errorf("parse redis sentinel URL: %w", err)
			}
			o.ContextTimeoutEnabled = true
			return redis.NewFailoverClient(o), nil
		}
		fallthrough
	case "unix":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("parse redis URL: %w", err)
		}
		o.ContextTimeoutEnabled = true
		return redis.NewClient(o), nil
	default:
		return nil, fmt.Errorf("unsupported URL scheme %q (use redis, rediss, unix, redis+cluster or rediss+cluster)", u.Scheme)
	}
}

// Close stops the shared subscription connection and waits for its goroutine, and closes
// the client if the Driver opened it. It does not release leases.
func (d *Driver) Close() error {
	d.hub.close()
	if d.ownsClient {
		if err := d.client.Close(); err != nil {
			return fmt.Errorf("redislock: close client: %w", err)
		}
	}
	return nil
}

// keys names the Redis keys and the channel of one lock.
type keys struct {
	lock, queue, deadlines, claims, channel string
}

// The suffixes of a lock's names, in the order keys lays them out.
var keySuffixes = [...]string{":lock", ":q", ":qdl", ":qc", ":released"}

// keys names the keys of one lock. Every acquire and release needs them, so they are cut
// from one string: one allocation instead of one per name.
func (d *Driver) keys(key string) keys {
	var b strings.Builder
	b.Grow(len(keySuffixes)*(len(d.prefix)+len(key)+2) + len(":lock:q:qdl:qc:released"))
	var names [len(keySuffixes)]string
	ends := [len(keySuffixes)]int{}
	for i, s := range keySuffixes {
		b.WriteString(d.prefix)
		b.WriteByte('{')
		b.WriteString(key)
		b.WriteByte('}')
		b.WriteString(s)
		ends[i] = b.Len()
	}
	all, start := b.String(), 0
	for i, end := range ends {
		names[i], start = all[start:end], end
	}
	return keys{lock: names[0], queue: names[1], deadlines: names[2], claims: names[3], channel: names[4]}
}

// fail wraps an error from Redis: the caller's context error when the context is done,
// locks.ErrUnavailable otherwise.
func (d *Driver) fail(ctx context.Context, op, key string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("redislock: %s %q: %w", op, key, ctxErr)
	}
	return fmt.Errorf("redislock: %s %q: %w: %w", op, key, locks.ErrUnavailable, err)
}

// ms converts a duration to whole milliseconds, at least 1.
func ms(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}

// TryAcquire makes one atomic attempt to grant g.Key (see locks.Driver). It returns the
// granted Info, also to a retry with the token of the live lease (a call whose answer was
// lost), then with its expiry renewed to now+TTL so the retry may time the lease from its
// own start; a *locks.HeldError matching locks.ErrHeld or locks.ErrFrozen when the key
// is held, frozen, in lock-delay or promised to an earlier waiter; locks.ErrUnavailable or
// the context's error when Redis cannot be reached, and locks.ErrUnavailable when
// Options.MinReplicas replicas did not confirm the grant within Options.ReplicaTimeout (the
// grant is released). The grant is as locks.Locker validated it.
func (d *Driver) TryAcquire(ctx context.Context, g locks.Grant) (locks.Info, error) {
	const op = "acquire"
	var ticketTTL int64
	if g.Ticket != "" {
		ticketTTL = ms(time.Until(g.TicketDeadline))
	}
	handover := g.Handover
	if d.minReplicas > 0 {
		// A release's script hands the key over without a WAIT for replicas: with
		// MinReplicas every grant goes through a waiter's own confirmed try instead.
		handover = ""
	}
	k := d.keys(g.Key)
	// Noted before the script runs: a release naming this ticket as next in line can only
	// be published after the script queued it, and must find it noted.
	d.hub.noteTicket(k.channel, g.Ticket, g.TicketDeadline)
	res, err := d.runScript(ctx, acquireScript, []string{k.lock, k.queue, k.deadlines, k.claims},
		[]any{g.Token, g.Holder, g.Message, ms(g.TTL), g.Ticket, ticketTTL, handover, d.hub.id}, granted)
	if errors.Is(err, redisack.ErrUnconfirmed) {
		// Nobody may rely on a grant a failover can take back: give it up (the Locker
		// retries within its budget). If the release is lost too, the lease expires.
		rerr := d.Release(ctx, g.Key, g.Token)
		return locks.Info{}, fmt.Errorf("redislock: %s %q: %w: grant %w, released (release: %v)",
			op, g.Key, locks.ErrUnavailable, err, errOrOK(rerr))
	}
	if err != nil {
		return locks.Info{}, d.fail(ctx, op, g.Key, err)
	}
	r := reply(res)
	if r.int(0) == 1 {
		d.hub.forgetTicket(k.channel, g.Ticket)
		return locks.Info{
			Key:        g.Key,
			Token:      g.Token,
			Holder:     g.Holder,
			Message:    g.Message,
			Fence:      r.int(1),
			AcquiredAt: r.time(2),
			ExpiresAt:  r.time(3),
		}, nil
	}
	he := &locks.HeldError{Key: g.Key, Reason: locks.ErrHeld}
	switch r.str(1) {
	case "frozen":
		he.Reason = locks.ErrFrozen
		he.Current = r.lease(g.Key, 2, true)
	case "held":
		he.Current = r.lease(g.Key, 2, false)
	case "delay":
		he.Current = locks.Info{Key: g.Key, ClosedUntil: r.time(8)}
	}
	return locks.Info{}, he
}

// granted reports whether an acquire or renew reply ({1, ...}) is a write to confirm.
func granted(res []any) bool { return reply(res).int(0) == 1 }

// errOrOK names err, or "ok" when it is nil.
func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// LeaveQueue removes a waiter's ticket from the key's queue, and releases the key if a
// release handed it to the ticket (see locks.Handover). It returns nil when the ticket is
// not queued, and locks.ErrUnavailable or the context's error when Redis cannot be reached.
func (d *Driver) LeaveQueue(ctx context.Context, key, ticket string) error {
	if ticket == "" {
		return nil
	}
	k := d.keys(key)
	d.hub.forgetTicket(k.channel, ticket)
	err := leaveScript.Run(ctx, d.client, []string{k.lock, k.queue, k.deadlines, k.claims}, ticket, k.channel).Err()
	if err != nil {
		return d.fail(ctx, "leave queue", key, err)
	}
	return nil
}

// Renew extends the lease to now+ttl (server clock) if token still holds key and returns
// the new expiry. Errors: locks.ErrNotHeld when the key is free or held under another
// token; locks.ErrUnavailable or the context's error when Redis cannot be reached.
// With Options.MinReplicas, a renewal the replicas did not confirm in time is
// locks.ErrUnavailable (the Locker retries it until the lease's own deadline).
func (d *Driver) Renew(ctx context.Context, key, token string, ttl time.Duration) (time.Time, error) {
	const op = "renew"
	k := d.keys(key)
	res, err := d.runScript(ctx, renewScript, []string{k.lock}, []any{token, ms(ttl)}, granted)
	if errors.Is(err, redisack.ErrUnconfirmed) {
		return time.Time{}, fmt.Errorf("redislock: %s %q: %w: renewal %w", op, key, locks.ErrUnavailable, err)
	}
	if err != nil {
		return time.Time{}, d.fail(ctx, op, key, err)
	}
	r := reply(res)
	if r.int(0) != 1 {
		return time.Time{}, fmt.Errorf("redislock: %s %q: %w", op, key, locks.ErrNotHeld)
	}
	return r.time(1), nil
}

// Release deletes the lease if token still holds key (compare-and-delete), hands the key
// to the first waiter queued if it can (see locks.Handover) and publishes on the key's
// channel. Errors: locks.ErrNotHeld when the key is free or held under another
// token (nothing is deleted); locks.ErrUnavailable or the context's error when Redis
// cannot be reached.
func (d *Driver) Release(ctx context.Context, key, token string) error {
	const op = "release"
	k := d.keys(key)
	script := releaseScript
	if d.unsafeDelRelease {
		script = unsafeReleaseScript
	}
	n, err := script.Run(ctx, d.client, []string{k.lock, k.queue, k.deadlines, k.claims}, token, k.channel).Int64()
	if err != nil {
		return d.fail(ctx, op, key, err)
	}
	if n != 1 {
		return fmt.Errorf("redislock: %s %q: %w", op, key, locks.ErrNotHeld)
	}
	return nil
}

// Get returns the live lease on key, without its token, with its waiter count. Errors:
// locks.ErrNotFound when nothing holds the key (also while it is in lock-delay);
// locks.ErrUnavailable or the context's error when Redis cannot be reached.
func (d *Driver) Get(ctx context.Context, key string) (locks.Info, error) {
	res, err := d.get(ctx, d.client, key).Slice()
	if err != nil {
		return locks.Info{}, d.fail(ctx, "get", key, err)
	}
	info, ok := parseGet(key, res)
	if !ok {
		return locks.Info{}, fmt.Errorf("redislock: get %q: %w", key, locks.ErrNotFound)
	}
	return info, nil
}

func (d *Driver) get(ctx context.Context, c redis.Scripter, key string) *redis.Cmd {
	k := d.keys(key)
	return getScript.Eval(ctx, c, []string{k.lock, k.deadlines})
}

func parseGet(key string, res []any) (locks.Info, bool) {
	r := reply(res)
	if r.int(0) != 1 {
		return locks.Info{}, false
	}
	info := r.lease(key, 1, r.str(6) == "1")
	info.Waiters = int(r.int(7))
	return info, true
}

// List returns the live leases whose key starts with prefix, sorted by key, without
// tokens, with waiter counts. It scans every master of a Cluster. Errors:
// locks.ErrUnavailable or the context's error when Redis cannot be reached.
func (d *Driver) List(ctx context.Context, prefix string) ([]locks.Info, error) {
	const suffix = "}:lock"
	names, err := d.scan(ctx, globEscape(d.prefix+"{"+prefix)+"*"+suffix)
	if err != nil {
		return nil, d.fail(ctx, "list", prefix, err)
	}
	keysFound := make([]string, 0, len(names))
	for _, n := range names {
		key := strings.TrimSuffix(strings.TrimPrefix(n, d.prefix+"{"), suffix)
		if strings.HasPrefix(key, prefix) {
			keysFound = append(keysFound, key)
		}
	}
	slices.Sort(keysFound)
	keysFound = slices.Compact(keysFound)
	if len(keysFound) == 0 {
		return nil, nil
	}
	pipe := d.client.Pipeline()
	cmds := make([]*redis.Cmd, len(keysFound))
	for i, key := range keysFound {
		cmds[i] = d.get(ctx, pipe, key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, d.fail(ctx, "list", prefix, err)
	}
	out := make([]locks.Info, 0, len(keysFound))
	for i, key := range keysFound {
		res, err := cmds[i].Slice()
		if err != nil {
			return nil, d.fail(ctx, "list", prefix, err)
		}
		if info, ok := parseGet(key, res); ok { // it may have expired since the scan
			out = append(out, info)
		}
	}
	return out, nil
}

// scan returns every key matching pattern, on every master of a Cluster.
func (d *Driver) scan(ctx context.Context, pattern string) ([]string, error) {
	scanOne := func(ctx context.Context, c redis.UniversalClient) ([]string, error) {
		var out []string
		iter := c.Scan(ctx, 0, pattern, 500).Iterator()
		for iter.Next(ctx) {
			out = append(out, iter.Val())
		}
		return out, iter.Err()
	}
	cc, ok := d.client.(*redis.ClusterClient)
	if !ok {
		return scanOne(ctx, d.client)
	}
	var (
		mu  sync.Mutex
		all []string
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		got, err := scanOne(ctx, c)
		mu.Lock()
		all = append(all, got...)
		mu.Unlock()
		return err
	})
	return all, err
}

// globEscape quotes the characters SCAN MATCH treats as special.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ForceRelease removes the live lease on r.Key if it matches r.Fence (when non-zero) or
// r.Holder (when non-empty), closes the key for r.LockDelay (when positive) and wakes every
// subscriber, in one script.
// It returns the evicted lease. Errors: *locks.HeldError matching locks.ErrStale naming
// the current lease on a mismatch; locks.ErrNotFound when the key is free;
// locks.ErrUnavailable or the context's error when Redis cannot be reached.
func (d *Driver) ForceRelease(ctx context.Context, r locks.ForceRequest) (locks.Info, error) {
	const op = "force release"
	var delayMS int64
	if r.LockDelay > 0 {
		delayMS = ms(r.LockDelay)
	}
	k := d.keys(r.Key)
	res, err := forceReleaseScript.Run(ctx, d.client, []string{k.lock},
		strconv.FormatInt(r.Fence, 10), r.Holder, delayMS, k.channel).Slice()
	if err != nil {
		return locks.Info{}, d.fail(ctx, op, r.Key, err)
	}
	rp := reply(res)
	switch rp.int(0) {
	case 0:
		return locks.Info{}, fmt.Errorf("redislock: %s %q: %w", op, r.Key, locks.ErrNotFound)
	case 2:
		return locks.Info{}, &locks.HeldError{Key: r.Key, Reason: locks.ErrStale,
			Current: rp.lease(r.Key, 1, rp.str(6) == "1")}
	}
	return rp.lease(r.Key, 1, rp.str(6) == "1"), nil
}

// Freeze puts an operator lease on a free key: frozen, held by holder, expiring at r.Until
// (measured from now on the local clock, then kept by Redis), with a fence like any grant.
// Errors: *locks.HeldError matching locks.ErrHeld (or
// locks.ErrFrozen when already frozen) naming the current lease; locks.ErrUnavailable or
// the context's error when Redis cannot be reached.
func (d *Driver) Freeze(ctx context.Context, r locks.FreezeRequest, holder, token string) (locks.Info, error) {
	const op = "freeze"
	k := d.keys(r.Key)
	res, err := freezeScript.Run(ctx, d.client, []string{k.lock},
		token, holder, r.Message, ms(time.Until(r.Until))).Slice()
	if err != nil {
		return locks.Info{}, d.fail(ctx, op, r.Key, err)
	}
	rp := reply(res)
	if rp.int(0) != 1 {
		he := &locks.HeldError{Key: r.Key, Reason: locks.ErrHeld}
		frozen := rp.str(1) == "frozen"
		if frozen {
			he.Reason = locks.ErrFrozen
		}
		he.Current = rp.lease(r.Key, 2, frozen)
		return locks.Info{}, he
	}
	return locks.Info{
		Key: r.Key, Token: token, Holder: holder, Message: r.Message, Frozen: true,
		Fence: rp.int(1), AcquiredAt: rp.time(2), ExpiresAt: rp.time(3),
	}, nil
}

// Unfreeze lifts a freeze, wakes the waiters and returns the freeze lifted. Errors:
// locks.ErrNotFound when the key is not frozen (free, or held by an ordinary lease);
// locks.ErrUnavailable or the context's error when Redis cannot be reached.
func (d *Driver) Unfreeze(ctx context.Context, key string) (locks.Info, error) {
	const op = "unfreeze"
	k := d.keys(key)
	res, err := unfreezeScript.Run(ctx, d.client, []string{k.lock}, k.channel).Slice()
	if err != nil {
		return locks.Info{}, d.fail(ctx, op, key, err)
	}
	rp := reply(res)
	if rp.int(0) != 1 {
		return locks.Info{}, fmt.Errorf("redislock: %s %q: not frozen: %w", op, key, locks.ErrNotFound)
	}
	return rp.lease(key, 1, true), nil
}

// newToken returns a random identifier for barrier channels.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
