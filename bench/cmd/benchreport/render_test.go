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

// TestReadmeLine: the README's line holds the budget section's medians by deployment time
// and its flatness ratio, between its markers, and the summary carries the same line.
func TestReadmeLine(t *testing.T) {
	start := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
	var reports []*figures.Report
	for i, v := range []float64{17, 18, 16} {
		r := &figures.Report{Section: "budget", Title: "Budget", Command: "benchbudget", Commit: "abc",
			About:   "4 pipelines of 24 services (phase2.parallel 4) run at once on 3 daemons sharing one Redis, and more",
			Started: start.Add(time.Duration(i) * time.Minute), Ended: start.Add(time.Duration(i)*time.Minute + 30*time.Second)}
		const tbl = "requests, 429 and makespan by deployment time"
		r.Add(figures.Figure{Table: tbl, Row: "10s deployments", Column: "requests/service", Value: v, Headline: true})
		r.Add(figures.Figure{Table: tbl, Row: "10s deployments", Column: "429 answers", Value: 0, Headline: true})
		r.Add(figures.Figure{Table: tbl, Row: "10s deployments", Column: "makespan ÷ bound", Unit: "×", Value: 1.02, Max: 1.05, Headline: true})
		r.Add(figures.Figure{Table: "flat in deployment time", Row: "3m0s ÷ 10s", Column: "requests/service", Unit: "×", Value: 1.1, Max: 1.2, Headline: true})
		reports = append(reports, r)
	}
	_, summary := render(reports, header{date: start, machine: "test"})
	line := readmeLine(group(reports))
	want := "Coolify's request budget (4 pipelines of 24 services (phase2.parallel 4) run at once on 3 daemons; medians of 3 runs): " +
		"10s deployments: 17.0 requests/service, 0 × 429, makespan 1.02× the lower bound; requests/service 3m0s ÷ 10s: 1.10×."
	if !strings.Contains(line, want) || !strings.HasPrefix(line, readmeBegin) || !strings.HasSuffix(line, readmeEnd) {
		t.Errorf("got %q, want %q between the markers", line, want)
	}
	if !strings.Contains(summary, line) {
		t.Errorf("the summary lacks the README's line:\n%s", summary)
	}
}

// TestReadmeLineDaemons: the README's block also holds the many-daemons medians on one
// redis-server (runs/min by daemon count, the last count over one), after the budget line.
func TestReadmeLineDaemons(t *testing.T) {
	start := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	const tbl = "200 runs of 50 pipelines sharing 30 services, at once"
	var reports []*figures.Report
	for i, v := range []float64{5000, 5400, 5200} {
		r := &figures.Report{Section: "ha", Title: "Many daemons", Command: "benchha", Commit: "abc",
			Started: start.Add(time.Duration(i) * time.Minute), Ended: start.Add(time.Duration(i)*time.Minute + 15*time.Second)}
		r.Add(figures.Figure{Table: tbl, Row: "redis/daemons=1", Column: "runs/min", Value: v})
		r.Add(figures.Figure{Table: tbl, Row: "redis/daemons=2", Column: "runs/min", Value: v - 100})
		r.Add(figures.Figure{Table: tbl, Row: "redis/daemons=2", Column: "one÷this", Value: 1.02, Max: 1 / 0.9, Headline: true})
		r.Add(figures.Figure{Table: tbl, Row: "redis/daemons=3", Column: "runs/min", Value: v - 400})
		r.Add(figures.Figure{Table: tbl, Row: "redis/daemons=3", Column: "one÷this", Value: 1.0 + 0.05*float64(i), Max: 1 / 0.9, Headline: true})
		reports = append(reports, r)
	}
	line := readmeLine(group(reports))
	want := "Many daemons on one Redis (" + tbl + ", medians of 3 runs): runs/min by daemon count 1: 5200, 2: 5100, 3: 4800; " +
		"3 daemons ÷ 1: 0.952× (goal: at least 0.9×, met)."
	if !strings.Contains(line, want) || !strings.HasPrefix(line, readmeBegin) || !strings.HasSuffix(line, readmeEnd) {
		t.Errorf("got %q, want %q between the markers", line, want)
	}
	// A fleet slower than the goal says so, rather than rounding up to it (1 ÷ 1.115 = 0.897).
	for _, r := range reports {
		for i := range r.Figures {
			if f := &r.Figures[i]; f.Row == "redis/daemons=3" && f.Column == "one÷this" {
				f.Value = 1.115
			}
		}
	}
	if line := readmeLine(group(reports)); !strings.Contains(line, "3 daemons ÷ 1: 0.897× (goal: at least 0.9×, missed).") {
		t.Errorf("a missed goal: got %q", line)
	}
}
