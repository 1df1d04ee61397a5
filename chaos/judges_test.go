package chaos

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The campaign's judges (issue 41, item 5): each reads what one schedule left in the fakes'
// own records — the fake Coolify's history, the fake Flagsmith's versions of the document,
// the runs and leases as Redis holds them — and returns one line per violation. They know
// nothing of the daemons' claims beyond which run a trigger created; TestJudgesSeeViolations
// feeds each a record that breaks its promise.

// triggered is one run the campaign created: what it asked for, which the fakes' records
// are judged against.
type triggered struct {
	ID, Pipeline string
	Build        int
	AppVersion   string
	Rollback     bool
	At           time.Time
}

// record is everything the judges read after a schedule.
type record struct {
	// Coolify is the fake Coolify's history, with the applications a run may leave carrying
	// a config it does not run (its Left says so, see allowedLeft) taken out of Apps.
	Coolify coolifytest.History
	// Runs are the runs the schedule triggered, by id.
	Runs map[string]triggered
	// Ended are those runs as the store holds them when the schedule ended (missing: the
	// store lost it, as Redis can in a failover).
	Ended map[string]runs.Run
	// Bound is how long after its trigger a run must have ended; Judged is when the records
	// were read.
	Bound  time.Duration
	Judged time.Time
	// Flags are the values of the Flagsmith document, every version oldest first, the last
	// one live; Outside are the fields (platform.key) an outside writer set in it.
	Flags   []string
	Outside []string
	// Held are the run leases Redis holds once every run ended.
	Held []locks.Info
}

// judge is one promise of the campaign.
type judge struct {
	Kind string
	Fn   func(record) []string
}

// judges are every promise a schedule is held to: the fake Coolify's checks shared with the
// other scenarios, and the campaign's own.
func judges() []judge {
	var js []judge
	for _, c := range coolifytest.Checks {
		js = append(js, judge{Kind: c.Name, Fn: func(r record) []string { return c.Fn(r.Coolify) }})
	}
	return append(js,
		judge{"no write to an application while a deployment of its own run may still build", judgeOwnDeployment},
		judge{"each deployment ran one run's configuration", judgeOneRunConfig},
		judge{"no older build replaces a newer one of its pipeline outside a rollback", judgeNewestBuild},
		judge{"no flag update lost", judgeFlags},
		judge{"no write by a run after it was taken over", judgeNoWriteAfterTakeover},
		judge{"no run a daemon accepted is lost", judgeRunsKept},
		judge{"no run unfinished past its bound", judgeRunsEnded},
		judge{"no lock left held", judgeLocks},
	)
}

// judgeOwnDeployment: no mutating request of a run reaches an application while a deployment
// that same run queued of it is queued or in progress (Coolify reads the env and tag when the
// build starts), except the cancel of that deployment. Another run's deployment is
// coolifytest.CheckNoWriteOverDeployment's.
func judgeOwnDeployment(r record) []string {
	// The POST /deploy that queued a deployment is the first of its run naming its
	// application handled at or after the moment it was queued.
	queuedBy := map[string]uint64{}
	for _, s := range r.Coolify.Spans {
		for _, c := range r.Coolify.Calls {
			if c.Route == "POST /deploy" && c.Run == s.Run && slices.Contains(c.Apps, s.App) && !c.At.Before(s.Queued) {
				queuedBy[s.Deployment] = c.Seq
				break
			}
		}
	}
	var out []string
	for _, c := range r.Coolify.Calls {
		if !c.Mutating() || c.Handled == 0 || c.Run == "" {
			continue
		}
		for _, s := range r.Coolify.Spans {
			if s.Run != c.Run || !slices.Contains(c.Apps, s.App) || c.Deployment == s.Deployment || queuedBy[s.Deployment] == c.Seq {
				continue
			}
			if !c.At.After(s.Queued) || (!s.End.IsZero() && !c.At.Before(s.End)) {
				continue
			}
			out = append(out, fmt.Sprintf("%s hit %s while its own %s (queued %s) may still build",
				c.String(), s.App, s.String(), s.Queued.Format("15:04:05.000")))
		}
	}
	return out
}

// buildOf reads the build a config was made of: the schedule's pipelines set tag v<build>
// and BUILD=<build>; the seeded applications carry v1 and 0.
func buildOf(c coolifytest.Config) (int, bool) {
	if c.ImageTag == "v1" && c.Env["BUILD"] == "0" {
		return 0, true
	}
	n, err := strconv.Atoi(c.Env["BUILD"])
	return n, err == nil && c.ImageTag == "v"+c.Env["BUILD"]
}

// judgeOneRunConfig: every deployment that started ran a whole configuration of one build —
// its image tag and its BUILD variable from the same run (or the seeded ones), never a mix.
func judgeOneRunConfig(r record) []string {
	var out []string
	for _, s := range r.Coolify.Spans {
		if s.Start.IsZero() {
			continue
		}
		if _, ok := buildOf(s.Config); !ok {
			out = append(out, fmt.Sprintf("%s of %s ran a mixed config: tag %q, BUILD=%q", s.String(), s.App, s.Config.ImageTag, s.Config.Env["BUILD"]))
		}
	}
	return out
}

// judgeNewestBuild: per application and pipeline, the finished deployments that ran a run's
// own build, in the order they finished, never go down a build — unless a deliberate rollback
// came between: a rollback run's config write to the application (its sync) makes its build
// the pipeline's newest there, as its finished deployment does. A deployment that ran another
// config than its run's build (a restore of what was there before) is that run's rollback,
// and not judged here. A run's own restore takes its build back off the application: a
// config write of a run that is no rollback, handled after one of its deployments of the
// application was queued, can only be its restore (a run syncs before it deploys), which
// puts back the pipeline's record as it was before the run (docs/guarantees.md, promise 4),
// so the pipeline's newest there is again the one before that run's.
func judgeNewestBuild(r record) []string {
	type event struct {
		at       time.Time
		app, run string
		span     *coolifytest.Span // nil: a config write (a rollback's sync, or a restore)
		restore  bool              // a restore by a run that is no rollback
	}
	var evs []event
	queued := map[[2]string]time.Time{} // app, run → its first deployment's queueing
	for _, s := range r.Coolify.Spans {
		k := [2]string{s.App, s.Run}
		if q, seen := queued[k]; !seen || s.Queued.Before(q) {
			queued[k] = s.Queued
		}
		run, ok := r.Runs[s.Run]
		if !ok || s.Status != "finished" || s.End.IsZero() {
			continue
		}
		if b, ok := buildOf(s.Config); ok && b == run.Build {
			evs = append(evs, event{at: s.End, app: s.App, run: s.Run, span: &s})
		}
	}
	for _, c := range r.Coolify.Calls {
		run, ok := r.Runs[c.Run]
		if !ok || !c.ConfigWrite {
			continue
		}
		for _, app := range c.Apps {
			q, deployed := queued[[2]string{app, c.Run}]
			switch {
			case run.Rollback:
				evs = append(evs, event{at: c.At, app: app, run: c.Run})
			case deployed && c.At.After(q):
				evs = append(evs, event{at: c.At, app: app, run: c.Run, restore: true})
			}
		}
	}
	slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
	type key struct{ app, pipeline string }
	type newest struct {
		run string
		at  time.Time
	}
	tops := map[key][]newest{} // the pipeline's newest on the application, and the ones before
	var out []string
	for _, e := range evs {
		run := r.Runs[e.run]
		k := key{e.app, run.Pipeline}
		stack := tops[k]
		if e.restore {
			if n := len(stack); n > 0 && stack[n-1].run == e.run {
				tops[k] = stack[:n-1]
			}
			continue
		}
		if n := len(stack); n > 0 && e.span != nil && !run.Rollback {
			prev := stack[n-1]
			if pb := r.Runs[prev.run].Build; run.Build < pb {
				out = append(out, fmt.Sprintf("%s: build %d of %s (run %s, %s) replaced build %d (run %s, %s)",
					e.app, run.Build, run.Pipeline, e.run, e.at.Format("15:04:05.000"), pb, prev.run, prev.at.Format("15:04:05.000")))
				continue
			}
		}
		if n := len(stack); n > 0 && stack[n-1].run == e.run {
			stack = stack[:n-1]
		}
		tops[k] = append(stack, newest{run: e.run, at: e.at})
	}
	return out
}

// flagFields are the fields of the Flagsmith document the schedule's pipelines set, by
// pipeline.
var flagFields = map[string][2]string{"api": {"ios", "latest_version"}, "web": {"android", "latest_version"}}

// judgeFlags: no update of the Flagsmith document is lost. A field an outside writer set is in
// every version after the one that first held it (a read-modify-write that dropped it lost
// it); each pipeline's version field never goes down from one version to the next (the steps
// never downgrade), and ends at least at the app version of every run of that pipeline that
// succeeded with its mobile step updated.
func judgeFlags(r record) []string {
	var out []string
	docs := make([]map[string]map[string]string, len(r.Flags))
	for i, v := range r.Flags {
		if v == "" { // the state before any value was set
			continue
		}
		if err := json.Unmarshal([]byte(v), &docs[i]); err != nil {
			out = append(out, fmt.Sprintf("version %d of the document is not a JSON document: %q", i+1, v))
		}
	}
	get := func(d map[string]map[string]string, field string) string {
		p, k, _ := strings.Cut(field, ".")
		return d[p][k]
	}
	for _, f := range r.Outside {
		first := slices.IndexFunc(docs, func(d map[string]map[string]string) bool { return get(d, f) != "" })
		for i := first + 1; first >= 0 && i < len(docs); i++ {
			if get(docs[i], f) == "" {
				out = append(out, fmt.Sprintf("version %d dropped %s, which an outside writer set in version %d", i+1, f, first+1))
				break
			}
		}
	}
	for pipeline, pf := range flagFields {
		field := pf[0] + "." + pf[1]
		for i := 1; i < len(docs); i++ {
			if a, b := get(docs[i-1], field), get(docs[i], field); versionLess(b, a) {
				out = append(out, fmt.Sprintf("version %d set %s from %s down to %s", i+1, field, a, b))
			}
		}
		final := ""
		if len(docs) > 0 {
			final = get(docs[len(docs)-1], field)
		}
		for _, id := range sortedKeys(r.Runs) {
			t, e := r.Runs[id], r.Ended[id]
			if t.Pipeline != pipeline || e.Status != runs.StatusSucceeded || !mobileUpdated(e) {
				continue
			}
			if versionLess(final, t.AppVersion) {
				out = append(out, fmt.Sprintf("run %s of %s succeeded setting %s to %s, but the document ends at %q", id, pipeline, field, t.AppVersion, final))
			}
		}
	}
	return out
}

// mobileUpdated reports whether the run's mobile steps all ended updated.
func mobileUpdated(r runs.Run) bool {
	n := 0
	for _, s := range r.Steps {
		if s.Phase == runs.PhaseMobile {
			if s.Status != runs.StepUpdated {
				return false
			}
			n++
		}
	}
	return n > 0
}

// versionLess compares dotted numeric versions; "" is below every version.
func versionLess(a, b string) bool {
	if a == "" || b == "" {
		return a == "" && b != ""
	}
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// judgeNoWriteAfterTakeover: once a run ended interrupted (taken over: its daemon was
// presumed dead), no mutating request of that run arrives at Coolify afterwards, whatever
// its cut-off daemon does after the heal. A request that arrived before the takeover was on
// the wire already, which the promise leaves out.
func judgeNoWriteAfterTakeover(r record) []string {
	var out []string
	for _, c := range r.Coolify.Calls {
		run, ok := r.Ended[c.Run]
		if !ok || run.Status != runs.StatusInterrupted || !c.Mutating() || c.Handled == 0 {
			continue
		}
		if arrived := cmp.Or(c.Start, c.At); arrived.After(run.EndedAt) {
			out = append(out, fmt.Sprintf("%s arrived %s after run %s was taken over",
				c.String(), arrived.Sub(run.EndedAt).Round(time.Millisecond), c.Run))
		}
	}
	return out
}

// judgeRunsEnded: every run the schedule triggered has ended (a terminal status in the store)
// within the bound of its trigger, or the store lost it.
func judgeRunsEnded(r record) []string {
	var out []string
	for _, id := range sortedKeys(r.Runs) {
		t := r.Runs[id]
		e, ok := r.Ended[id]
		switch {
		case !ok:
			continue
		case !e.Status.Terminal():
			out = append(out, fmt.Sprintf("run %s (%s build %d) is still %s %s after its trigger (bound %s)",
				id, t.Pipeline, t.Build, e.Status, r.Judged.Sub(t.At).Round(time.Second), r.Bound))
		case e.EndedAt.Sub(t.At) > r.Bound:
			out = append(out, fmt.Sprintf("run %s (%s build %d) ended %s %s after its trigger (bound %s)",
				id, t.Pipeline, t.Build, e.Status, e.EndedAt.Sub(t.At).Round(time.Second), r.Bound))
		}
	}
	return out
}

// judgeRunsKept: every run a daemon accepted (answered 202 with its id) is in the store when
// the schedule ends (a failover that loses acknowledged writes loses runs).
func judgeRunsKept(r record) []string {
	var out []string
	for _, id := range sortedKeys(r.Runs) {
		if _, ok := r.Ended[id]; !ok {
			t := r.Runs[id]
			out = append(out, fmt.Sprintf("run %s (%s build %d), accepted at %s, is not in the store", id, t.Pipeline, t.Build, t.At.Format("15:04:05.000")))
		}
	}
	return out
}

// judgeLocks: once every run ended, Redis holds no lease of a run.
func judgeLocks(r record) []string {
	var out []string
	for _, in := range r.Held {
		out = append(out, fmt.Sprintf("%s still held by %s (fence %d, until %s)", in.Key, in.Holder, in.Fence, in.ExpiresAt.Format("15:04:05.000")))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	return keys
}
