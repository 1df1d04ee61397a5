package secrets

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/deploy-orchestrator/orchestrator/internal/panics"
)

// Ref names one secret: the source it comes from, by the name the pipeline gives that source,
// and its key there.
type Ref struct {
	Source string `json:"source"`
	Key    string `json:"key"`
}

// String is "source:key".
func (r Ref) String() string { return r.Source + ":" + r.Key }

// ErrUnknownSource is matched (errors.Is) when a Ref names a source the Resolver was not given.
var ErrUnknownSource = errors.New("unknown secrets source")

// ErrSource is matched (errors.Is) by every *SourceError.
var ErrSource = errors.New("secrets source failed")

// SourceError is the failure of one source during a Resolve: a missing key (errors.Is
// ErrMissing), the source unreachable or refusing, or a panic in the source (errors.Is
// panics.ErrPanic). It names the source as the pipeline does, never a value.
type SourceError struct {
	Source string
	Err    error
}

func (e *SourceError) Error() string { return fmt.Sprintf("source %q: %v", e.Source, e.Err) }

// Unwrap returns the source's error.
func (e *SourceError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrSource) true.
func (e *SourceError) Is(target error) bool { return target == ErrSource }

// Snapshotter is implemented by a Source that can read everything it holds in one call, such
// as a folder of a remote secrets manager. Snapshot returns a Source that serves from that one
// reading, in memory, with the same errors Fetch would give.
type Snapshotter interface {
	Snapshot(ctx context.Context) (Source, error)
}

// Resolver resolves Refs against named sources for the length of one run.
//
// Each Resolve call asks every source it needs exactly once, with all of that source's keys,
// and the sources in parallel. What it gets is kept until Forget, so a later call (the next
// service of the same run) asks only for keys not yet resolved. A source that is a Snapshotter
// is read once per run, at its first use, and every later key is served from that snapshot, so
// a run makes one remote call per such source however its services ask; the snapshot holds
// the source's other values in memory until Forget.
//
// Create one Resolver per run and call Forget when the run no longer needs the values; do not
// share one across runs, or a changed secret would not be seen.
//
// A Resolver is safe for concurrent use; concurrent Resolve calls take turns, so a key is
// never fetched twice.
type Resolver struct {
	sources map[string]Source
	turn    chan struct{} // holds one token; whoever holds it owns cache and snaps
	cache   map[Ref]string
	snaps   map[string]Source // snapshots of Snapshotter sources taken in this run
}

// NewResolver returns a Resolver over sources, keyed by the names Refs use.
func NewResolver(sources map[string]Source) *Resolver {
	r := &Resolver{
		sources: maps.Clone(sources),
		turn:    make(chan struct{}, 1),
		cache:   make(map[Ref]string),
		snaps:   make(map[string]Source),
	}
	r.turn <- struct{}{}
	return r
}

// Resolve returns the values of refs.
//
// It returns an error wrapping ErrUnknownSource for a Ref whose source was not given, and,
// per failing source, a *SourceError (ErrSource) naming it, all joined with errors.Join
// so that one run reports every missing key at once (errors.Is(err, ErrMissing) finds them).
// It returns ctx's error when ctx ends first. No error contains a value.
func (r *Resolver) Resolve(ctx context.Context, refs ...Ref) (Resolved, error) {
	select {
	case <-r.turn:
	case <-ctx.Done():
		return Resolved{}, ctx.Err()
	}
	defer func() { r.turn <- struct{}{} }()

	need, errs := r.needed(refs)
	errs = append(errs, r.keep(need, r.fetch(ctx, need))...)
	if err := ctx.Err(); err != nil {
		return Resolved{}, err
	}
	if len(errs) > 0 {
		return Resolved{}, errors.Join(errs...)
	}

	out := make(map[Ref]string, len(refs))
	for _, ref := range refs {
		out[ref] = r.cache[ref]
	}
	return Resolved{m: func() map[Ref]string { return out }}, nil
}

// needed groups the keys of refs not yet resolved by source, each key once, in the order
// asked; a Ref of a source not given is an error.
func (r *Resolver) needed(refs []Ref) (map[string][]string, []error) {
	need := make(map[string][]string)
	var errs []error
	for _, ref := range refs {
		if _, ok := r.cache[ref]; ok {
			continue
		}
		if _, ok := r.sources[ref.Source]; !ok {
			errs = append(errs, fmt.Errorf("resolve %s: %w %q", ref, ErrUnknownSource, ref.Source))
			continue
		}
		if !slices.Contains(need[ref.Source], ref.Key) {
			need[ref.Source] = append(need[ref.Source], ref.Key)
		}
	}
	return need, errs
}

// fetched is what one source answered a Resolve.
type fetched struct {
	source string
	snap   Source // a snapshot taken by this call
	vals   Values
	err    error
}

// fetch asks every source in need for its keys, all at once, a Snapshotter not yet
// snapshotted in this run for its snapshot first. The answers are sorted by source.
func (r *Resolver) fetch(ctx context.Context, need map[string][]string) []fetched {
	results := make([]fetched, 0, len(need))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, keys := range need {
		src, snapped := r.snaps[name]
		if !snapped {
			src = r.sources[name]
		}
		wg.Go(func() {
			res := fetched{source: name}
			// A panicking source fails this Resolve, not the process.
			res.err = panics.Call(func() error {
				if s, ok := src.(Snapshotter); ok && !snapped {
					snap, err := s.Snapshot(ctx)
					if err != nil {
						// Keep no snapshot: a failed one may be a typed nil (a nil
						// *T in a Source) that a later Resolve would call.
						return err
					}
					res.snap, src = snap, snap
				}
				var err error
				res.vals, err = src.Fetch(ctx, keys)
				return err
			})
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(results, func(a, b fetched) int { return cmp.Compare(a.source, b.source) })
	return results
}

// keep caches the snapshots taken and the values fetched, and returns, per failing source,
// a *SourceError.
func (r *Resolver) keep(need map[string][]string, results []fetched) []error {
	var errs []error
	for _, res := range results {
		if res.snap != nil {
			r.snaps[res.source] = res.snap
		}
		if res.err != nil {
			errs = append(errs, &SourceError{Source: res.source, Err: res.err})
			continue
		}
		for _, k := range need[res.source] {
			v, ok := res.vals.Get(k)
			if !ok {
				// A Source must return every key or fail; catch one that does not.
				errs = append(errs, &SourceError{Source: res.source,
					Err: &MissingError{Source: res.source, Keys: []string{k}}})
				continue
			}
			r.cache[Ref{Source: res.source, Key: k}] = v
		}
	}
	return errs
}

// Forget drops every value and snapshot the Resolver holds. Call it when the run no longer
// needs them. A later Resolve fetches again.
func (r *Resolver) Forget() {
	<-r.turn
	clear(r.cache)
	clear(r.snaps)
	r.turn <- struct{}{}
}

// Resolved holds the values of resolved Refs. Like Values, it never prints, logs or encodes a
// value, and keeps its map in a closure so that fmt cannot reach it.
type Resolved struct {
	m func() map[Ref]string
}

func (r Resolved) data() map[Ref]string {
	if r.m == nil {
		return nil
	}
	return r.m()
}

// Get returns the value of ref and whether it was resolved.
func (r Resolved) Get(ref Ref) (string, bool) {
	v, ok := r.data()[ref]
	return v, ok
}

// Len is the number of resolved Refs.
func (r Resolved) Len() int {
	return len(r.data())
}

// Refs returns the resolved Refs, sorted by source then key.
func (r Resolved) Refs() []Ref {
	if r.m == nil {
		return nil
	}
	return slices.SortedFunc(maps.Keys(r.data()), func(a, b Ref) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Key, b.Key))
	})
}

// String shows the Refs and hides the values.
func (r Resolved) String() string {
	refs := r.Refs()
	names := make([]string, len(refs))
	for i, ref := range refs {
		names[i] = ref.String()
	}
	return describe("secrets.Resolved", names)
}

// GoString is String.
func (r Resolved) GoString() string { return r.String() }

// Format prints String for every verb.
func (r Resolved) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(r.String())) }

// LogValue makes slog show the Refs only.
func (r Resolved) LogValue() slog.Value { return slog.StringValue(r.String()) }

// MarshalJSON encodes every value as "[redacted]", keyed by "source:key".
func (r Resolved) MarshalJSON() ([]byte, error) {
	out := make(map[string]string, r.Len())
	for _, ref := range r.Refs() {
		out[ref.String()] = redacted
	}
	return json.Marshal(out)
}

// MarshalText is String.
func (r Resolved) MarshalText() ([]byte, error) { return []byte(r.String()), nil }
