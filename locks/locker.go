package locks

import (
	"context"
	"log/slog"
	"time"
)

// Options configure a Locker.
type Options struct {
	// PollInterval is the mean of the slow, jittered fallback poll a waiter does when no
	// release signal arrives (default 1.5s; jitter ±50%).
	PollInterval time.Duration
	// LockDelay is the default lock-delay after a forced release (default DefaultLockDelay).
	LockDelay time.Duration
	// Logger receives lease-lost and renewal-failure events (default: discard).
	Logger *slog.Logger
	// Observer, if set, is told about waits, holds, losses and forced releases (metrics).
	Observer Observer
}

// Observer receives lock events for metrics. Methods must not block.
type Observer interface {
	Acquired(key string, waited time.Duration)
	Released(key string, held time.Duration, lost bool)
	ForceReleased(key string)
}

// Locker is the portable lock type every caller uses. It wraps one Driver and adds the
// parts written once for all backends: budgets with backoff, FIFO waiting woken by release
// signals, heartbeats, the lost-lease signal, and namespace rules.
type Locker struct {
	// fields are the implementation's
}

// New returns a Locker over d. The Locker owns d: Close closes it.
func New(d Driver, opts Options) *Locker { panic("not implemented") }

// RegisterNamespace registers a mutator's key prefix (e.g. "coolify:", "mobile:"). A prefix
// that equals another or is a prefix of another is refused with ErrNamespace, naming both.
func (l *Locker) RegisterNamespace(prefix string) error { panic("not implemented") }

// Acquire waits for r.Key within r.Budget and returns the held lease, kept alive by a
// heartbeat until Release or loss.
//
// Errors: ErrInvalid; ErrNamespace (key outside every registered namespace, or r.Owner
// holds a key of another namespace); *HeldError matching ErrBudgetExhausted (with the
// current holder) or ErrFrozen; ctx.Err() wrapped (errors.Is(err, context.Canceled));
// ErrUnavailable wrapped when the backend cannot be reached within the budget.
func (l *Locker) Acquire(ctx context.Context, r Request) (*Lease, error) { panic("not implemented") }

// Get returns the live lease on key (without token) and its waiter count, or ErrNotFound.
func (l *Locker) Get(ctx context.Context, key string) (Info, error) { panic("not implemented") }

// List returns live leases (tokens cleared) whose key starts with prefix.
func (l *Locker) List(ctx context.Context, prefix string) ([]Info, error) { panic("not implemented") }

// ForceRelease is the operator's release of a crashed holder's lease. See Driver.ForceRelease.
// ErrInvalid without a reason or without exactly one of fence/holder.
func (l *Locker) ForceRelease(ctx context.Context, r ForceRequest) (Info, error) {
	panic("not implemented")
}

// Freeze puts an operator lease on a free key. See Driver.Freeze.
func (l *Locker) Freeze(ctx context.Context, r FreezeRequest) (Info, error) { panic("not implemented") }

// Unfreeze lifts an operator freeze.
func (l *Locker) Unfreeze(ctx context.Context, key, by, reason string) error {
	panic("not implemented")
}

// Audit returns operator actions, newest first.
func (l *Locker) Audit(ctx context.Context, limit int) ([]AuditEntry, error) {
	panic("not implemented")
}

// Held returns the keys this Locker currently holds for owner (in this process).
func (l *Locker) Held(owner string) []string { panic("not implemented") }

// Ping reports whether the backend is reachable.
func (l *Locker) Ping(ctx context.Context) error { panic("not implemented") }

// Close stops every heartbeat (leases are left to expire, not released) and closes the driver.
func (l *Locker) Close() error { panic("not implemented") }

// Lease is a held lock. Its heartbeat renews it at TTL/3 by compare-on-token.
type Lease struct {
	// fields are the implementation's
}

// Info returns the lease as granted or last renewed (Token included: it is the holder's).
func (le *Lease) Info() Info { panic("not implemented") }

// Key, Fence and Holder are shorthands for Info fields.
func (le *Lease) Key() string    { panic("not implemented") }
func (le *Lease) Fence() int64   { panic("not implemented") }
func (le *Lease) Holder() string { panic("not implemented") }

// Done is closed when the lease ends: released or lost.
func (le *Lease) Done() <-chan struct{} { panic("not implemented") }

// Err is nil while held; after Done it wraps ErrReleased or ErrLost (with the reason: expired
// before renewal, replaced by another token, force-released).
func (le *Lease) Err() error { panic("not implemented") }

// Context returns a context derived from parent that is canceled when the lease ends, with
// context.Cause(ctx) == le.Err(), so work running under the lease stops when it is lost.
func (le *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	panic("not implemented")
}

// Release stops the heartbeat and deletes the lease by compare-and-delete on its token.
// Releasing twice returns nil; releasing a lost lease returns an error matching ErrLost and
// never removes another holder's lease.
func (le *Lease) Release(ctx context.Context) error { panic("not implemented") }
