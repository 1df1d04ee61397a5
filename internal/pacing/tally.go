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
// function. Nothing is lost: Stop reports what is still open. Safe for concurrent use.
type Tally struct {
	every  time.Duration
	report func(runID string, s Summary)

	mu      sync.Mutex
	open    map[string]*Summary
	stopped bool
}

// NewTally returns a Tally reporting through report, from its own goroutine, every interval.
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
	s, ok := t.open[runID]
	delete(t.open, runID)
	t.mu.Unlock()
	if ok {
		t.report(runID, *s)
	}
}

// Stop reports every open summary now and ignores later waits.
func (t *Tally) Stop() {
	t.mu.Lock()
	t.stopped = true
	open := t.open
	t.open = map[string]*Summary{}
	t.mu.Unlock()
	for id, s := range open {
		t.report(id, *s)
	}
}
