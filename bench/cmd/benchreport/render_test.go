package main

import (
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/bench/internal/figures"
)

// TestRender: medians and ranges over runs, goals with the runs meeting them, and a
// summary holding only headline medians, identical in the document and as returned.
func TestRender(t *testing.T) {
	start := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
	var reports []*figures.Report
	for i, v := range []float64{0.2, 0.5, 0.25} {
		r := &figures.Report{Section: "locks", Title: "Locks", Command: "benchlocks", Commit: "abc",
			Started: start.Add(time.Duration(i) * time.Minute), Ended: start.Add(time.Duration(i)*time.Minute + 30*time.Second),
			LoadBefore: [3]float64{float64(i), 0, 0}, LoadAfter: [3]float64{float64(i) + 0.5, 0, 0}}
		r.Add(figures.Figure{Table: "burst", Row: "ours", Column: "handoff p50", Unit: "ms", Value: v, Max: 0.3, Headline: true})
		r.Add(figures.Figure{Table: "burst", Row: "ours", Column: "longest wait", Unit: "ms", Value: 20 + v})
		reports = append(reports, r)
	}
	doc, summary := render(reports, header{date: start, machine: "test"})
	for _, want := range []string{
		"| burst | handoff p50 | longest wait |",
		"| ours | 0.250 ms (0.200–0.500) | 20.2 ms (20.2–20.5) |",
		"| burst, ours, handoff p50 | ≤ 0.300 ms | 0.250 ms ✓ | 2 of 3 |",
		"0.00 0.00 0.00 before the first run, 2.50 0.00 0.00 after the last",
		"- Commit: abc\n",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("results lack %q:\n%s", want, doc)
		}
	}
	if !strings.Contains(summary, "| Locks: burst | handoff p50 |\n|---|---|\n| ours | 0.250 ms |\n") ||
		!strings.Contains(summary, "| Locks: burst, ours, handoff p50 | ≤ 0.300 ms | 0.250 ms ✓ | 2 of 3 |") {
		t.Errorf("summary should hold the headline median and the goal only:\n%s", summary)
	}
	if !strings.Contains(doc, summary) || !strings.HasPrefix(summary, summaryBegin) || !strings.HasSuffix(summary, summaryEnd) {
		t.Errorf("the document does not hold the summary between its markers")
	}
}
