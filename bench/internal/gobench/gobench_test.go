package gobench

import (
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/bench/internal/figures"
)

// TestAddParsesBenchmarkLines: sub-benchmark names lose the benchmark's name and the
// GOMAXPROCS suffix, every value/unit pair becomes a figure, other lines are ignored.
func TestAddParsesBenchmarkLines(t *testing.T) {
	var r Result
	out := `goos: linux
BenchmarkOverhead100/sqlite-2   3   737010522 ns/op   3.390 ms/service/phase   5.090 run-writes/service
BenchmarkOverhead100/redis-2    3   589099677 ns/op   2.634 ms/service/phase   5.090 run-writes/service
PASS
`
	for range 3 {
		if err := r.add(strings.NewReader(out)); err != nil {
			t.Fatal(err)
		}
	}
	f, ok := r.Get("redis", "ms/service/phase")
	if !ok || len(f.Values) != 3 || f.Values[0] != 2.634 {
		t.Fatalf("redis ms/service/phase = %+v, %v; want three values of 2.634", f, ok)
	}
	if len(r.Figures) != 6 {
		t.Errorf("%d figures, want 6 (3 metrics × 2 sub-benchmarks)", len(r.Figures))
	}
	if err := r.add(strings.NewReader("PASS\n")); err == nil {
		t.Error("output without a benchmark line parsed without error")
	}
}

// TestAddToReportsMediansAndGoals: each metric's medians in the metrics' order; a goal
// bounds the sub-benchmarks it names (all when it names none) and makes its metric a
// headline on every row, as Headlines does; a ratio (÷) is in ×.
func TestAddToReportsMediansAndGoals(t *testing.T) {
	r := Result{Figures: []Figure{
		{Bench: "sqlite", Metric: "read-p99-ms", Median: 12},
		{Bench: "sqlite", Metric: "runs/s", Median: 30},
		{Bench: "sqlite", Metric: "ignored", Median: 1},
		{Bench: "sqlite", Metric: "a÷b", Median: 3},
		{Bench: "redis", Metric: "a÷b", Median: 4},
	}}
	var rep figures.Report
	r.addTo(&rep, "t", []string{"read-p99-ms", "runs/s", "a÷b"},
		[]Goal{{Metric: "read-p99-ms", Max: 10}, {Metric: "a÷b", Bench: "redis", Max: 5}}, []string{"runs/s"})
	want := []figures.Figure{
		{Table: "t", Row: "sqlite", Column: "read-p99-ms", Unit: "ms", Value: 12, Max: 10, Headline: true},
		{Table: "t", Row: "sqlite", Column: "runs/s", Unit: "/s", Value: 30, Headline: true},
		{Table: "t", Row: "sqlite", Column: "a÷b", Unit: "×", Value: 3, Headline: true},
		{Table: "t", Row: "redis", Column: "a÷b", Unit: "×", Value: 4, Max: 5, Headline: true},
	}
	if len(rep.Figures) != len(want) {
		t.Fatalf("figures %+v, want %+v", rep.Figures, want)
	}
	for i := range want {
		if rep.Figures[i] != want[i] {
			t.Errorf("figure %d = %+v, want %+v", i, rep.Figures[i], want[i])
		}
	}
}

// TestMarkdownJudgesEachGoalOnItsSubBenchmark: a goal naming a sub-benchmark gives its
// verdict on that one's row only.
func TestMarkdownJudgesEachGoalOnItsSubBenchmark(t *testing.T) {
	r := Result{Figures: []Figure{
		{Bench: "sqlite", Metric: "a÷b", Values: []float64{3}, Median: 3, Min: 3, Max: 3},
		{Bench: "redis", Metric: "a÷b", Values: []float64{4}, Median: 4, Min: 4, Max: 4},
	}}
	md := r.Markdown("T", "", []string{"a÷b"}, []Goal{{Metric: "a÷b", Bench: "sqlite", Max: 2.5}, {Metric: "a÷b", Bench: "redis", Max: 5}})
	for _, line := range []string{"| sqlite | a÷b | 3 | 3 – 3 | 3 | ≤ 2.5: missed |", "| redis | a÷b | 4 | 4 – 4 | 4 | ≤ 5: met |"} {
		if !strings.Contains(md, line) {
			t.Errorf("no line %q in:\n%s", line, md)
		}
	}
}
