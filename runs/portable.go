package runs

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// maxAttempts bounds the optimistic retries of one Update. Each failed attempt means another
// writer's attempt succeeded, so this is only reached under extreme contention.
const maxAttempts = 100

// Portable is the Store over a Driver: the rules every backend shares are written here once
// (creation defaults and validation, Update's read-modify-write with its retry, event
// stamping, filters and cursors, the cache of decoded runs, in-process signals), and the
// driver only stores and reads. It is safe for concurrent use.
//
// Portable keeps the runs it wrote or read last decoded (a bounded cache, every entry
// checked against the stored version before use), so the engine's Updates neither read nor
// decode the run again, and a read of an unchanged run costs its version.
type Portable struct {
	d     Driver
	cache *cache
	hub   *hub

	closeMu sync.Mutex
	closed  bool // guarded by closeMu
}

var _ Store = (*Portable)(nil)

// New returns the Store over d. Close closes d.
func New(d Driver) *Portable {
	return &Portable{d: d, cache: newCache(0), hub: newHub()}
}

// held is the version of run id this store holds decoded (0: none), for the driver's reads.
func (s *Portable) held(id string) int64 { return s.cache.Version(id) }

// decode turns a driver's record into the run: the cached run when the record says the
// caller holds it (see Filter.ReadOnly for shared), else decoded and cached. ok is false
// when the cached run was evicted in between (read it again).
func (s *Portable) decode(rec Record, shared bool) (r Run, ok bool, err error) {
	if rec.Header == nil {
		r, ok = s.cache.Lookup(rec.ID, rec.Version, shared)
		return r, ok, nil
	}
	r, err = decodeRun(rec.ID, rec.Header, rec.Steps, rec.Legacy)
	if err != nil {
		return Run{}, false, err
	}
	r.Version = rec.Version
	s.cache.Put(r)
	if !shared {
		r = r.Clone()
	}
	return r, true, nil
}

// Create implements Store.
func (s *Portable) Create(ctx context.Context, in Run) (Run, bool, error) {
	r, err := prepareCreate(in, time.Now())
	if err != nil {
		return Run{}, false, err
	}
	e, err := EncodeRun(r)
	if err != nil {
		return Run{}, false, fmt.Errorf("create run: %w", err)
	}
	existing, err := s.d.Insert(ctx, r, e)
	if err != nil {
		return Run{}, false, Fail("create run", err)
	}
	if existing == "" {
		s.cache.Put(r)
		return r.Clone(), true, nil
	}
	got, err := s.Get(ctx, existing)
	if err != nil {
		return Run{}, false, fmt.Errorf("create run: idempotency key %q: %w", r.Trigger.IdempotencyKey, err)
	}
	if got.Trigger.IdempotencyHash != r.Trigger.IdempotencyHash {
		return Run{}, false, fmt.Errorf("create run: %w", &KeyReusedError{
			Pipeline: got.Pipeline, Key: got.Trigger.IdempotencyKey, RunID: got.ID})
	}
	return got, false, nil
}

// prepareCreate validates r for Create and fills its defaults: ID, status queued, CreatedAt
// now (UTC), Version 1. It returns a copy: the store keeps no alias of the caller's run.
func prepareCreate(r Run, now time.Time) (Run, error) {
	r = r.Clone()
	if r.Pipeline == "" {
		return r, fmt.Errorf("create run: empty pipeline: %w", ErrInvalid)
	}
	if r.Status == "" {
		r.Status = StatusQueued
	}
	if !r.Status.Valid() {
		return r, fmt.Errorf("create run: unknown status %q: %w", r.Status, ErrInvalid)
	}
	if r.Status.Terminal() {
		return r, fmt.Errorf("create run: status %q has ended: %w", r.Status, ErrInvalid)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	if r.CreatedAt.Before(time.Unix(0, 0)) {
		return r, fmt.Errorf("create run: created_at %s before 1970: %w", r.CreatedAt, ErrInvalid)
	}
	r.CreatedAt = r.CreatedAt.UTC()
	if r.ID == "" {
		r.ID = NewID(r.CreatedAt)
	}
	r.Version = 1
	r.Epoch = 1
	return r, nil
}

// Get implements Store.
func (s *Portable) Get(ctx context.Context, id string) (Run, error) {
	return s.get(ctx, id, false)
}

// Status implements Store.
func (s *Portable) Status(ctx context.Context, id string) (Status, error) {
	st, err := s.d.ReadStatus(ctx, id)
	if err != nil {
		return "", Fail(fmt.Sprintf("status of run %q", id), err)
	}
	return st, nil
}

// Owner implements Store: the run as this store holds it decoded, after a read that costs
// its version when it has not changed.
func (s *Portable) Owner(ctx context.Context, id string) (Ownership, error) {
	r, err := s.get(ctx, id, true)
	if err != nil {
		return Ownership{}, err
	}
	return OwnershipOf(r), nil
}

func (s *Portable) get(ctx context.Context, id string, shared bool) (Run, error) {
	op := fmt.Sprintf("get run %q", id)
	held := s.held(id)
	for {
		rec, err := s.d.Read(ctx, id, held)
		if err != nil {
			return Run{}, Fail(op, err)
		}
		r, ok, err := s.decode(rec, shared)
		if err != nil {
			return Run{}, Fail(op, err)
		}
		if ok {
			return r, nil
		}
		held = 0 // evicted since: read it whole
	}
}

// resolve decodes a record a listing read; a run evicted from the cache since the listing
// is read again whole. found is false when the run was pruned in between.
func (s *Portable) resolve(ctx context.Context, rec Record, shared bool) (r Run, found bool, err error) {
	r, ok, err := s.decode(rec, shared)
	if err != nil || ok {
		return r, err == nil, err
	}
	r, err = s.get(ctx, rec.ID, shared)
	if errors.Is(err, ErrNotFound) {
		return Run{}, false, nil
	}
	return r, err == nil, err
}

// List implements Store.
func (s *Portable) List(ctx context.Context, f Filter) (Page, error) {
	q, err := parseFilter(f)
	if err != nil {
		return Page{}, err
	}
	const op = "list runs"
	recs, next, err := s.d.List(ctx, q, s.held)
	if err != nil {
		return Page{}, Fail(op, err)
	}
	page := Page{Runs: make([]Run, 0, len(recs))}
	for _, rec := range recs {
		r, found, err := s.resolve(ctx, rec, f.ReadOnly)
		if err != nil {
			return Page{}, Fail(op, err)
		}
		if !found {
			continue // pruned in between
		}
		if len(q.Status) > 0 && !slices.Contains(q.Status, r.Status) {
			continue // its status changed between the index read and this one
		}
		page.Runs = append(page.Runs, r)
	}
	if next != "" {
		page.Next = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return page, nil
}

// parseFilter validates f. Errors: ErrInvalid.
func parseFilter(f Filter) (Query, error) {
	q := Query{Pipeline: f.Pipeline, Limit: f.Limit}
	switch {
	case f.Limit < 0:
		return q, fmt.Errorf("list runs: negative limit %d: %w", f.Limit, ErrInvalid)
	case f.Limit == 0:
		q.Limit = DefaultLimit
	case f.Limit > MaxLimit:
		q.Limit = MaxLimit
	}
	for _, st := range f.Status {
		if !st.Valid() {
			return q, fmt.Errorf("list runs: unknown status %q: %w", st, ErrInvalid)
		}
		if !slices.Contains(q.Status, st) {
			q.Status = append(q.Status, st)
		}
	}
	if f.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(f.Cursor)
		if err != nil || !validSortKey(string(b)) {
			return q, fmt.Errorf("list runs: malformed cursor: %w", ErrInvalid)
		}
		q.After = string(b)
	}
	return q, nil
}

// Update implements Store. It starts from the run this store holds decoded, if any, without
// reading it: the driver's version check tells whether it was still current. When another
// writer got in between, it reads the run and calls fn again.
//
// The run returned is shared with the store's cache: it is the caller's to read, not to
// change (Clone it first). Not copying it is most of what an Update costs the engine.
func (s *Portable) Update(ctx context.Context, id string, fn func(*Run) error, evs ...Event) (Run, error) {
	op := fmt.Sprintf("update run %q", id)
	stamped, err := stampEvents(id, evs, time.Now())
	if err != nil {
		return Run{}, err
	}
	cur, cached := s.cache.Get(id)
	for range maxAttempts {
		if !cached {
			if cur, err = s.get(ctx, id, true); err != nil {
				s.cache.Drop(id)
				return Run{}, err
			}
		}
		next, err := applyUpdate(cur, fn)
		if err != nil {
			if cached { // the cached copy may be stale: decide on the stored run
				cached = false
				continue
			}
			return Run{}, err
		}
		e, err := encodeUpdate(cur, next)
		if err != nil {
			return Run{}, fmt.Errorf("%s: %w", op, err)
		}
		written, err := s.d.Write(ctx, cur, next, e, stamped)
		switch {
		case err == nil:
			s.cache.Put(next)
			if len(written) > 0 {
				s.hub.Notify(id)
			}
			return next, nil
		case errors.Is(err, ErrVersion), cached && errors.Is(err, ErrNotFound):
			cached = false // another writer got in between (or the cached run is gone): read again
		default:
			s.cache.Drop(id)
			return Run{}, Fail(op, err)
		}
	}
	s.cache.Drop(id)
	return Run{}, fmt.Errorf("%s: %d attempts lost to concurrent writers: %w", op, maxAttempts, ErrConflict)
}

// encodeUpdate encodes what a write of next over cur sends: next's header and the steps
// that differ from cur's.
func encodeUpdate(cur, next Run) (Encoded, error) {
	header, err := encodeHeader(next)
	if err != nil {
		return Encoded{}, fmt.Errorf("encode: %w", err)
	}
	steps, err := encodeSteps(next, changedSteps(cur.Steps, next.Steps))
	if err != nil {
		return Encoded{}, err
	}
	return Encoded{SortKey: SortKey(cur.CreatedAt, cur.ID), Header: header, Steps: steps}, nil
}

// applyUpdate runs fn on a copy of stored under the rules of Update and returns the run to
// write: immutable fields restored, status checked, Version bumped. Errors: ErrEnded (fn not
// called), ErrInvalid, or fn's error, each wrapped with the run ID.
func applyUpdate(stored Run, fn func(*Run) error) (Run, error) {
	if stored.Status.Terminal() {
		return Run{}, fmt.Errorf("update run %q: %w (status %s)", stored.ID, ErrEnded, stored.Status)
	}
	next := stored.Clone()
	if fn != nil {
		if err := fn(&next); err != nil {
			return Run{}, fmt.Errorf("update run %q: %w", stored.ID, err)
		}
	}
	next.ID = stored.ID
	next.Pipeline = stored.Pipeline
	next.Trigger = stored.Trigger
	next.CreatedAt = stored.CreatedAt
	next.Epoch = max(next.Epoch, stored.Epoch)
	next.Version = stored.Version + 1
	if !next.Status.Valid() {
		return Run{}, fmt.Errorf("update run %q: unknown status %q: %w", stored.ID, next.Status, ErrInvalid)
	}
	return next, nil
}

// stampEvents validates evs and returns copies with RunID set and At set to now where zero
// (Seq is left to the driver). Errors: ErrInvalid.
func stampEvents(id string, evs []Event, now time.Time) ([]Event, error) {
	out := make([]Event, len(evs))
	for i, e := range evs {
		if e.Type == "" {
			return nil, fmt.Errorf("append to run %q: event %d has no type: %w", id, i, ErrInvalid)
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

// Append implements Store.
func (s *Portable) Append(ctx context.Context, id string, evs ...Event) ([]Event, error) {
	stamped, err := stampEvents(id, evs, time.Now())
	if err != nil {
		return nil, err
	}
	out, err := s.d.Append(ctx, id, stamped)
	if err != nil {
		return nil, Fail(fmt.Sprintf("append to run %q", id), err)
	}
	if len(out) > 0 {
		s.hub.Notify(id)
	}
	return out, nil
}

// Events implements Store.
func (s *Portable) Events(ctx context.Context, id string, afterSeq int64, limit int) ([]Event, error) {
	evs, err := s.d.Events(ctx, id, max(afterSeq, 0), limit)
	if err != nil {
		return nil, Fail(fmt.Sprintf("events of run %q", id), err)
	}
	return evs, nil
}

// Subscribe implements Store: a subscription in this process's hub, woken by this process's
// writes, and the driver's watch of the run for other processes' writes (Driver.Watch),
// stopped when the subscription closes.
func (s *Portable) Subscribe(ctx context.Context, id string) (Subscription, error) {
	s.closeMu.Lock()
	closed := s.closed
	s.closeMu.Unlock()
	if closed {
		return nil, Closed(fmt.Sprintf("subscribe to run %q", id))
	}
	// In the hub first, so that no signal the watch passes on is lost.
	sub := s.hub.Subscribe(id)
	stop, err := s.d.Watch(ctx, id, s.hub.Notify)
	if err != nil {
		_ = sub.Close()
		return nil, Fail(fmt.Sprintf("subscribe to run %q", id), err)
	}
	return &watched{Subscription: sub, stop: stop}, nil
}

// watched is a hub subscription and the driver's watch of its run.
type watched struct {
	Subscription
	stop func()
}

// Close stops the watch and drops the subscription.
func (w *watched) Close() error {
	w.stop()
	return w.Subscription.Close()
}

// Unfinished implements Store.
func (s *Portable) Unfinished(ctx context.Context, instance string) ([]Run, error) {
	op := fmt.Sprintf("unfinished runs of %q", instance)
	recs, err := s.d.Unfinished(ctx, instance, s.held)
	if err != nil {
		return nil, Fail(op, err)
	}
	out := make([]Run, 0, len(recs))
	for _, rec := range recs {
		r, found, err := s.resolve(ctx, rec, false)
		if err != nil {
			return nil, Fail(op, err)
		}
		if !found {
			continue // pruned in between
		}
		if r.Status.Terminal() || instance != "" && r.Instance != instance {
			continue // it ended or moved between the index read and this one
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Run) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Ping implements Store.
func (s *Portable) Ping(ctx context.Context) error {
	if err := s.d.Ping(ctx); err != nil {
		return Fail("ping run store", err)
	}
	return nil
}

// Close ends every subscription and closes the driver. Calling it again returns nil.
func (s *Portable) Close() error {
	s.closeMu.Lock()
	s.closed = true
	s.closeMu.Unlock()
	err := s.d.Close()
	s.hub.Close()
	return err
}
