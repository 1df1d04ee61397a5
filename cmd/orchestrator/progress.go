package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// outputMode is how a command shows a run: for people on a terminal (one line per step,
// rewritten in place as the step moves), for people reading a pipe or a CI log (one line
// per change), or for scripts (one JSON object per line).
type outputMode int

const (
	modePlain outputMode = iota
	modeTTY
	modeJSON
)

// outputFlags are --json and -v, shared by the commands that show runs.
type outputFlags struct{ json, verbose *bool }

// jsonFollowUsage is --json of the commands that follow a run (trigger, run, runs watch).
const jsonFollowUsage = "print one JSON object per line (events, then the run) instead of text"

// addOutputFlags adds --json, described by jsonUsage, and -v.
func addOutputFlags(fs *pflag.FlagSet, jsonUsage string) *outputFlags {
	return &outputFlags{
		json:    fs.Bool("json", false, jsonUsage),
		verbose: fs.BoolP("verbose", "v", false, "also show every lock wait, grant and release with its fence (a wait that lasts is shown without -v, naming who holds the key)"),
	}
}

func (o *outputFlags) mode(w io.Writer) outputMode {
	switch {
	case *o.json:
		return modeJSON
	case isTerminal(w):
		return modeTTY
	}
	return modePlain
}

// progress shows a run's events as they come, and its result at the end.
type progress struct {
	w       io.Writer
	mode    outputMode
	verbose bool
	// lines are the step lines drawn so far (modeTTY), by step; order is their order on
	// screen, below which nothing else is printed while the run goes on.
	lines map[string]int
	order []string
	// seen is the last event's Seq: a stream followed again (after a reconnect, or after
	// Ctrl-C and a cancel) starts from the beginning, and what was shown is not shown twice.
	seen int64
	// said are the events' messages shown so far, each with the type of the event that
	// showed it: a run's end event and its result name its reason only where it was not shown
	// already (a preflight's problems were printed three times more before).
	said map[string]runs.EventType
}

func newProgress(w io.Writer, mode outputMode, verbose bool) *progress {
	return &progress{w: w, mode: mode, verbose: verbose, lines: map[string]int{}, said: map[string]runs.EventType{}}
}

// lockDetail reports whether e is shown only with -v: the lock traffic every step has (a
// long wait shows in the summary as waited=…). A wait that lasted long enough to be recorded
// with who holds the key (its message) is shown without -v: it says why the run stands still.
func lockDetail(e runs.Event) bool {
	switch e.Type {
	case runs.EventLockWaiting:
		return e.Message == ""
	case runs.EventLockAcquired, runs.EventLockReleased:
		return true
	}
	return false
}

// event shows one event.
func (p *progress) event(e runs.Event) error {
	if e.Seq != 0 {
		if e.Seq <= p.seen {
			return nil
		}
		p.seen = e.Seq
	}
	if p.mode == modeJSON {
		return json.NewEncoder(p.w).Encode(e)
	}
	if lockDetail(e) && !p.verbose {
		return nil
	}
	if e.Message != "" {
		if _, ok := p.said[e.Message]; ok && isEnd(e.Type) {
			e.Message = "" // said by the event before
		} else if !ok {
			p.said[e.Message] = e.Type
		}
	}
	text := describe(e, p.verbose)
	if p.mode == modeTTY && e.Service != "" {
		return p.drawStep(string(e.Phase)+"/"+e.Service, text)
	}
	_, err := fmt.Fprintln(p.w, text)
	p.detach()
	return err
}

// isEnd reports whether t ends a run (run.succeeded, run.failed, …).
func isEnd(t runs.EventType) bool {
	for _, st := range runs.Statuses {
		if st.Terminal() && runs.EndEvent(st) == t {
			return true
		}
	}
	return false
}

// detach stops rewriting the step lines drawn so far: something else was printed below them.
func (p *progress) detach() {
	p.order = nil
	clear(p.lines)
}

// drawStep prints the step's line, or rewrites it in place when it is on screen already.
func (p *progress) drawStep(step, text string) error {
	i, ok := p.lines[step]
	if !ok {
		p.lines[step] = len(p.order)
		p.order = append(p.order, step)
		_, err := fmt.Fprintf(p.w, "%s\n", text)
		return err
	}
	up := len(p.order) - i
	// Up to the step's line, clear it, write, and back down to below the last line.
	_, err := fmt.Fprintf(p.w, "\x1b[%dA\r\x1b[2K%s\x1b[%dB\r", up, text, up)
	return err
}

// describe is an event as one line: time, phase, service, what happened.
func describe(e runs.Event, verbose bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-7s %-14s %-18s", e.At.Local().Format("15:04:05"), e.Phase, e.Service, e.Type)
	if e.LockKey != "" && (verbose || e.Service == "") { // a step's key is its service's
		fmt.Fprintf(&b, " %s", e.LockKey)
	}
	if e.Fence != 0 && verbose {
		fmt.Fprintf(&b, " fence=%d", e.Fence)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, "  %s", e.Message)
	}
	return strings.TrimRight(b.String(), " ")
}

// summary prints the run's result per step and returns an error unless it succeeded: exit
// code 1 for a run that failed, was canceled, superseded or interrupted.
func (p *progress) summary(r runs.Run) error {
	if p.mode == modeJSON {
		if err := json.NewEncoder(p.w).Encode(map[string]any{"run": r}); err != nil {
			return err
		}
	} else {
		shown := r
		if t, ok := p.said[r.Reason]; ok && r.Reason != "" {
			shown.Reason = "see " + string(t) + " above"
		}
		printRun(p.w, shown, p.verbose)
	}
	if r.Status == runs.StatusSucceeded {
		return nil
	}
	if p.mode != modeJSON {
		// The run's reason is on the output already; the error only sets the exit code.
		return &exitError{code: exitFailed, err: fmt.Errorf("run %s %s", r.ID, r.Status)}
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("run %s %s: %s", r.ID, r.Status, r.Reason)}
}

// printRun prints a run's status and its steps.
func printRun(w io.Writer, r runs.Run, verbose bool) {
	fmt.Fprintf(w, "\nrun %s of %s: %s", r.ID, r.Pipeline, r.Status)
	if r.Reason != "" {
		fmt.Fprintf(w, " (%s)", r.Reason)
	}
	fmt.Fprintln(w)
	if !r.StartedAt.IsZero() {
		fmt.Fprintf(w, "  started %s", r.StartedAt.Local().Format(time.DateTime))
		if !r.EndedAt.IsZero() {
			fmt.Fprintf(w, ", ended %s", r.EndedAt.Local().Format(time.DateTime))
		}
		fmt.Fprintf(w, ", took %s\n", took(r, time.Now()))
	}
	if r.SupersededBy != "" {
		fmt.Fprintf(w, "  superseded by run %s\n", r.SupersededBy)
	}
	for _, wt := range r.Waiting {
		fmt.Fprintf(w, "  %s\n", wt)
	}
	for _, s := range r.Steps {
		var b strings.Builder
		fmt.Fprintf(&b, "  %-7s %-16s %-12s", s.Phase, s.Name, s.Status)
		if s.Fence != 0 && verbose {
			fmt.Fprintf(&b, " fence=%d", s.Fence)
		}
		if s.LockWait >= 100*time.Millisecond || (verbose && s.LockWait > 0) {
			fmt.Fprintf(&b, " waited=%s", s.LockWait.Round(time.Millisecond))
		}
		if s.Error != "" {
			fmt.Fprintf(&b, "  %s", s.Error)
		} else if c := s.Changes.String(); c != "" && (verbose || s.Phase == runs.PhaseMobile) {
			fmt.Fprintf(&b, "  %s", c)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	for _, l := range r.Left {
		fmt.Fprintf(w, "  left %-16s %s\n", l.Service, l.State)
	}
}
