package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/bench/internal/figures"
)

type header struct {
	date    time.Time
	machine string
}

// section is one program's runs.
type section struct {
	id, title, command, about string
	runs                      []*figures.Report
	tables                    []*table
}

// table is the figures of one Table name, by row and column, a value per run.
type table struct {
	name          string
	rows, columns []string
	cells         map[[2]string]*cell
}

type cell struct {
	unit     string
	max      float64
	headline bool
	values   []float64
}

// group sorts the reports into sections, in the order of their first run.
func group(reports []*figures.Report) []*section {
	var sections []*section
	byID := make(map[string]*section)
	for _, r := range reports {
		s := byID[r.Section]
		if s == nil {
			s = &section{id: r.Section}
			byID[r.Section] = s
			sections = append(sections, s)
		}
		s.title, s.command, s.about = r.Title, r.Command, r.About // the last run's
		s.runs = append(s.runs, r)
		for _, f := range r.Figures {
			s.add(f)
		}
	}
	return sections
}

func (s *section) add(f figures.Figure) {
	i := slices.IndexFunc(s.tables, func(t *table) bool { return t.name == f.Table })
	if i < 0 {
		s.tables = append(s.tables, &table{name: f.Table, cells: make(map[[2]string]*cell)})
		i = len(s.tables) - 1
	}
	t := s.tables[i]
	if !slices.Contains(t.rows, f.Row) {
		t.rows = append(t.rows, f.Row)
	}
	if !slices.Contains(t.columns, f.Column) {
		t.columns = append(t.columns, f.Column)
	}
	k := [2]string{f.Row, f.Column}
	c := t.cells[k]
	if c == nil {
		c = &cell{unit: f.Unit, max: f.Max, headline: f.Headline}
		t.cells[k] = c
	}
	c.values = append(c.values, f.Value)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// number prints v with three significant digits at most, without an exponent.
func number(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func withUnit(s, unit string) string {
	switch unit {
	case "":
		return s
	case "×":
		return s + "×"
	}
	return s + " " + unit
}

// medianText is a cell's median with its unit.
func (c *cell) medianText() string { return withUnit(number(median(c.values)), c.unit) }

// fullText is a cell's median and, over several runs, its range.
func (c *cell) fullText() string {
	if len(c.values) == 1 {
		return c.medianText()
	}
	return fmt.Sprintf("%s (%s–%s)", c.medianText(), number(slices.Min(c.values)), number(slices.Max(c.values)))
}

// markdown renders t with text giving each cell's content; rows without any are left out.
func (t *table) markdown(b *strings.Builder, title string, text func(*cell) string) {
	var cols []string
	for _, col := range t.columns {
		for _, row := range t.rows {
			if c := t.cells[[2]string{row, col}]; c != nil && text(c) != "" {
				cols = append(cols, col)
				break
			}
		}
	}
	if len(cols) == 0 {
		return
	}
	fmt.Fprintf(b, "| %s | %s |\n|---|%s\n", title, strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, row := range t.rows {
		line := []string{row}
		some := false
		for _, col := range cols {
			s := ""
			if c := t.cells[[2]string{row, col}]; c != nil {
				s = text(c)
			}
			some = some || s != ""
			line = append(line, s)
		}
		if some {
			fmt.Fprintf(b, "| %s |\n", strings.Join(line, " | "))
		}
	}
	b.WriteString("\n")
}

func loads(l [3]float64) string { return fmt.Sprintf("%.2f %.2f %.2f", l[0], l[1], l[2]) }

// render returns RESULTS.md and the summary it contains.
func render(reports []*figures.Report, h header) (doc, summary string) {
	sections := group(reports)
	first, last := reports[0], reports[0]
	for _, r := range reports {
		if r.Started.Before(first.Started) {
			first = r
		}
		if r.Ended.After(last.Ended) {
			last = r
		}
	}
	var runs, commits []string
	for _, s := range sections {
		runs = append(runs, fmt.Sprintf("%s × %d", s.id, len(s.runs)))
	}
	for _, r := range reports {
		if !slices.Contains(commits, r.Commit) {
			commits = append(commits, r.Commit)
		}
	}
	commit := strings.Join(commits, ", ")

	var sb strings.Builder
	sb.WriteString(summaryBegin + "\n")
	fmt.Fprintf(&sb, "Medians of %s runs (`make bench`), %s, commit %s; load average (1/5/15 min) %s before, %s after.\n\n",
		strings.Join(runs, ", "), h.date.Format("2006-01-02 15:04 UTC"), commit, loads(first.LoadBefore), loads(last.LoadAfter))
	for _, s := range sections {
		for _, t := range s.tables {
			t.markdown(&sb, s.title+": "+t.name, func(c *cell) string {
				if !c.headline {
					return ""
				}
				return c.medianText()
			})
		}
	}
	var goals []string
	for _, s := range sections {
		for _, g := range s.goals() {
			goals = append(goals, strings.Replace(g, "| ", "| "+s.title+": ", 1))
		}
	}
	if len(goals) > 0 {
		sb.WriteString(goalsHeader + strings.Join(goals, "\n") + "\n\n")
	}
	if line := readmeLine(sections); line != "" {
		sb.WriteString(line + "\n\n") // the README quotes it
	}
	sb.WriteString(summaryEnd)
	summary = sb.String()

	var b strings.Builder
	b.WriteString("# Benchmark results\n\n")
	b.WriteString("Written by `make bench` (bench/cmd/benchreport) from the figures every run of every bench program\n" +
		"recorded; do not edit by hand. docs/benchmarks.md quotes the summary, and `TestREADMEBenchFigures` checks\n" +
		"that it matches this file.\n\n")
	fmt.Fprintf(&b, "- Date: %s (runs from %s to %s UTC)\n", h.date.Format("2006-01-02 15:04 UTC"),
		first.Started.Format("15:04:05"), last.Ended.Format("15:04:05"))
	fmt.Fprintf(&b, "- Commit: %s\n", commit)
	fmt.Fprintf(&b, "- Machine: %s\n", h.machine)
	fmt.Fprintf(&b, "- Runs: %s, the programs taking turns run by run\n", strings.Join(runs, ", "))
	fmt.Fprintf(&b, "- Load average (1/5/15 min): %s before the first run, %s after the last\n\n", loads(first.LoadBefore), loads(last.LoadAfter))
	b.WriteString("Each figure is the median over the runs, with the range (lowest–highest) in brackets.\n\n")
	b.WriteString("## Summary\n\n" + summary + "\n\n")
	for _, s := range sections {
		fmt.Fprintf(&b, "## %s\n\nCommand (one run): `%s`\n\n%s\n\n", s.title, s.command, strings.TrimSpace(s.about))
		for _, t := range s.tables {
			t.markdown(&b, t.name, (*cell).fullText)
		}
		goals := s.goals()
		if len(goals) > 0 {
			b.WriteString(goalsHeader + strings.Join(goals, "\n") + "\n\n")
		}
		b.WriteString("Load average (1 min) per run, before → after: ")
		var per []string
		for i, r := range s.runs {
			per = append(per, fmt.Sprintf("%d: %.2f → %.2f", i+1, r.LoadBefore[0], r.LoadAfter[0]))
		}
		b.WriteString(strings.Join(per, "; ") + ".\n\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n", summary
}

const goalsHeader = "| goal | bound | median | runs meeting it |\n|---|---|---|---|\n"

// goals returns a table line per figure with a goal: the bound, the median (✓ when it
// meets the bound) and how many runs met it.
func (s *section) goals() []string {
	var goals []string
	for _, t := range s.tables {
		for _, row := range t.rows {
			for _, col := range t.columns {
				c := t.cells[[2]string{row, col}]
				if c == nil || c.max == 0 {
					continue
				}
				met := 0
				for _, v := range c.values {
					if v <= c.max {
						met++
					}
				}
				mark := "✓"
				if median(c.values) > c.max {
					mark = "✗"
				}
				goals = append(goals, fmt.Sprintf("| %s, %s, %s | ≤ %s | %s %s | %d of %d |", t.name, row, col,
					withUnit(number(c.max), c.unit), c.medianText(), mark, met, len(c.values)))
			}
		}
	}
	return goals
}
