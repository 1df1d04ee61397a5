package runs

import (
	"slices"
	"time"
)

// Figures are one pipeline's delivery figures over a window of days, read from its runs:
// how often it deploys, how long a change takes to run, how often a change fails, and how
// long until a failure is made good.
type Figures struct {
	Pipeline string `json:"pipeline"`
	Days     int    `json:"days"`
	// Deployments counts the runs that succeeded (a rollback too), PerDay per day of the
	// window.
	Deployments int     `json:"deployments"`
	PerDay      float64 `json:"per_day"`
	// LeadTime is the median time from the trigger to the change verified running (the
	// succeeded runs' start of record to their end; the daemon does not know when a commit
	// was made, only when its build was asked for).
	LeadTime time.Duration `json:"lead_time_ns"`
	// Changes counts the runs that deployed something (succeeded, or failed after a
	// deployment began); Failures those of them that failed after deploying, or that a later
	// rollback of the pipeline replaced. ChangeFailureRate is Failures / Changes.
	Changes           int     `json:"changes"`
	Failures          int     `json:"failures"`
	ChangeFailureRate float64 `json:"change_failure_rate"`
	// TimeToRestore is the median time from a failure's end to the end of the pipeline's next
	// run that succeeded (zero when no failure was restored in the window).
	TimeToRestore time.Duration `json:"time_to_restore_ns"`
}

// Windows are the windows of days delivery figures are given for.
var Windows = []int{7, 30, 90}

// DeliveryFigures computes each pipeline's figures over the days before now from rs (runs of
// any pipeline and age, in any order: those created before the window are left out), sorted
// by pipeline.
func DeliveryFigures(rs []Run, days int, now time.Time) []Figures {
	since := now.Add(-time.Duration(days) * 24 * time.Hour)
	by := map[string][]Run{}
	for _, r := range rs {
		if !r.CreatedAt.Before(since) && !r.CreatedAt.After(now) {
			by[r.Pipeline] = append(by[r.Pipeline], r)
		}
	}
	var out []Figures
	for _, name := range sortedKeys(by) {
		out = append(out, figuresOf(name, by[name], days))
	}
	return out
}

func sortedKeys(m map[string][]Run) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// figuresOf computes one pipeline's figures from its runs of the window.
func figuresOf(name string, rs []Run, days int) Figures {
	slices.SortFunc(rs, func(a, b Run) int { return a.CreatedAt.Compare(b.CreatedAt) })
	f := Figures{Pipeline: name, Days: days}
	var leads, restores []time.Duration
	var failedAt []time.Time // ends of failures not restored yet
	for i, r := range rs {
		switch {
		case r.Status == StatusSucceeded:
			f.Deployments++
			f.Changes++
			if !r.StartedAt.IsZero() && r.EndedAt.After(r.CreatedAt) {
				leads = append(leads, r.EndedAt.Sub(r.CreatedAt))
			}
			if r.Trigger.Rollback {
				// The rollback replaced the last succeeded run before it: that change failed.
				if j := lastSucceededBefore(rs, i); j >= 0 {
					f.Failures++
					failedAt = append(failedAt, r.CreatedAt)
				}
			}
			for _, at := range failedAt {
				if r.EndedAt.After(at) {
					restores = append(restores, r.EndedAt.Sub(at))
				}
			}
			failedAt = nil
		case (r.Status == StatusFailed || r.Status == StatusInterrupted) && deployed(r):
			f.Changes++
			f.Failures++
			failedAt = append(failedAt, r.EndedAt)
		}
	}
	f.PerDay = float64(f.Deployments) / float64(days)
	if f.Changes > 0 {
		f.ChangeFailureRate = float64(f.Failures) / float64(f.Changes)
	}
	f.LeadTime, f.TimeToRestore = median(leads), median(restores)
	return f
}

// lastSucceededBefore is the index of the last succeeded run before rs[i], or -1.
func lastSucceededBefore(rs []Run, i int) int {
	for j := i - 1; j >= 0; j-- {
		if rs[j].Status == StatusSucceeded {
			return j
		}
	}
	return -1
}

// deployed reports whether a deployment of the run began (a Phase-2 step names one, or
// was asked for).
func deployed(r Run) bool {
	return slices.ContainsFunc(r.Steps, func(s Step) bool {
		return s.Phase == Phase2 && (s.DeploymentUUID != "" || !s.DeployRequestedAt.IsZero())
	})
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	if n := len(ds); n%2 == 0 {
		return (ds[n/2-1] + ds[n/2]) / 2
	}
	return ds[len(ds)/2]
}
