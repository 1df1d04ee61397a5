package coolify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// How the wait for a deployment spends the request budget
//
// [Client.WaitDeployment] does not read its deployment every tick. At each tick it looks at
// the list of the team's queued and in_progress deployments (GET /deployments: one request
// for every deployment in flight), and reads its own deployment (GET /deployments/{uuid})
// only once that list no longer shows it, to learn how it ended. Ticks are points of a grid
// on the wall clock (multiples of the tick since the Unix epoch), so every wait of the
// client, and with a shared [Board] every daemon's, looks at the same moments and takes the
// same list: N deployments in flight cost one request per tick, not N. A deployment's end is
// seen at the first grid point after it: within one tick.
//
// The tick adapts: it starts at the client's poll interval ([WithPollInterval]) and grows,
// by powers of two up to maxTickFactor times the interval, to about 1/LooksPerDeployment of
// the time the client's recent deployments took (this application's, when they were
// shorter), or of the time this wait has lasted, when that is longer (nothing learned yet,
// or a deployment queued long), so the looks per deployment stay about the same however
// long deployments take; and it doubles
// while looks wait for the request budget (the client's limiter, [WithLimiter]) longer than
// a quarter of the poll interval, until they find it free again.

// LooksPerDeployment is about how many looks at the active deployments a wait for a
// deployment of the expected length takes (between it and twice it: ticks are powers of two
// times the poll interval).
const LooksPerDeployment = 6

// maxTickFactor bounds the tick: at most this many poll intervals.
const maxTickFactor = 32

// keptDurations is how many recent deployment durations are kept per application.
const keptDurations = 5

// A Board shares the list of active deployments among the clients of one Coolify instance
// and token: those of one daemon (the default, in this process) or, with [WithBoard], those
// of every daemon sharing, for example, a Redis (internal/pacing's Redis board).
type Board interface {
	// Share returns the list as it was at grid point at or later: the one stored for at or a
	// later point, else what fetch returns (stored for at). Among those sharing the board,
	// fetch is called at most once per point while it succeeds and its caller lives.
	Share(ctx context.Context, at time.Time, fetch func(context.Context) ([]byte, error)) ([]byte, error)
}

// WithBoard makes the client share its look at the active deployments through b (default:
// a board of its own, shared by its waits).
func WithBoard(b Board) Option {
	return func(c *Client) {
		if b != nil {
			c.board = b
		}
	}
}

// LocalBoard is a [Board] in this process: concurrent asks for the same point share one
// fetch. Its zero value is ready to use.
type LocalBoard struct {
	mu     sync.Mutex
	at     time.Time
	data   []byte
	flight *flight
}

// flight is a fetch under way for the point at.
type flight struct {
	at   time.Time
	done chan struct{}
	data []byte
	err  error
}

// Share implements [Board].
func (b *LocalBoard) Share(ctx context.Context, at time.Time, fetch func(context.Context) ([]byte, error)) ([]byte, error) {
	b.mu.Lock()
	if b.data != nil && !b.at.Before(at) {
		d := b.data
		b.mu.Unlock()
		return d, nil
	}
	if f := b.flight; f != nil && !f.at.Before(at) {
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-f.done:
		}
		if f.err == nil {
			return f.data, nil
		}
		// The fetch failed (perhaps only its caller went away): try once more alone.
		return fetch(ctx)
	}
	f := &flight{at: at, done: make(chan struct{})}
	b.flight = f
	b.mu.Unlock()

	f.data, f.err = fetch(ctx)
	b.mu.Lock()
	if f.err == nil && at.After(b.at) {
		b.at, b.data = at, f.data
	}
	if b.flight == f {
		b.flight = nil
	}
	b.mu.Unlock()
	close(f.done)
	return f.data, f.err
}

// pacedKey carries, in a look's context, the time its calls waited for the budget.
type pacedKey struct{}

// withPaced returns a context whose calls add the time they wait on the client's limiter
// to *waited.
func withPaced(ctx context.Context, waited *atomic.Int64) context.Context {
	return context.WithValue(ctx, pacedKey{}, waited)
}

// measuredLimiter is asked before each attempt: it waits on the client's limiter (l, if
// any), tells a look (withPaced) how long that took, and counts the attempt's purpose. It
// passes a hold on to l.
type measuredLimiter struct {
	l        outbound.Limiter
	purposes func(Purpose)
}

func (m measuredLimiter) Wait(ctx context.Context, p outbound.Priority) error {
	if m.l != nil {
		start := time.Now()
		if err := m.l.Wait(ctx, p); err != nil {
			return err
		}
		if w, ok := ctx.Value(pacedKey{}).(*atomic.Int64); ok {
			w.Add(int64(time.Since(start)))
		}
	}
	if m.purposes != nil {
		m.purposes(PurposeOf(ctx))
	}
	return nil
}

// Hold holds the client's limiter when it can be (outbound.Holder): the throttle refused a
// call (see throttled).
func (m measuredLimiter) Hold(ctx context.Context, d time.Duration) {
	if h, ok := m.l.(outbound.Holder); ok {
		h.Hold(ctx, d)
	}
}

// watch is what a client's waits share: the recent deployment durations, per application
// and of all its applications.
type watch struct {
	mu        sync.Mutex
	durations map[string][]time.Duration // by application id, newest last
	all       []time.Duration            // of every application, newest last
}

// keptAll is how many recent durations of all applications are kept.
const keptAll = 4 * keptDurations

// learn keeps how long an ended deployment took (created to finished, as Coolify says).
func (w *watch) learn(d *Deployment) {
	if d.ApplicationID == "" || d.CreatedAt.IsZero() || d.FinishedAt.Before(d.CreatedAt) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.durations == nil {
		w.durations = map[string][]time.Duration{}
	}
	took := d.FinishedAt.Sub(d.CreatedAt)
	w.durations[d.ApplicationID] = keep(w.durations[d.ApplicationID], took, keptDurations)
	w.all = keep(w.all, took, keptAll)
}

// keep appends d to ds and keeps the newest n.
func keep(ds []time.Duration, d time.Duration, n int) []time.Duration {
	ds = append(ds, d)
	if len(ds) > n {
		ds = slices.Clone(ds[len(ds)-n:])
	}
	return ds
}

// expected is the time a deployment of application appID is expected to take, and whether
// anything is known: the median of the client's recent deployments, of all its
// applications, so that waits share one tick and so one grid of looks; or the median of the
// application's own, when they are shorter, so that a quick application is not seen late.
func (w *watch) expected(appID string) (time.Duration, bool) {
	w.mu.Lock()
	own, all := slices.Clone(w.durations[appID]), slices.Clone(w.all)
	w.mu.Unlock()
	if len(all) == 0 {
		return 0, false
	}
	e := median(all)
	if len(own) > 0 {
		e = min(e, median(own))
	}
	return e, true
}

// median is the median of ds (sorted in place); ds is not empty.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// tick is the tick of a wait for a deployment of application appID (unknown: "") that has
// waited for elapsed, given the tick before and how long the last look waited for the
// request budget. With nothing learned yet, the wait's own length stands for the expected
// one: a deployment that has taken t so far is looked at about every t/LooksPerDeployment.
func (c *Client) tick(appID string, elapsed, prev, paced time.Duration) time.Duration {
	want := elapsed
	if e, ok := c.watch.expected(appID); ok {
		want = max(want, e)
	}
	t := c.poll
	for t*2 <= want/LooksPerDeployment && t*2 <= c.poll*maxTickFactor {
		t *= 2
	}
	if paced > c.poll/4 && prev > 0 {
		t = max(t, min(prev*2, c.poll*maxTickFactor))
	}
	return t
}

// nextPoint is the first point of the grid of tick after now.
func nextPoint(now time.Time, tick time.Duration) time.Time {
	return now.Truncate(tick).Add(tick)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// activeAt returns the team's active deployments as of grid point at, by deployment uuid,
// through the client's board.
func (c *Client) activeAt(ctx context.Context, at time.Time) (map[string]Deployment, error) {
	data, err := c.board.Share(ctx, at, func(ctx context.Context) ([]byte, error) {
		var rows deploymentRows
		if err := c.do(ctx, call{method: http.MethodGet, route: "/deployments", path: "/deployments"}, &rows); err != nil {
			return nil, err
		}
		list := make([]boardRow, 0, len(rows))
		for i := range rows {
			if d := rows[i].deployment(); d.Status.Active() {
				list = append(list, boardRow{UUID: d.UUID, ID: d.ID, ApplicationID: d.ApplicationID,
					Status: d.Status, CreatedAt: d.CreatedAt})
			}
		}
		return json.Marshal(list)
	})
	if err != nil {
		return nil, fmt.Errorf("active deployments: %w", err)
	}
	var list []boardRow
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("active deployments: shared list: %w", err)
	}
	out := make(map[string]Deployment, len(list))
	for _, r := range list {
		out[r.UUID] = Deployment{UUID: r.UUID, ID: r.ID, ApplicationID: r.ApplicationID, Status: r.Status, CreatedAt: r.CreatedAt}
	}
	return out, nil
}

// boardRow is what a board shares of an active deployment.
type boardRow struct {
	UUID          string           `json:"u"`
	ID            int64            `json:"i"`
	ApplicationID string           `json:"a"`
	Status        DeploymentStatus `json:"s"`
	CreatedAt     time.Time        `json:"c"`
}

// waitEnded ends a wait when err says it cannot go on: not found, not allowed.
func waitEnded(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrForbidden)
}
