package runs

import (
	"context"
	"errors"
)

// Store keeps runs and their event logs. Runs survive a restart of the daemon. Every method
// is safe for concurrent use, by goroutines of one process and (on the same backend) by
// several processes.
//
// Portable is the one implementation, over a backend's Driver; consumers (the engine, the
// API) depend on this interface, so a wrapper (cmd's paced store) or a test can stand in.
//
// Errors are wrapped with the run ID or the operation; callers test them with errors.Is
// against ErrNotFound, ErrConflict, ErrEnded, ErrInvalid and ErrUnavailable. A canceled
// context comes back wrapped, so errors.Is(err, context.Canceled) works.
type Store interface {
	// Create stores a new run and returns it as stored, with created == true.
	//
	// The store fills what is missing: ID (NewID), Status (queued) and CreatedAt (now, UTC);
	// it sets Version and Epoch to 1. Steps may be given (the engine lists every step as pending).
	//
	// When r.Trigger.IdempotencyKey is set and a run of the same pipeline was created with
	// that key, nothing is written and that run is returned with created == false. The check
	// and the write are one atomic step: concurrent Creates with one key yield one run. When
	// that run's Trigger.IdempotencyHash differs from r's, nothing is written either and the
	// error is a *KeyReusedError naming the run.
	//
	// Errors: ErrInvalid (empty pipeline, unknown status, a terminal status); ErrConflict
	// (r.ID given and already used); ErrKeyReused; ErrUnavailable.
	Create(ctx context.Context, r Run) (run Run, created bool, err error)

	// Get returns the run. Errors: ErrNotFound; ErrUnavailable.
	Get(ctx context.Context, id string) (Run, error)

	// Status returns the run's status alone, for a caller that needs no more: Follow asks
	// it on every wake-up, where a Get would read and decode every step of the run each time
	// an event is appended. Errors: ErrNotFound; ErrUnavailable.
	Status(ctx context.Context, id string) (Status, error)

	// Owner returns who executes the run now: its status, instance, ownership epoch (see
	// Run.Epoch) and who took it over. When the store holds the run decoded and it has not
	// changed, that costs one read of the stored version: an execution asks it before each
	// outside write. Errors: ErrNotFound; ErrUnavailable.
	Owner(ctx context.Context, id string) (Ownership, error)

	// List returns runs newest first (by CreatedAt, then ID), filtered by f, at most f.Limit
	// of them, with a cursor for the next page (empty on the last page). Runs created after
	// the first page was read do not shift later pages.
	//
	// Errors: ErrInvalid (bad cursor, unknown status, negative limit); ErrUnavailable.
	List(ctx context.Context, f Filter) (Page, error)

	// Update changes a run and appends events to its log in one atomic step: the store reads
	// the run, calls fn on it, writes the result and appends evs (see Append) together, and
	// returns the run as written. It is the engine's one call for "this step moved on, and
	// here is the event that says so".
	//
	// fn may be called more than once (when another writer got in between, the store reads
	// again and retries), so it must only change *Run. fn cannot change ID, Pipeline,
	// Trigger, CreatedAt or Version, nor lower Epoch: the store puts them back. If fn returns an error,
	// nothing is written and Update returns that error, wrapped.
	//
	// The run returned may be shared with the store's cache of decoded runs (Portable's
	// is): read it, never change it or the slices and maps in it; Clone it to change it.
	//
	// Errors: ErrNotFound; ErrEnded, without calling fn, when the stored run's status is
	// already terminal (so a run marked interrupted or canceled is not revived by a late
	// writer); ErrInvalid when fn leaves an unknown status; what fn returns; ErrUnavailable.
	Update(ctx context.Context, id string, fn func(*Run) error, evs ...Event) (Run, error)

	// Append adds events to the run's log and returns them with Seq, RunID and At filled.
	// Seqs are per run, start at 1, and grow by one per event in append order, with no gaps,
	// also under concurrent Appends and Updates. Appending to an ended run is allowed.
	//
	// Errors: ErrNotFound; ErrInvalid (an event without a type); ErrUnavailable.
	Append(ctx context.Context, id string, evs ...Event) ([]Event, error)

	// Events returns the run's events with Seq > afterSeq, in Seq order, at most limit of
	// them (limit <= 0 means all). Errors: ErrNotFound; ErrUnavailable.
	Events(ctx context.Context, id string, afterSeq int64, limit int) ([]Event, error)

	// Subscribe returns a subscription that receives a signal (non-blocking send, buffer 1)
	// after events are appended to the run. It returns once the subscription is active, so
	// an append that follows cannot be missed. Signals carry no data: read Events after the
	// last Seq seen. A signal may be lost when the backend connection drops, and the SQLite
	// store signals only within its own process; Follow therefore also polls, slowly.
	//
	// Errors: ErrUnavailable. Subscribing to a run that does not exist is not an error.
	Subscribe(ctx context.Context, id string) (Subscription, error)

	// Unfinished returns the runs that have not ended and whose Instance is instance (every
	// instance's when instance is empty), oldest first. A daemon reads its own on start and
	// a dead daemon's when it takes them over; it ends them with Update.
	//
	// Errors: ErrUnavailable.
	Unfinished(ctx context.Context, instance string) ([]Run, error)

	// Ping reports whether the backend is reachable (ErrUnavailable if not).
	Ping(ctx context.Context) error

	// Close releases the store's resources and ends its subscriptions (their channels stop
	// receiving). Stored data is kept.
	Close() error
}

// Subscription delivers "new events" signals for one run.
type Subscription interface {
	// C receives a value after events are appended to the run.
	C() <-chan struct{}
	// Close ends the subscription. It is safe to call more than once.
	Close() error
}

// Filter selects runs for List.
type Filter struct {
	Pipeline string   // empty: every pipeline
	Status   []Status // empty: every status; several: any of them
	// Limit is the page size: 0 means DefaultLimit, more than MaxLimit means MaxLimit.
	Limit int
	// Cursor is Page.Next from the previous page; empty for the first page.
	Cursor string
	// ReadOnly promises that the caller only reads the runs of the page (encodes or shows
	// them) and never changes them: the store may then answer runs that share their steps
	// and other slices and maps with its cache of decoded runs, instead of a copy of each
	// (copying was most of the cost of a page of cached runs). Without it, the runs are the
	// caller's own, to change at will.
	ReadOnly bool
}

// Page sizes for List.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// Page is one page of List.
type Page struct {
	Runs []Run `json:"runs"`
	// Next is the cursor of the next page; empty when this is the last page.
	Next string `json:"next,omitempty"`
}

// Sentinel errors of the Store contract. Stores return them wrapped; test with errors.Is.
var (
	// ErrNotFound: no run with that ID.
	ErrNotFound = errors.New("run not found")
	// ErrConflict: the run ID is already taken.
	ErrConflict = errors.New("run conflict")
	// ErrEnded: the run has already ended (terminal status) and cannot be updated.
	ErrEnded = errors.New("run has ended")
	// ErrInvalid: a malformed request (empty pipeline, unknown status, bad cursor, …).
	ErrInvalid = errors.New("invalid run request")
	// ErrUnavailable: the backend could not be reached or answered with an error.
	ErrUnavailable = errors.New("run store unavailable")
)
