package locks

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/ctxtime"
)

// Options configure a Locker.
type Options struct {
	// PollInterval is the mean of the slow, jittered fallback poll a waiter does when no
	// release signal arrives (default DefaultPollInterval; jitter ±50%). A waiter's queue
	// ticket lives three intervals past its last attempt.
	PollInterval time.Duration
	// LockDelay is the default lock-delay after a forced release (default DefaultLockDelay).
	LockDelay time.Duration
	// Logger receives lease-lost and renewal-failure events (default: discard).
	Logger *slog.Logger
	// Observer, if set, is told about waits, holds, losses and forced releases (metrics).
	Observer Observer
	// DefaultBudget returns the budget of a request that names none, by key (default:
	// ServiceBudget for every key). The caller knows which of its keys are phase locks that
	// should wait longer (cmd/orchestrator gives them PhaseBudget).
	DefaultBudget func(key string) Budget
}

// DefaultPollInterval is the mean fallback poll of a waiter when Options name none.
//
// The poll only covers what the release signal cannot: a signal lost while the backend
// connection was down (drivers also wake every waiter after a reconnect) and a waiter
// queued behind one that died. Each poll of an idle waiter costs the Redis backend four
// commands (the script call plus TIME, HMGET and ZADD as INFO commandstats counts them),
// so 3 s keeps an idle waiter near 1.3 commands per second; a dead waiter then blocks
// the queue of a key for at most three intervals (9 s) and one more poll.
const DefaultPollInterval = 3 * time.Second

// MinTTL is the shortest lease a Request may ask for: the heartbeat renews every TTL/3 and
// needs room for a round trip to the backend.
const MinTTL = 10 * time.Millisecond

// Observer receives lock events for metrics. Methods must not block.
type Observer interface {
	Acquired(key string, waited time.Duration)
	Released(key string, held time.Duration, lost bool)
	ForceReleased(key string)
}

// Tuning of the Locker that callers do not need to set.
const (
	// ticketLife is how many poll intervals a queued ticket outlives its last attempt, so a
	// waiter that died without leaving the queue stops blocking the ones behind it.
	ticketLife = 3
	// cleanupTimeout bounds the best-effort calls made after the caller's context ended
	// (leaving the queue, releasing a grant whose answer was lost).
	cleanupTimeout = 2 * time.Second
	// minWait keeps a waiter from spinning when a holder's expiry is already due by the
	// local clock but the backend still reports it (clock skew between hosts).
	minWait = 5 * time.Millisecond
	// watchAfter is how long a lease lives before its heartbeat also subscribes to the
	// key's release signal, so a forced release is noticed at once instead of at the next
	// renewal. Short leases never pay for the subscription.
	watchAfter = 500 * time.Millisecond
	// maxRenewRetry caps the pause between failed renewals.
	maxRenewRetry = 2 * time.Second
)

// Locker is the portable lock type every caller uses. It wraps one Driver and adds the
// parts written once for all backends: budgets with backoff, FIFO waiting woken by release
// signals, heartbeats, the lost-lease signal, and namespace rules.
//
// A Locker is safe for concurrent use.
type Locker struct {
	d         Driver
	poll      time.Duration
	lockDelay time.Duration
	log       *slog.Logger
	obs       Observer
	budget    func(key string) Budget

	mu         sync.Mutex
	closed     bool
	namespaces []string
	// owners maps an owner to the keys it holds or is acquiring in this Locker.
	owners map[string]map[string]*Lease
	// leases maps a key to the live leases this Locker holds on it (normally one).
	leases  map[string][]*Lease
	starter starter        // starts heartbeats when due
	wg      sync.WaitGroup // running heartbeats
}

// New returns a Locker over d. The Locker owns d: Close closes it.
func New(d Driver, opts Options) *Locker {
	l := &Locker{
		d:         d,
		poll:      opts.PollInterval,
		lockDelay: opts.LockDelay,
		log:       opts.Logger,
		obs:       opts.Observer,
		budget:    opts.DefaultBudget,
		owners:    make(map[string]map[string]*Lease),
		leases:    make(map[string][]*Lease),
	}
	if l.poll <= 0 {
		l.poll = DefaultPollInterval
	}
	if l.lockDelay <= 0 {
		l.lockDelay = DefaultLockDelay
	}
	if l.log == nil {
		l.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return l
}

// RegisterNamespace registers a mutator's key prefix (e.g. "coolify:", "mobile:"). A prefix
// that equals another or is a prefix of another is refused with ErrNamespace, naming both.
// An empty prefix is refused with ErrInvalid.
func (l *Locker) RegisterNamespace(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("register lock namespace: %w: empty prefix (use a prefix such as \"coolify:\")", ErrInvalid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ns := range l.namespaces {
		if strings.HasPrefix(ns, prefix) || strings.HasPrefix(prefix, ns) {
			return fmt.Errorf("register lock namespace %q: %w: it overlaps the registered namespace %q (give each mutator a prefix that is not a prefix of another)",
				prefix, ErrNamespace, ns)
		}
	}
	l.namespaces = append(l.namespaces, prefix)
	return nil
}

// namespaceOf returns the registered namespace of key, and whether the key may be taken.
// With no namespace registered every key is allowed and has none.
func (l *Locker) namespaceOf(key string) (string, bool) {
	if len(l.namespaces) == 0 {
		return "", true
	}
	for _, ns := range l.namespaces {
		if strings.HasPrefix(key, ns) {
			return ns, true
		}
	}
	return "", false
}

// ownerOf is r.Owner, or the holder up to its last '/'.
func ownerOf(r Request) string {
	if r.Owner != "" {
		return r.Owner
	}
	if i := strings.LastIndexByte(r.Holder, '/'); i > 0 {
		return r.Holder[:i]
	}
	return r.Holder
}

// budgetFor returns the budget Acquire uses for r: its own, or Options.DefaultBudget's.
func (l *Locker) budgetFor(r Request) Budget {
	if r.Budget.Timeout == 0 && r.Budget.MaxRetries == 0 && len(r.Budget.Backoff) == 0 {
		if l.budget != nil {
			return l.budget(r.Key)
		}
		return ServiceBudget
	}
	return r.Budget
}

func (l *Locker) validate(r Request) error {
	switch {
	case r.Key == "":
		return fmt.Errorf("acquire: %w: empty key (name a key such as \"coolify:phase1\")", ErrInvalid)
	case r.Holder == "":
		return fmt.Errorf("acquire %q: %w: empty holder (name the holder as <pipeline>#<build>/<step>)", r.Key, ErrInvalid)
	case r.TTL < 0 || (r.TTL > 0 && r.TTL < MinTTL):
		return fmt.Errorf("acquire %q: %w: ttl %s is below the minimum %s (use 0 for the default %s)", r.Key, ErrInvalid, r.TTL, MinTTL, DefaultTTL)
	}
	b := l.budgetFor(r)
	switch {
	case b.Timeout <= 0:
		return fmt.Errorf("acquire %q: %w: budget timeout %s must be positive (or leave the whole budget zero for the default)", r.Key, ErrInvalid, b.Timeout)
	case b.MaxRetries < 0:
		return fmt.Errorf("acquire %q: %w: budget max_retries %d must not be negative", r.Key, ErrInvalid, b.MaxRetries)
	}
	for _, d := range b.Backoff {
		if d < 0 {
			return fmt.Errorf("acquire %q: %w: negative backoff %s in budget", r.Key, ErrInvalid, d)
		}
	}
	return nil
}

// reserve checks the namespace rules for r and records the key as taken by its owner, so
// two concurrent acquires of one owner cannot slip into two namespaces.
func (l *Locker) reserve(r Request, owner string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("acquire %q: %w: the locker is closed", r.Key, ErrUnavailable)
	}
	ns, ok := l.namespaceOf(r.Key)
	if !ok {
		return fmt.Errorf("acquire %q: %w: the key is outside every registered namespace (%s); use a key under one of them",
			r.Key, ErrNamespace, strings.Join(l.namespaces, ", "))
	}
	held := l.owners[owner]
	if ns != "" {
		for k := range held {
			if other, _ := l.namespaceOf(k); other != ns {
				return fmt.Errorf("acquire %q for %q: %w: the same run holds %q of namespace %q; release it before taking a key of namespace %q",
					r.Key, owner, ErrNamespace, k, other, ns)
			}
		}
	}
	if _, dup := held[r.Key]; dup {
		return fmt.Errorf("acquire %q for %q: %w: the same run already holds or is acquiring this key in this process; release it first",
			r.Key, owner, ErrInvalid)
	}
	if held == nil {
		held = make(map[string]*Lease)
		l.owners[owner] = held
	}
	held[r.Key] = nil // reserved, not yet granted
	return nil
}

func (l *Locker) unreserve(owner, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropOwnerKey(owner, key)
}

func (l *Locker) dropOwnerKey(owner, key string) {
	if held := l.owners[owner]; held != nil {
		delete(held, key)
		if len(held) == 0 {
			delete(l.owners, owner)
		}
	}
}

// Acquire waits for r.Key within r.Budget and returns the held lease, kept alive by a
// heartbeat until Release or loss.
//
// Each attempt queues a ticket in the key's FIFO queue and waits up to Budget.Timeout for a
// release signal (bounded by the holder's remaining TTL and a slow jittered poll); between
// attempts it sleeps Budget.BackoffAfter(i).
//
// The owner (r.Owner, or the holder up to its last '/') is tracked in this Locker: it may
// not take a key it already holds or is acquiring here, and once namespaces are
// registered it may not hold keys of two namespaces at once.
//
// Errors: ErrInvalid (malformed request, TTL below MinTTL, or the owner already holds or
// is acquiring the key); ErrNamespace (key outside every registered namespace, or the
// owner holds a key of another namespace); *HeldError matching ErrBudgetExhausted (with
// the current holder) or, with FailOnFrozen, ErrFrozen; ctx.Err() wrapped
// (errors.Is(err, context.Canceled)); ErrUnavailable wrapped when the backend cannot be
// reached within the budget or the Locker is closed.
func (l *Locker) Acquire(ctx context.Context, r Request) (*Lease, error) {
	if err := l.validate(r); err != nil {
		return nil, err
	}
	if r.TTL == 0 {
		r.TTL = DefaultTTL
	}
	owner := ownerOf(r)
	if err := l.reserve(r, owner); err != nil {
		return nil, err
	}
	le, err := l.acquire(ctx, r, owner)
	if err != nil {
		l.unreserve(owner, r.Key)
		return nil, err
	}
	return le, nil
}

func (l *Locker) acquire(ctx context.Context, r Request, owner string) (*Lease, error) {
	b := l.budgetFor(r)
	start := time.Now()
	ids := newIDs()
	var (
		lastHeld *HeldError
		lastErr  error
	)
	for attempt := 0; attempt <= b.MaxRetries; attempt++ {
		if attempt > 0 {
			if err := ctxtime.Sleep(ctx, b.BackoffAfter(attempt-1)); err != nil {
				return nil, fmt.Errorf("acquire %q: canceled after %d attempt(s) over %s: %w",
					r.Key, attempt, time.Since(start).Round(time.Millisecond), err)
			}
		}
		le, err := l.attempt(ctx, r, owner, &ids, b.Timeout, start)
		if err == nil {
			return le, nil
		}
		var he *HeldError
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("acquire %q: canceled after %d attempt(s) over %s: %w",
				r.Key, attempt+1, time.Since(start).Round(time.Millisecond), ctx.Err())
		case errors.As(err, &he):
			if he.Reason == ErrFrozen && r.FailOnFrozen {
				he.Attempts, he.Waited = attempt+1, time.Since(start)
				return nil, he
			}
			lastHeld, lastErr = he, nil
		default:
			lastErr = err
		}
	}
	waited := time.Since(start)
	if lastErr != nil {
		return nil, fmt.Errorf("acquire %q: %d attempt(s) over %s: %w (check that the lock backend is up)",
			r.Key, b.MaxRetries+1, waited.Round(time.Millisecond), lastErr)
	}
	he := &HeldError{Key: r.Key, Reason: ErrBudgetExhausted, Attempts: b.MaxRetries + 1, Waited: waited}
	if lastHeld != nil {
		he.Current = lastHeld.Current
		he.Current.Token = ""
	}
	return nil, he
}

// attempt is one attempt of the budget: try, and while the key is held wait for a release
// signal, the holder's expiry or the fallback poll, then try again, until timeout.
func (l *Locker) attempt(ctx context.Context, r Request, owner string, ids *ids, timeout time.Duration, start time.Time) (*Lease, error) {
	// The attempt's end is a deadline, not a context with a timer, so an uncontended grant
	// starts no timer.
	ticket, deadline := ids.ticket, time.Now().Add(timeout)
	var sub Subscription
	defer func() {
		if sub != nil {
			_ = sub.Close()
		}
	}()
	queued := false
	for {
		le, err := l.try(ctx, r, owner, ids, start)
		if err == nil {
			return le, nil
		}
		var he *HeldError
		if !errors.As(err, &he) {
			if queued {
				l.leaveQueue(ctx, r.Key, ticket)
			}
			return nil, err
		}
		queued = true
		if he.Reason == ErrFrozen && r.FailOnFrozen {
			l.leaveQueue(ctx, r.Key, ticket)
			return nil, he
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			l.leaveQueue(ctx, r.Key, ticket)
			return nil, he
		}
		if sub == nil {
			// Subscribe only once the key is found held, so an uncontended acquire is one
			// backend step; then try again at once, since a release that came before the
			// subscription was active would otherwise be missed.
			s, err := l.subscribe(ctx, r.Key, deadline)
			if err != nil {
				l.leaveQueue(ctx, r.Key, ticket)
				if ctx.Err() == nil && !time.Now().Before(deadline) {
					return nil, he
				}
				return nil, err
			}
			sub = s
			continue
		}
		wait := min(l.jitteredPoll(), untilFree(he.Current, time.Now()), time.Until(deadline))
		t := time.NewTimer(wait)
		select {
		case <-sub.C():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if le, ok := l.handed(sub, r, owner, ids, start); ok {
			return le, nil
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			l.leaveQueue(ctx, r.Key, ticket)
			return nil, he
		}
	}
}

// subscribe subscribes to key's release signal, giving up at deadline.
func (l *Locker) subscribe(ctx context.Context, key string, deadline time.Time) (Subscription, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return l.d.Subscribe(ctx, key)
}

// untilFree is how long until the lease or lock-delay in cur ends by the local clock.
func untilFree(cur Info, now time.Time) time.Duration {
	var until time.Time
	switch {
	case cur.Holder != "" || cur.Token != "" || !cur.ExpiresAt.IsZero():
		until = cur.ExpiresAt
	case !cur.ClosedUntil.IsZero():
		until = cur.ClosedUntil
	default:
		// Free but queued behind other waiters: only a signal or the poll helps.
		return 1<<63 - 1
	}
	if d := until.Sub(now) + time.Millisecond; d > minWait {
		return d
	}
	return minWait
}

func (l *Locker) jitteredPoll() time.Duration {
	return time.Duration(float64(l.poll) * (0.5 + mrand.Float64()))
}

// ids are the random identifiers of one Acquire: its queue ticket, the token a release
// may hand the key to while the ticket is queued (see Handover), and a fresh token per try
// (the outcome of a failed try is unknown, and its token may still be released).
type ids struct {
	ticket   string
	handover string
	first    string // the first try's token; "" once used
}

// idEncoding spells 128 random bits in 26 characters, as crypto/rand.Text does.
var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newIDs draws the ticket, the handover token and the first token from one read of the
// random source.
func newIDs() ids {
	var b [48]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return ids{
		ticket:   idEncoding.EncodeToString(b[:16]),
		handover: idEncoding.EncodeToString(b[16:32]),
		first:    idEncoding.EncodeToString(b[32:]),
	}
}

// token returns the token of the next try.
func (x *ids) token() string {
	if t := x.first; t != "" {
		x.first = ""
		return t
	}
	return rand.Text()
}

// handed returns the lease a release handed to the ticket of ids (see Handover) as a
// running Lease. The grant happened at some point after the Acquire began (start), and the
// backend keeps it at least min(TTL, ticket life) from then: that is all a waiter can know
// of it, since the signal may arrive late — even after a later try found the key held, when
// the grant it names has expired and someone else holds the key. So the lease's local
// deadline counts from start; a lease that must be presumed expired by then is not
// believed, and the waiter's next try (which takes over a lease still held under its
// handover token, with a whole TTL) decides. Nor is one with less than half of that window
// left: its first renewal would have to come back within what is left, which a loaded
// host or a slow round trip misses (the lease is then lost at once); the next try costs one
// round trip and starts the lease afresh.
func (l *Locker) handed(sub Subscription, r Request, owner string, ids *ids, start time.Time) (*Lease, bool) {
	h, ok := sub.(Handover)
	if !ok {
		return nil, false
	}
	info, ok := h.Handed(ids.ticket)
	if !ok {
		return nil, false
	}
	token := ids.handover
	info.Key, info.Token, info.Holder, info.Message = r.Key, token, r.Holder, r.Message
	window := min(r.TTL, ticketLife*l.poll)
	now, deadline := time.Now(), localDeadline(start, window)
	if deadline.Sub(now) < window/2 {
		return nil, false
	}
	le, err := l.start(info, owner, r.TTL, now, deadline.Sub(now), deadline, time.Since(start))
	return le, err == nil
}

// try makes one TryAcquire with the next token of ids and turns a grant into a running Lease.
func (l *Locker) try(ctx context.Context, r Request, owner string, ids *ids, start time.Time) (*Lease, error) {
	token, sent := ids.token(), time.Now()
	info, err := l.d.TryAcquire(ctx, Grant{
		Key:            r.Key,
		Token:          token,
		Holder:         r.Holder,
		Message:        r.Message,
		TTL:            r.TTL,
		Ticket:         ids.ticket,
		Handover:       ids.handover,
		TicketDeadline: sent.Add(ticketLife * l.poll),
	})
	if err != nil {
		var he *HeldError
		if !errors.As(err, &he) {
			// The outcome is unknown: the grant may have happened with the answer lost. The
			// token is used by no one else, so releasing by it is safe either way.
			l.bestEffort(ctx, func(c context.Context) error { return l.d.Release(c, r.Key, token) })
		}
		return nil, err
	}
	info.Token = token
	if !time.Now().Before(localDeadline(sent, r.TTL)) {
		// The answer came after the lease must be presumed expired (a stalled backend or
		// network): someone else may hold the key by now. Never believe a late grant: give the
		// token back and count the try as held, so the attempt tries again.
		l.bestEffort(ctx, func(c context.Context) error { return l.d.Release(c, r.Key, token) })
		return nil, &HeldError{Key: r.Key, Reason: ErrHeld}
	}
	return l.start(info, owner, r.TTL, sent, r.TTL, localDeadline(sent, r.TTL), time.Since(start))
}

func (l *Locker) leaveQueue(ctx context.Context, key, ticket string) {
	l.bestEffort(ctx, func(c context.Context) error { return l.d.LeaveQueue(c, key, ticket) })
}

// bestEffort runs a cleanup call that must happen even when ctx has ended.
func (l *Locker) bestEffort(ctx context.Context, f func(context.Context) error) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = f(c) // a failed cleanup is bounded by the ticket deadline or the lease TTL
}

// start registers a lease that must be presumed expired at deadline and runs its
// heartbeat: the first renewal is due a third of life after base (the request's sending
// and the TTL for a grant; now and what is left for a handover).
func (l *Locker) start(info Info, owner string, ttl time.Duration, base time.Time, life time.Duration, deadline time.Time, waited time.Duration) (*Lease, error) {
	le := &Lease{
		l:        l,
		owner:    owner,
		ttl:      ttl,
		info:     info,
		deadline: deadline,
		granted:  time.Now(),
		renewAt:  base.Add(life / 3),
		check:    make(chan struct{}, 1),
		hbIndex:  -1,
	}
	le.ctx, le.end = context.WithCancelCause(context.Background())

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		le.end(ErrUnavailable)
		l.bestEffort(context.Background(), func(c context.Context) error { return l.d.Release(c, info.Key, info.Token) })
		return nil, fmt.Errorf("acquire %q: %w: the locker was closed during the acquire", info.Key, ErrUnavailable)
	}
	// Scheduled before the lease is published: a goroutine starts only when the first
	// renewal or the forced-release watch is due.
	le.hbDue = base.Add(min(watchAfter, life/3))
	l.starter.add(le)
	if held := l.owners[owner]; held != nil {
		held[info.Key] = le
	}
	l.leases[info.Key] = append(l.leases[info.Key], le)
	l.mu.Unlock()

	if l.obs != nil {
		l.obs.Acquired(info.Key, waited)
	}
	return le, nil
}

// localDeadline is when a lease granted or renewed by a request sent at sent must be
// presumed expired by the local monotonic clock.
func localDeadline(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - safetyMargin(ttl))
}

// safetyMargin is subtracted from a lease's TTL by its holder, to allow for clock drift
// between the holder and the backend.
func safetyMargin(ttl time.Duration) time.Duration {
	return min(ttl/20, time.Second)
}

// forget drops a finished lease from the Locker's bookkeeping.
func (l *Locker) forget(le *Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := le.info.Key
	if held := l.owners[le.owner]; held != nil && held[key] == le {
		l.dropOwnerKey(le.owner, key)
	}
	ls := slices.DeleteFunc(l.leases[key], func(x *Lease) bool { return x == le })
	if len(ls) == 0 {
		delete(l.leases, key)
	} else {
		l.leases[key] = ls
	}
}

// Held returns the keys this Locker currently holds for owner (in this process), sorted.
func (l *Locker) Held(owner string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for k, le := range l.owners[owner] {
		if le != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// ReleaseAll releases every lease owner holds, for work that ended abnormally (a recovered
// panic) without releasing its leases, and returns their keys.
func (l *Locker) ReleaseAll(ctx context.Context, owner string) []string {
	l.mu.Lock()
	var les []*Lease
	for _, le := range l.owners[owner] {
		if le != nil {
			les = append(les, le)
		}
	}
	l.mu.Unlock()
	var keys []string
	for _, le := range les {
		_ = le.Release(ctx)
		keys = append(keys, le.Key())
	}
	slices.Sort(keys)
	return keys
}

// Ping reports whether the backend is reachable.
func (l *Locker) Ping(ctx context.Context) error { return l.d.Ping(ctx) }

// Close stops every heartbeat (leases are left to expire, not released; their Err wraps
// ErrLost) and closes the driver. Acquires that are still running fail.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	var live []*Lease
	for _, ls := range l.leases {
		live = append(live, ls...)
	}
	l.mu.Unlock()
	for _, le := range live {
		le.stopHeartbeat()
	}
	l.starter.close()
	l.wg.Wait()
	for _, le := range live {
		le.finish(le.lostErr("the locker was closed; the lease is left to expire", nil), true)
	}
	return l.d.Close()
}
