// Package storekit is what every runs.Store backend does the same way: defaults and
// validation for Create, the read-modify-write rules of Update, event stamping, list
// filters and cursors, interrupted marking, and the in-process signal hub. Backends keep
// only their storage and atomicity.
package storekit

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// PrepareCreate validates r for Store.Create and fills its defaults: ID, status queued,
// CreatedAt now (UTC), Version 1. Errors: runs.ErrInvalid.
func PrepareCreate(r runs.Run, now time.Time) (runs.Run, error) {
	r = r.Clone()
	if r.Pipeline == "" {
		return r, fmt.Errorf("create run: empty pipeline: %w", runs.ErrInvalid)
	}
	if r.Status == "" {
		r.Status = runs.StatusQueued
	}
	if !r.Status.Valid() {
		return r, fmt.Errorf("create run: unknown status %q: %w", r.Status, runs.ErrInvalid)
	}
	if r.Status.Terminal() {
		return r, fmt.Errorf("create run: status %q has ended: %w", r.Status, runs.ErrInvalid)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	if r.CreatedAt.Before(time.Unix(0, 0)) {
		return r, fmt.Errorf("create run: created_at %s before 1970: %w", r.CreatedAt, runs.ErrInvalid)
	}
	r.CreatedAt = r.CreatedAt.UTC()
	if r.ID == "" {
		r.ID = runs.NewID(r.CreatedAt)
	}
	r.Version = 1
	return r, nil
}

// CheckReuse returns a *runs.KeyReusedError when existing, the run in.Trigger.IdempotencyKey
// names, was created for another request than in (another IdempotencyHash); nil otherwise.
// Create calls it when it finds the key taken.
func CheckReuse(existing, in runs.Run) error {
	if existing.Trigger.IdempotencyHash == in.Trigger.IdempotencyHash {
		return nil
	}
	return fmt.Errorf("create run: %w", &runs.KeyReusedError{
		Pipeline: existing.Pipeline, Key: existing.Trigger.IdempotencyKey, RunID: existing.ID})
}

// ApplyUpdate runs fn on a copy of stored under the rules of Store.Update and returns the run
// to write: immutable fields restored, status checked, Version bumped. Errors: runs.ErrEnded
// (fn not called), runs.ErrInvalid, or fn's error, each wrapped with the run ID.
func ApplyUpdate(stored runs.Run, fn func(*runs.Run) error) (runs.Run, error) {
	if stored.Status.Terminal() {
		return runs.Run{}, fmt.Errorf("update run %q: %w (status %s)", stored.ID, runs.ErrEnded, stored.Status)
	}
	next := stored.Clone()
	if fn != nil {
		if err := fn(&next); err != nil {
			return runs.Run{}, fmt.Errorf("update run %q: %w", stored.ID, err)
		}
	}
	next.ID = stored.ID
	next.Pipeline = stored.Pipeline
	next.Trigger = stored.Trigger
	next.CreatedAt = stored.CreatedAt
	next.Version = stored.Version + 1
	if !next.Status.Valid() {
		return runs.Run{}, fmt.Errorf("update run %q: unknown status %q: %w", stored.ID, next.Status, runs.ErrInvalid)
	}
	return next, nil
}

// StampEvents validates evs and returns copies with RunID set and At set to now where zero
// (Seq is left to the backend). Errors: runs.ErrInvalid.
func StampEvents(id string, evs []runs.Event, now time.Time) ([]runs.Event, error) {
	out := make([]runs.Event, len(evs))
	for i, e := range evs {
		if e.Type == "" {
			return nil, fmt.Errorf("append to run %q: event %d has no type: %w", id, i, runs.ErrInvalid)
		}
		e.RunID = id
		if e.At.IsZero() {
			e.At = now
		}
		e.At = e.At.UTC()
		out[i] = e
	}
	return out, nil
}

// Query is a validated runs.Filter.
type Query struct {
	Pipeline string
	Status   []runs.Status // deduplicated; empty means all
	Limit    int
	// After is the sort key of the last run of the previous page ("" for the first page):
	// this page holds runs whose sort key is strictly smaller.
	After string
}

// ParseFilter validates f. Errors: runs.ErrInvalid.
func ParseFilter(f runs.Filter) (Query, error) {
	q := Query{Pipeline: f.Pipeline, Limit: f.Limit}
	switch {
	case f.Limit < 0:
		return q, fmt.Errorf("list runs: negative limit %d: %w", f.Limit, runs.ErrInvalid)
	case f.Limit == 0:
		q.Limit = runs.DefaultLimit
	case f.Limit > runs.MaxLimit:
		q.Limit = runs.MaxLimit
	}
	for _, s := range f.Status {
		if !s.Valid() {
			return q, fmt.Errorf("list runs: unknown status %q: %w", s, runs.ErrInvalid)
		}
		if !slices.Contains(q.Status, s) {
			q.Status = append(q.Status, s)
		}
	}
	if f.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(f.Cursor)
		if err != nil || !validSortKey(string(b)) {
			return q, fmt.Errorf("list runs: malformed cursor: %w", runs.ErrInvalid)
		}
		q.After = string(b)
	}
	return q, nil
}

// sortKeyDigits is the width of the zero-padded UnixNano at the front of a sort key.
const sortKeyDigits = 19

// SortKey orders runs for List: newest first is descending sort key. It is the creation
// time in nanoseconds, zero-padded, then the ID, so byte order is (CreatedAt, ID) order.
func SortKey(r runs.Run) string {
	return fmt.Sprintf("%0*d:%s", sortKeyDigits, r.CreatedAt.UnixNano(), r.ID)
}

// PruneBefore returns the sort key below which Prune deletes ended runs under r: the later
// of the age cutoff (created before now - r.MaxAge) and nthNewest, the sort key of the
// r.MaxRuns-th newest run ("" when the store holds fewer). "" means nothing is old enough.
// Errors: runs.ErrInvalid for a negative limit.
func PruneBefore(r runs.Retention, now time.Time, nthNewest string) (string, error) {
	if r.MaxAge < 0 || r.MaxRuns < 0 {
		return "", fmt.Errorf("prune: negative max age %s or max runs %d: %w", r.MaxAge, r.MaxRuns, runs.ErrInvalid)
	}
	before := ""
	if r.MaxAge > 0 {
		before = fmt.Sprintf("%0*d:", sortKeyDigits, now.Add(-r.MaxAge).UnixNano())
	}
	if r.MaxRuns > 0 && nthNewest > before {
		before = nthNewest
	}
	return before, nil
}

// PruneBatch is how many runs Prune deletes per write, so a write lock is never held long.
const PruneBatch = 200

// SplitSortKey returns the parts of a sort key made by SortKey.
func SplitSortKey(k string) (createdNS int64, id string, err error) {
	if !validSortKey(k) {
		return 0, "", errors.New("malformed sort key")
	}
	ns, err := strconv.ParseInt(k[:sortKeyDigits], 10, 64)
	return ns, k[sortKeyDigits+1:], err
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

// Cursor is the runs.Page.Next that continues after r.
func Cursor(r runs.Run) string { return CursorAt(SortKey(r)) }

// CursorAt is the runs.Page.Next that continues after the run with sort key sk.
func CursorAt(sk string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(sk))
}

// ErrClosed is the cause returned by every store method after Close.
var ErrClosed = errors.New("store is closed")

// Fail wraps a backend error for op: context errors and the contract's sentinels pass
// through; anything else (transport, server, file errors) is runs.ErrUnavailable.
func Fail(op string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, runs.ErrNotFound), errors.Is(err, runs.ErrConflict),
		errors.Is(err, runs.ErrEnded), errors.Is(err, runs.ErrInvalid),
		errors.Is(err, runs.ErrUnavailable):
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, runs.ErrUnavailable, err)
}
