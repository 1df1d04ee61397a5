// Package locks is the lock protocol every deploy runs under: leases on keys such as
// "coolify:phase1" or "coolify:<uuid>", kept alive by a heartbeat, released by
// compare-and-delete on a token, numbered by fences that only grow, and acquired within an
// explicit budget of attempts and backoff.
//
// The package holds the contract and everything written once above the backends: the
// portable Locker type (budget, heartbeat, wake-up, namespaces, lease-loss signal) and the
// Driver interface that a backend implements. Backends live below it: locks/redislock for
// Redis (the production backend) and locks/sqlitelock for the embedded single-host default.
// locks/lockstest is the conformance suite both pass.
package locks

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
)

// Info is a snapshot of one lease as a backend stores it (orchestrator.LeaseInfo). The token
// is the lease's secret capability (release and renew compare on it); listings for humans
// must not show it.
type Info = orchestrator.LeaseInfo

// Budget bounds how long Acquire may wait (seed F40): up to 1+MaxRetries attempts, each
// waiting at most Timeout for the key, with Backoff[i] slept between attempt i+1 and i+2
// (the last entry repeats when there are more retries than entries).
type Budget struct {
	Timeout    time.Duration `json:"timeout"`
	MaxRetries int           `json:"max_retries"`
	Backoff    []time.Duration
}

// DefaultBackoff is the pause between attempts when a Budget names none.
var DefaultBackoff = []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second}

// Default budgets (seed F40).
var (
	ServiceBudget = Budget{Timeout: 30 * time.Second, MaxRetries: 2}
	PhaseBudget   = Budget{Timeout: 60 * time.Second, MaxRetries: 3}
)

// DefaultTTL is a lease's time to live when a request names none. The heartbeat renews it
// every TTL/3.
const DefaultTTL = 10 * time.Minute

// DefaultLockDelay is how long a key stays closed after a forced release, so the evicted
// holder can notice its loss before anyone else is granted the key.
const DefaultLockDelay = 5 * time.Second

// BackoffAfter returns the pause after the given 0-based attempt.
func (b Budget) BackoffAfter(attempt int) time.Duration {
	bo := b.Backoff
	if len(bo) == 0 {
		bo = DefaultBackoff
	}
	if attempt >= len(bo) {
		return bo[len(bo)-1]
	}
	return bo[attempt]
}

// MaxWait is the longest Acquire can take with this budget when the key never frees.
func (b Budget) MaxWait() time.Duration {
	total := time.Duration(b.MaxRetries+1) * b.Timeout
	for i := 0; i < b.MaxRetries; i++ {
		total += b.BackoffAfter(i)
	}
	return total
}

// Request asks for a lease.
type Request struct {
	Key string
	// Holder answers "who holds it": a run step's orchestrator.StepHolder ("prod#1234/api")
	// or a daemon's orchestrator.DaemonHolder.
	Holder string
	// Owner groups the leases of one run for the namespace rule (a run never holds keys of
	// two namespaces at once). Empty means the Holder up to its last '/'.
	Owner   string
	Message string
	TTL     time.Duration // 0 means DefaultTTL
	Budget  Budget        // zero means the Locker's Options.DefaultBudget for the key
	// FailOnFrozen makes Acquire fail at once with ErrFrozen when the key is frozen by an
	// operator, instead of waiting for the freeze to lift within the budget.
	FailOnFrozen bool
}

// ForceRequest is an operator's forced release. Exactly one of Fence or Holder must be set:
// what the operator saw, so a newer lease is never removed by mistake.
type ForceRequest struct {
	Key    string
	Fence  int64
	Holder string
	Reason string // required
	By     string // who asked (the caller's audit record names them; the backend keeps no trail)
	// LockDelay keeps the key closed after the release; 0 means DefaultLockDelay.
	LockDelay time.Duration
}

// FreezeRequest is an operator lease: a message and an expiry, no heartbeat.
type FreezeRequest struct {
	Key     string
	Message string // required
	// By names the operator; the freeze's holder reads "operator:<By>" on every backend
	// ("operator:unknown" when By is empty).
	By    string
	Until time.Time
}

// Sentinel errors. Backends return them wrapped with the key; callers test with errors.Is.
var (
	// ErrHeld: the key is held by someone else. Returned wrapped in a *HeldError.
	ErrHeld = errors.New("lock is held")
	// ErrBudgetExhausted: Acquire used every attempt of its budget; the *HeldError says who holds the key.
	ErrBudgetExhausted = errors.New("acquire budget exhausted")
	// ErrFrozen: the key is frozen by an operator.
	ErrFrozen = errors.New("lock is frozen by an operator")
	// ErrNotHeld: renew or release with a token that is not the current holder's.
	ErrNotHeld = errors.New("lease not held")
	// ErrLost: the lease was lost (expired before renewal, replaced, or force-released).
	ErrLost = errors.New("lease lost")
	// ErrReleased: the lease was released by its holder. Distinct from ErrLost.
	ErrReleased = errors.New("lease released")
	// ErrNotFound: nothing holds the key.
	ErrNotFound = errors.New("no lease on key")
	// ErrStale: a forced release named a fence or holder that is not the current one.
	ErrStale = errors.New("lease changed since it was seen")
	// ErrUnavailable: the backend could not be reached or answered with an error.
	ErrUnavailable = errors.New("lock backend unavailable")
	// ErrNamespace: the key is outside every registered namespace, or the owner already holds
	// a key of another namespace, or two registered namespaces overlap.
	ErrNamespace = errors.New("lock namespace violation")
	// ErrInvalid: a malformed request (empty key or holder, missing reason, ...).
	ErrInvalid = errors.New("invalid lock request")
)

// HeldError carries the lease that stands in the way. It matches ErrHeld, and also
// ErrBudgetExhausted, ErrFrozen or ErrStale when Reason says so.
type HeldError struct {
	Key    string
	Reason error // ErrHeld, ErrBudgetExhausted, ErrFrozen or ErrStale
	// Current is the lease found on the key (zero Holder when the key is in lock-delay).
	Current  Info
	Attempts int           // attempts made (Acquire only)
	Waited   time.Duration // time spent waiting (Acquire only)
}

func (e *HeldError) Error() string {
	var b strings.Builder
	reason := e.Reason
	if reason == nil {
		reason = ErrHeld
	}
	fmt.Fprintf(&b, "lock %q: %v", e.Key, reason)
	if e.Attempts > 0 {
		fmt.Fprintf(&b, " after %d attempt(s) over %s", e.Attempts, e.Waited.Round(time.Millisecond))
	}
	switch {
	case e.Current.Holder != "":
		fmt.Fprintf(&b, "; held by %q (fence %d) since %s until %s",
			e.Current.Holder, e.Current.Fence,
			e.Current.AcquiredAt.UTC().Format(time.RFC3339), e.Current.ExpiresAt.UTC().Format(time.RFC3339))
		if e.Current.Message != "" {
			fmt.Fprintf(&b, ": %q", e.Current.Message)
		}
	case !e.Current.ClosedUntil.IsZero():
		fmt.Fprintf(&b, "; closed after a forced release until %s", e.Current.ClosedUntil.UTC().Format(time.RFC3339))
	}
	switch reason {
	case ErrHeld:
		b.WriteString(" (wait for the holder to release it, or force-release a crashed holder with `orchestrator locks release`)")
	case ErrBudgetExhausted:
		b.WriteString(" (wait for the holder to finish, raise the budget, or force-release a crashed holder with `orchestrator locks release`)")
	case ErrFrozen:
		b.WriteString(" (lift the freeze with `orchestrator locks freeze --lift` or wait for it to expire)")
	case ErrStale:
		b.WriteString(" (list the locks again and name the current fence or holder)")
	}
	return b.String()
}

func (e *HeldError) Is(target error) bool {
	if target == ErrHeld {
		return true
	}
	return e.Reason != nil && target == e.Reason
}
