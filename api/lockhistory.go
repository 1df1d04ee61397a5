package api

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Lock history: which run held which key when, and who waited for it, over a chosen period,
// read back from the runs' events (lock.waiting, lock.acquired, lock.released, lock.lost).

// historyPeriods are the periods GET /v1/locks/history and the page offer.
var historyPeriods = map[string]time.Duration{"1h": time.Hour, "6h": 6 * time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour}

// historyMaxRuns bounds the runs one history reads the events of (newest first).
const historyMaxRuns = 500

// lockSpan is a run's hold of a key (Kind "held", with its fence; Lost when it ended lost),
// or its wait for one (Kind "waited"), from From to To (To zero: still going at Now).
type lockSpan struct {
	Key      string    `json:"key"`
	Kind     string    `json:"kind"`
	RunID    string    `json:"run_id"`
	Pipeline string    `json:"pipeline"`
	Step     string    `json:"step"`
	Fence    int64     `json:"fence,omitempty"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to,omitzero"`
	Lost     bool      `json:"lost,omitempty"`
	lasted   bool      // a wait recorded while it lasted: its event names the holder
}

// shortWait is the shortest wait the history shows when its event names no holder (the
// engine records a wait that lasts past a few milliseconds with who holds the key; one
// granted at once comes with its grant).
const shortWait = 50 * time.Millisecond

// lockHistory is GET /v1/locks/history: the spans that overlap [Since, Now], by key then
// start; Truncated when more runs than historyMaxRuns fell in the period.
type lockHistory struct {
	Since     time.Time  `json:"since"`
	Now       time.Time  `json:"now"`
	Spans     []lockSpan `json:"spans"`
	Truncated bool       `json:"truncated,omitempty"`
}

// handleLockHistory serves GET /v1/locks/history?period=1h|6h|24h|7d (default 1h).
func (s *server) handleLockHistory() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("period")
		if p == "" {
			p = "1h"
		}
		d, ok := historyPeriods[p]
		if !ok {
			s.writeError(w, r, fieldErr("period", "want one of 1h, 6h, 24h, 7d"))
			return
		}
		h, err := s.readLockHistory(r.Context(), s.now().UTC().Add(-d))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		encode(w, http.StatusOK, h)
	}
}

// readLockHistory reads the lock spans since since from the events of the runs that may
// have held a key then: every run not ended before since, newest first.
func (s *server) readLockHistory(ctx context.Context, since time.Time) (lockHistory, error) {
	h := lockHistory{Since: since, Now: s.now().UTC(), Spans: []lockSpan{}}
	f := runs.Filter{Limit: 100, ReadOnly: true}
	read := 0
	for {
		page, err := s.runs.List(ctx, f)
		if err != nil {
			return h, err
		}
		for _, run := range page.Runs {
			if !run.EndedAt.IsZero() && run.EndedAt.Before(since) {
				continue
			}
			if read == historyMaxRuns {
				h.Truncated = true
				break
			}
			read++
			evs, err := s.runs.Events(ctx, run.ID, 0, 0)
			if err != nil {
				return h, err
			}
			h.Spans = append(h.Spans, spansOf(run, evs, since)...)
		}
		// Runs are listed newest first: one created a day before the period began and not
		// listed as unfinished is done with its locks.
		if page.Next == "" || h.Truncated || (len(page.Runs) > 0 && page.Runs[len(page.Runs)-1].CreatedAt.Before(since.Add(-24*time.Hour))) {
			break
		}
		f.Cursor = page.Next
	}
	slices.SortFunc(h.Spans, func(a, b lockSpan) int {
		if a.Key != b.Key {
			if a.Key < b.Key {
				return -1
			}
			return 1
		}
		return a.From.Compare(b.From)
	})
	return h, nil
}

// spansOf turns one run's lock events into spans, keeping those that end after since. A
// wait that was granted at once (recorded with its grant) is left out.
func spansOf(run runs.Run, evs []runs.Event, since time.Time) []lockSpan {
	var out []lockSpan
	open := map[string]int{} // key → index in out of its open span
	step := func(ev runs.Event) string {
		if ev.Service != "" {
			return ev.Service
		}
		return string(ev.Phase)
	}
	closeSpan := func(key string, at time.Time, lost bool) {
		if i, ok := open[key]; ok {
			out[i].To, out[i].Lost = at, lost
			delete(open, key)
		}
	}
	for _, ev := range evs {
		if ev.LockKey == "" {
			continue
		}
		switch ev.Type {
		case runs.EventLockWaiting:
			open[ev.LockKey] = len(out)
			out = append(out, lockSpan{Key: ev.LockKey, Kind: "waited", RunID: run.ID, Pipeline: run.Pipeline, Step: step(ev), From: ev.At,
				lasted: ev.Message != ""})
		case runs.EventLockAcquired:
			closeSpan(ev.LockKey, ev.At, false)
			open[ev.LockKey] = len(out)
			out = append(out, lockSpan{Key: ev.LockKey, Kind: "held", RunID: run.ID, Pipeline: run.Pipeline, Step: step(ev), Fence: ev.Fence, From: ev.At})
		case runs.EventLockReleased, runs.EventLockLost:
			closeSpan(ev.LockKey, ev.At, ev.Type == runs.EventLockLost)
		}
	}
	for key := range open { // a run that ended holds nothing: its spans end with it
		if !run.EndedAt.IsZero() {
			closeSpan(key, run.EndedAt, false)
		}
	}
	kept := out[:0]
	for _, sp := range out {
		if sp.Kind == "waited" && !sp.lasted && !sp.To.IsZero() && sp.To.Sub(sp.From) < shortWait {
			continue
		}
		if sp.To.IsZero() || sp.To.After(since) {
			kept = append(kept, sp)
		}
	}
	return kept
}
