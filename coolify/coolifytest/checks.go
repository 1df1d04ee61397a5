package coolifytest

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Checks are the promises the orchestrator keeps toward Coolify, each read from the fake's
// own [History]: the chaos scenarios run them all after every scenario, once its daemons
// are gone, and the many-daemons benchmark after every round. TestCheckersSeeViolations
// shows each one fails on a history that breaks its promise.
var Checks = []Check{
	{"every mutating request carries X-Orchestrator-Run and a numeric X-Orchestrator-Fence", CheckHeaders},
	{"no mutating request hits an application while another run's deployment of it is in progress", CheckNoWriteOverDeployment},
	{"the mutating requests of one lease never interleave with another lease's on the same application", CheckLeasesDoNotInterleave},
	{"no deployment runs another run's config", CheckDeploymentsRunTheirOwnConfig},
	{"each application ends running the config last synced to it", CheckNewestConfigWins},
}

// Check is one promise checked against a history: Fn returns one line per violation.
type Check struct {
	Name string
	Fn   func(History) []string
}

// Broken runs every check of [Checks] on h and returns one message per broken promise,
// naming it and listing its violations; nil when every promise held.
func (h History) Broken() []string {
	var out []string
	for _, c := range Checks {
		if v := c.Fn(h); len(v) > 0 {
			out = append(out, fmt.Sprintf("promise broken: %s:\n  %s", c.Name, strings.Join(v, "\n  ")))
		}
	}
	return out
}

// String describes the call for a violation message: sequence, request, run, fence, time
// and answer.
func (c Call) String() string {
	return fmt.Sprintf("#%d %s %s (run %q fence %q, %s, answered %d)", c.Seq, c.Method, c.Path, c.Run, c.Fence,
		c.At.Format("15:04:05.000"), c.Status)
}

// String describes the deployment for a violation message: its run and when it ran.
func (s Span) String() string {
	end := "still in progress"
	if !s.End.IsZero() {
		end = s.End.Format("15:04:05.000")
	}
	return fmt.Sprintf("deployment %s of run %q [%s, %s]", s.Deployment, s.Run, s.Start.Format("15:04:05.000"), end)
}

// CheckHeaders: every mutating request Coolify accepted (answered 2xx) carries the run and its
// lease's fence. Refused requests are left out, so a probe that is meant to be refused (an
// ability check) does not count.
func CheckHeaders(h History) []string {
	var out []string
	for _, c := range h.Calls {
		if !c.Mutating() || c.Status < 200 || c.Status >= 300 {
			continue
		}
		if f, err := strconv.ParseInt(c.Fence, 10, 64); c.Run == "" || err != nil || f <= 0 {
			out = append(out, c.String()+": missing or malformed X-Orchestrator-Run / X-Orchestrator-Fence")
		}
	}
	return out
}

// CheckNoWriteOverDeployment: while a deployment of an application is in progress, no mutating
// request about that application comes from any run but the one that started it. Canceling
// that very deployment is allowed (it is how a deployment nobody guards is stopped).
func CheckNoWriteOverDeployment(h History) []string {
	byApp := map[string][]Span{}
	for _, s := range h.Spans {
		byApp[s.App] = append(byApp[s.App], s)
	}
	var out []string
	for _, c := range h.Calls {
		if !c.Mutating() || c.Handled == 0 {
			continue
		}
		for _, app := range c.Apps {
			for _, s := range byApp[app] {
				if s.Run != c.Run && s.InProgressAt(c.At) && c.Deployment != s.Deployment {
					out = append(out, fmt.Sprintf("%s hit %s during %s", c.String(), app, s.String()))
				}
			}
		}
	}
	return out
}

// CheckLeasesDoNotInterleave: per application, the mutating requests made under one lease
// (one run and fence) span a time no other lease's mutating requests fall into.
func CheckLeasesDoNotInterleave(h History) []string {
	type lease struct{ app, run, fence string }
	type span struct {
		lease      lease
		start, end time.Time
	}
	spans := map[lease]*span{}
	for _, c := range h.Calls {
		if !c.Mutating() || c.Handled == 0 {
			continue
		}
		for _, app := range c.Apps {
			k := lease{app, c.Run, c.Fence}
			s := spans[k]
			if s == nil {
				s = &span{lease: k, start: c.At, end: c.At}
				spans[k] = s
			}
			if c.At.Before(s.start) {
				s.start = c.At
			}
			if c.At.After(s.end) {
				s.end = c.At
			}
		}
	}
	var all []*span
	for _, s := range spans {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].start.Before(all[j].start) })
	var out []string
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.lease.app == b.lease.app && b.start.Before(a.end) {
				out = append(out, fmt.Sprintf("%s: run %q fence %q [%s, %s] interleaves with run %q fence %q [%s, %s]",
					a.lease.app, a.lease.run, a.lease.fence, a.start.Format("15:04:05.000"), a.end.Format("15:04:05.000"),
					b.lease.run, b.lease.fence, b.start.Format("15:04:05.000"), b.end.Format("15:04:05.000")))
			}
		}
	}
	return out
}

// CheckDeploymentsRunTheirOwnConfig: a deployment a run started read a config that run wrote
// last (or one no run had written), never one another run wrote after it.
func CheckDeploymentsRunTheirOwnConfig(h History) []string {
	var out []string
	for _, s := range h.Spans {
		if s.Start.IsZero() || s.Run == "" || s.ConfigBy == "" || s.ConfigBy == s.Run {
			continue
		}
		out = append(out, fmt.Sprintf("%s of %s ran the config run %q wrote (tag %q, env %v)",
			s.String(), s.App, s.ConfigBy, s.Config.ImageTag, s.Config.Env))
	}
	return out
}

// CheckNewestConfigWins: each application some run changed ends running what it carries, the
// config the last run that synced it wrote (or restored).
func CheckNewestConfigWins(h History) []string {
	var out []string
	apps := make([]string, 0, len(h.Apps))
	for app := range h.Apps {
		apps = append(apps, app)
	}
	slices.Sort(apps)
	for _, app := range apps {
		st := h.Apps[app]
		if st.LastWriter == "" || st.Running.Equal(st.Current) {
			continue
		}
		out = append(out, fmt.Sprintf("%s carries tag %q env %v, last synced by run %q, but runs tag %q env %v",
			app, st.Current.ImageTag, st.Current.Env, st.LastWriter, st.Running.ImageTag, st.Running.Env))
	}
	return out
}
