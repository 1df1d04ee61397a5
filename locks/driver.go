package locks

import (
	"context"
	"time"
)

// Driver is what a backend implements. Drivers stay small: each method is one atomic step
// on the backend (one Lua script on Redis, one transaction on SQLite) and turns backend
// errors into the contract's sentinels (wrapping ErrUnavailable for transport failures).
// Budget, heartbeat, wake-up, lost-lease detection and namespaces live in Locker, above
// every driver, and are written once.
//
// Locker validates every request and fills in what a backend stores (a freeze's holder,
// the default lock-delay) before it calls a driver: drivers do not check requests again and
// store what they are given, so every backend shows the same.
//
// Every method must be safe for concurrent use.
type Driver interface {
	// TryAcquire makes one atomic attempt to grant g.Key to g.Holder with g.Token.
	//
	// The key is granted when no live lease holds it, it is not in a lock-delay, and either
	// the waiter queue of the key is empty (after dropping waiters whose deadline passed) or
	// g.Ticket is at its head. The grant, the new fence (strictly greater than every fence
	// the key was ever granted, kept even across a backend restart where the backend can
	// lose data) and the lease metadata are written in the same atomic step; the granted
	// Info is returned and g.Ticket (if any) leaves the queue.
	//
	// When the key cannot be granted and g.Ticket is not empty, the ticket is queued (or its
	// place kept, with its deadline moved to g.TicketDeadline) in the same step, and a
	// *HeldError{Reason: ErrHeld or ErrFrozen} carrying the current lease (or the
	// lock-delay in Current.ClosedUntil) is returned.
	TryAcquire(ctx context.Context, g Grant) (Info, error)

	// LeaveQueue removes a waiter's ticket from the key's queue (no error if absent).
	LeaveQueue(ctx context.Context, key, ticket string) error

	// Renew extends the lease to now+ttl if token still holds key, returning the new
	// expiry. ErrNotHeld if the key is free or held under another token.
	Renew(ctx context.Context, key, token string, ttl time.Duration) (time.Time, error)

	// Release deletes the lease only if token still holds key (compare-and-delete) and
	// signals the key's waiters. ErrNotHeld otherwise; it never removes another holder's lease.
	Release(ctx context.Context, key, token string) error

	// Get returns the live lease on key with its waiter count; ErrNotFound if none (a key in
	// lock-delay returns ErrNotFound too, with nothing to show but the delay).
	Get(ctx context.Context, key string) (Info, error)

	// List returns the live leases whose key starts with prefix ("" for all), sorted by key,
	// with waiter counts.
	List(ctx context.Context, prefix string) ([]Info, error)

	// ForceRelease removes the live lease on r.Key if it matches r.Fence (when non-zero) or
	// r.Holder (when non-empty), closes the key until now+r.LockDelay (not at all when it is
	// not positive) and signals waiters, all in one atomic step. It returns the evicted
	// lease. (The caller records the action in the run store's audit log.)
	// *HeldError{Reason: ErrStale} names the current lease on a mismatch; ErrNotFound if free.
	ForceRelease(ctx context.Context, r ForceRequest) (Info, error)

	// Freeze puts an operator lease (Frozen, held by holder with token, no heartbeat,
	// expiring at r.Until) on a free key.
	// *HeldError{Reason: ErrHeld} if the key is held.
	Freeze(ctx context.Context, r FreezeRequest, holder, token string) (Info, error)

	// Unfreeze lifts a freeze and signals waiters, and returns the freeze it lifted (its
	// holder, fence, times and message). ErrNotFound if the key is not frozen.
	Unfreeze(ctx context.Context, key string) (Info, error)

	// Subscribe returns a subscription that receives a value (non-blocking send, buffered 1)
	// each time a lease on key is released, force-released or unfrozen. It returns only once
	// the subscription is active, so a release that follows cannot be missed. Signals may
	// still be lost (a dropped connection); Locker polls slowly as a fallback.
	Subscribe(ctx context.Context, key string) (Subscription, error)

	// Ping reports whether the backend is reachable.
	Ping(ctx context.Context) error

	// Close releases the driver's resources (connections, subscriptions). It does not
	// release leases.
	Close() error
}

// Grant is one acquire attempt.
type Grant struct {
	Key     string
	Token   string
	Holder  string
	Message string
	TTL     time.Duration
	// Ticket identifies the waiter in the key's FIFO queue; empty means "don't queue".
	Ticket string
	// Handover is the token under which a release may hand the key to Ticket while it is
	// queued (see Handover); the same for every try of one Ticket. Empty: never handed.
	Handover string
	// TicketDeadline is when a queued ticket is dropped unless refreshed by another attempt.
	TicketDeadline time.Time
}

// Subscription delivers release signals for one key.
type Subscription interface {
	C() <-chan struct{}
	Close() error
}

// Handover is implemented by the Subscription of a backend whose release hands the key
// straight to the waiter at the head of its queue, so the woken waiter holds the lease
// without another round trip.
//
// Such a backend grants the key, in the releaser's atomic step, to the Grant.Handover token
// of the ticket at the head of the queue, with its Holder and Message, expiring no sooner
// than the TTL or the TicketDeadline of the ticket's latest TryAcquire (the one that last
// moved its deadline), whichever comes first; the ticket leaves the queue and the signal
// names it. While the lease is held under the handover token, a TryAcquire with that
// token is granted it (under its own token and TTL), and LeaveQueue with the ticket
// releases it.
type Handover interface {
	// Handed returns the lease (Fence, AcquiredAt, ExpiresAt) a release granted to ticket,
	// if a signal said so, and forgets it.
	Handed(ticket string) (Info, bool)
}
