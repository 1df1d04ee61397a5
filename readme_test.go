package orchestrator_test

import (
	"os"
	"strings"
	"testing"
)

// The markers bench/cmd/benchreport writes around the summary of bench/RESULTS.md.
const (
	benchSummaryBegin = "<!-- bench-summary:begin"
	benchSummaryEnd   = "<!-- bench-summary:end -->"
)

// benchSummary returns the text between the summary markers of the file at path.
func benchSummary(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, benchSummaryBegin), strings.Index(s, benchSummaryEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no benchmark summary between %q and %q (make bench writes it)", path, benchSummaryBegin, benchSummaryEnd)
	}
	return s[i : j+len(benchSummaryEnd)]
}

// TestREADMEBenchFigures: the benchmark figures the documentation quotes (the summary in
// docs/benchmarks.md, which was the README's section when the test was named) are the
// medians `make bench` wrote into bench/RESULTS.md, not numbers pasted or picked by hand.
func TestREADMEBenchFigures(t *testing.T) {
	doc, results := benchSummary(t, "docs/benchmarks.md"), benchSummary(t, "bench/RESULTS.md")
	if doc == results {
		return
	}
	rl, ql := strings.Split(doc, "\n"), strings.Split(results, "\n")
	for i := range max(len(rl), len(ql)) {
		var r, q string
		if i < len(rl) {
			r = rl[i]
		}
		if i < len(ql) {
			q = ql[i]
		}
		if r != q {
			t.Errorf("docs/benchmarks.md's benchmark summary differs from bench/RESULTS.md's (run `make bench`, which writes both), first at line %d:\ndocs:    %q\nRESULTS: %q", i+1, r, q)
			return
		}
	}
}

// TestREADMEQuotesTheAnalysisBench: the README's figure on clean runs through the
// post-release analysis is the line bench/cmd/benchanalysis wrote into
// bench/RESULTS-analysis.md, quoted after the analysis-bench marker, not a number typed in.
func TestREADMEQuotesTheAnalysisBench(t *testing.T) {
	results, err := os.ReadFile("bench/RESULTS-analysis.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.SplitSeq(string(results), "\n") {
		if strings.HasPrefix(l, "Clean runs: ") {
			line = l
		}
	}
	if line == "" {
		t.Fatal("bench/RESULTS-analysis.md has no \"Clean runs:\" line (cd bench && go run ./cmd/benchanalysis writes it)")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "<!-- analysis-bench -->\n> " + line + "\n"; !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not quote bench/RESULTS-analysis.md after its analysis-bench marker; want:\n%s", want)
	}
}

// The markers bench/cmd/benchreport writes around the README's line of budget figures.
const (
	benchReadmeBegin = "<!-- bench-readme:begin"
	benchReadmeEnd   = "<!-- bench-readme:end -->"
)

// TestREADMEBudgetFigures: the README's line of Coolify budget figures (requests per service
// by deployment time, 429 answers, makespan against its bound) is the one `make bench`
// wrote into bench/RESULTS.md's summary, not numbers pasted by hand.
func TestREADMEBudgetFigures(t *testing.T) {
	block := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i, j := strings.Index(s, benchReadmeBegin), strings.Index(s, benchReadmeEnd)
		if i < 0 || j < i {
			t.Fatalf("%s: no budget figures between %q and %q (make bench writes them)", path, benchReadmeBegin, benchReadmeEnd)
		}
		return s[i : j+len(benchReadmeEnd)]
	}
	readme, results := block("README.md"), block("bench/RESULTS.md")
	if !strings.Contains(readme, "requests/service") {
		t.Errorf("README.md's budget figures are empty: %q", readme)
	}
	if readme != results {
		t.Errorf("README.md's budget figures differ from bench/RESULTS.md's (run `make bench`, which writes both):\nREADME:  %q\nRESULTS: %q", readme, results)
	}
}

// The markers chaos.TestCampaign writes around the summary of chaos/RESULTS-campaign.md.
const (
	campaignSummaryBegin = "<!-- campaign-summary:begin -->"
	campaignSummaryEnd   = "<!-- campaign-summary:end -->"
)

// campaignSummary returns the lines between the campaign summary markers of the file at path.
func campaignSummary(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, campaignSummaryBegin), strings.Index(s, campaignSummaryEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no campaign summary between %q and %q (make campaign writes it)", path, campaignSummaryBegin, campaignSummaryEnd)
	}
	return strings.Split(strings.Trim(s[i+len(campaignSummaryBegin):j], "\n"), "\n")
}

// TestREADMECampaignFigures: the fault campaign's figures the README quotes are the first
// lines of the summary `make campaign` wrote into chaos/RESULTS-campaign.md (schedules,
// seeds, violations, duration, load), as written, not pasted or picked by hand.
func TestREADMECampaignFigures(t *testing.T) {
	readme, results := campaignSummary(t, "README.md"), campaignSummary(t, "chaos/RESULTS-campaign.md")
	if len(readme) < 2 || !strings.Contains(readme[0], "schedules") || !strings.Contains(readme[0], "violations") {
		t.Fatalf("README.md quotes %q of the campaign summary, want at least its first two lines (schedules and violations, duration and load)", readme)
	}
	for i, l := range readme {
		if i >= len(results) || l != results[i] {
			want := ""
			if i < len(results) {
				want = results[i]
			}
			t.Errorf("README.md's campaign summary differs from chaos/RESULTS-campaign.md's (run `make campaign` and copy its first lines), at line %d:\nREADME:  %q\nRESULTS: %q", i+1, l, want)
			return
		}
	}
}
