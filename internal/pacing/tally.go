package pacing

import (
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// Summary is what the calls of one run waited for the budget since the last report.
type Summary struct {
	// Calls waited; Priority of them were priority calls.
	Calls, Priority int
	// Total is the sum of their waits; Longest the longest one.
	Total, Longest time.Duration
}

// Tally coalesces waits per run into at most one report per run and interval, so a run
// paced on every call gets a few events rather than one per call: a run's first wait opens a
// report that collects the waits of the next interval and is then handed to the report
// function. Nothing is lost: Flush reports a run's open summary at once (call it before the
// run's last event), Stop reports every one. Reports are made one at a time, and Flush and
// Stop return only after any report of theirs, and any report running, is done. Safe for
// concurrent use.
type Tally struct {
	every  time.Duration
	report func(runID string, s Summary)

	mu      sync.Mutex // guards open and stopped, and is held while reporting
	open    map[string]*Summary
	stopped bool
}

// NewTally returns a Tally reporting through report every interval (from a timer's
// goroutine, or from Flush's and Stop's caller).
func NewTally(interval time.Duration, report func(runID string, s Summary)) *Tally {
	return &Tally{every: interval, report: report, open: map[string]*Summary{}}
}

// Add counts one wait of run runID (ignored for "" and after Stop).
func (t *Tally) Add(runID string, w Wait) {
	if runID == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	s, ok := t.open[runID]
	if !ok {
		s = &Summary{}
		t.open[runID] = s
		time.AfterFunc(t.every, func() { t.flush(runID) })
	}
	s.Calls++
	if w.Priority >= outbound.PriorityHigh {
		s.Priority++
	}
	s.Total += w.Waited
	s.Longest = max(s.Longest, w.Waited)
}

func (t *Tally) flush(runID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.open[runID]; ok {
		delete(t.open, runID)
		t.report(runID, *s)
	}
}

// Flush reports run runID's open summary, if any, now.
func (t *Tally) Flush(runID string) { t.flush(runID) }

// Stop reports every open summary now and ignores later waits.
func (t *Tally) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for id, s := range t.open {
		delete(t.open, id)
		t.report(id, *s)
	}
}
