package runs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Driver is what a run-store backend implements; Portable is the Store written once above
// it. Drivers stay small: each method is one atomic step on the backend (one Lua script or
// pipeline on Redis, one transaction on SQLite) over runs already validated and encoded by
// Portable. Creation defaults, the rules of Update (immutable fields, ended runs, versions),
// event stamping, filter validation and cursors, the cache of decoded runs, the optimistic
// retry and the in-process signals live in Portable, once.
//
// A driver returns the contract's sentinels (ErrNotFound, ErrConflict, ErrVersion) where
// its method says so and context errors as they are; every other error counts as
// ErrUnavailable (Portable wraps it so). Every method must be safe for concurrent use.
type Driver interface {
	// Insert stores the new run r (validated, its defaults filled, Version 1) as e encodes it,
	// unless r.Trigger.IdempotencyKey is set and a run of r.Pipeline was created with that
	// key: then nothing is written and that run's ID is returned. The check and the write
	// are one atomic step. ErrConflict when r.ID is taken.
	Insert(ctx context.Context, r Run, e Encoded) (existing string, err error)

	// Read returns run id as stored. When held is its stored version, the record carries
	// the version only (Header nil): the caller holds that run decoded. ErrNotFound.
	Read(ctx context.Context, id string, held int64) (Record, error)

	// ReadStatus returns run id's status as stored, without reading the run. ErrNotFound.
	ReadStatus(ctx context.Context, id string) (Status, error)

	// Write replaces the stored run cur by next if cur.Version is still the stored version:
	// next's header (e.Header), the steps e.Steps (those that differ from cur's; a run stored
	// whole by an older build gets EncodeRun(next).Steps instead), dropping the steps past next's end;
	// it appends evs (stamped; Seq is the driver's to set), keeps its indexes (status,
	// instance) current and signals the run's subscribers in other processes (Watch), all in
	// one atomic step. It sets each event's Seq and returns them.
	//
	// Errors: ErrNotFound; ErrVersion when the stored version is not cur.Version.
	Write(ctx context.Context, cur, next Run, e Encoded, evs []Event) ([]Event, error)

	// Append adds evs (stamped) to the run's log, numbering them after its last seq, and
	// signals subscribers in other processes; it returns them with Seq set. ErrNotFound.
	Append(ctx context.Context, id string, evs []Event) ([]Event, error)

	// Events returns the run's events with Seq > afterSeq in Seq order, at most limit of
	// them (limit <= 0: all). ErrNotFound when the run does not exist.
	Events(ctx context.Context, id string, afterSeq int64, limit int) ([]Event, error)

	// List returns the records of the runs q selects, newest first (descending sort key),
	// at most q.Limit; held(id) is the version the caller holds of a run (0: none), as for
	// Read. When there may be more, next is the sort key of the last run considered (the
	// next page starts below it); "" on the last page. A record whose run's status no longer
	// matches q (it changed between two reads) may be answered: Portable drops it.
	List(ctx context.Context, q Query, held func(id string) int64) (recs []Record, next string, err error)

	// Unfinished returns the records of every run that has not ended and whose Instance is
	// instance (every instance's when it is empty), in any order; held as for List. Runs
	// that ended or changed instance meanwhile may be answered: Portable drops them.
	Unfinished(ctx context.Context, instance string, held func(id string) int64) ([]Record, error)

	// Watch starts passing signal the run's ID each time another process appends events to
	// run id, and returns once that is active, with the function that stops it (safe to call
	// more than once, also after Close). Portable calls it for each Subscribe and stop when
	// that subscription closes, so a process hears of the runs it follows only, however many
	// processes write; signals of this process's own writes come from Portable. A driver
	// whose backend cannot signal across processes returns a stop that does nothing and never
	// calls signal (Follow polls slowly).
	Watch(ctx context.Context, id string, signal func(id string)) (stop func(), err error)

	// Ping reports whether the backend is reachable.
	Ping(ctx context.Context) error

	// Close releases the driver's resources and stops Watch. Stored data is kept. Calling it
	// again returns nil; other methods fail after it.
	Close() error
}

// ErrVersion is a Driver's answer to a Write whose run changed since it was read (another
// writer got in between). Portable reads again and retries; Store callers never see it.
var ErrVersion = errors.New("run version changed")

// Encoded is a run as Portable hands it to a driver: the run without its steps as JSON (the
// header, small and rewritten on every write), and one JSON document per step position.
type Encoded struct {
	// SortKey orders runs for List: see SortKey.
	SortKey string
	Header  []byte
	// Steps are every step for Insert; for Write, those that differ from the stored run's.
	Steps []StepData
}

// StepData is one step's JSON at its position in Run.Steps.
type StepData struct {
	Pos  int
	Data []byte
}

// Record is a run as a driver reads it: its ID, version, header and step JSON in position
// order. Header nil means the reader already holds this version decoded. Legacy means
// Header is the whole run as older builds stored it (steps inside) and Steps is empty.
type Record struct {
	ID      string
	Version int64
	Header  []byte
	Steps   [][]byte
	Legacy  bool
}

// Query is a validated Filter, as List hands it to a driver.
type Query struct {
	Pipeline string   // empty: every pipeline
	Status   []Status // deduplicated; empty means all
	Limit    int      // 1..MaxLimit
	// After is the sort key of the last run of the previous page ("" for the first page):
	// this page holds runs whose sort key is strictly smaller.
	After string
}

// sortKeyDigits is the width of the zero-padded UnixNano at the front of a sort key.
const sortKeyDigits = 19

// SortKey orders runs for List: newest first is descending sort key. It is the creation
// time in nanoseconds, zero-padded, a colon, then the ID, so byte order is (CreatedAt, ID)
// order. SortKey(t, "") sorts before every run created at t or later.
func SortKey(created time.Time, id string) string {
	return fmt.Sprintf("%0*d:%s", sortKeyDigits, created.UnixNano(), id)
}

// SplitSortKey returns the parts of a sort key made by SortKey.
func SplitSortKey(k string) (created time.Time, id string, err error) {
	if !validSortKey(k) {
		return time.Time{}, "", errors.New("malformed sort key")
	}
	ns, err := strconv.ParseInt(k[:sortKeyDigits], 10, 64)
	return time.Unix(0, ns).UTC(), k[sortKeyDigits+1:], err
}

func validSortKey(k string) bool {
	if len(k) < sortKeyDigits+2 || k[sortKeyDigits] != ':' {
		return false
	}
	for _, c := range k[:sortKeyDigits] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// errClosed is the cause of every error after Close.
var errClosed = errors.New("store is closed")

// Closed is the error a driver returns for op after Close.
func Closed(op string) error { return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, errClosed) }

// Fail wraps a backend error for op: context errors and the contract's sentinels pass
// through; anything else (transport, server, file errors) becomes ErrUnavailable. Portable
// applies it to every driver error; drivers apply it in the contracts they implement
// directly (MarkStore, ReportStore, Pruner, Deliveries).
func Fail(op string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, ErrNotFound), errors.Is(err, ErrConflict),
		errors.Is(err, ErrEnded), errors.Is(err, ErrInvalid),
		errors.Is(err, ErrUnavailable), errors.Is(err, ErrFenceBehind),
		errors.Is(err, ErrNotClaimed):
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}
