package config

import (
	"fmt"
	"time"

	"github.com/deploy-orchestrator/orchestrator/analysis"
)

// Analysis verifies the release after it serves: its checks are measured after each Phase-2
// wave but the last (under coolify:phase2, before the next wave starts) and once more after
// the last wave (holding no lock), against the Prometheus named here. A failed analysis
// rolls the whole release back (every service the run changed and the Flagsmith keys it
// changed, the flags first), whatever on_failure says: a release the metrics call bad is
// never left half-released. An inconclusive one does what OnInconclusive says.
type Analysis struct {
	Prometheus Prometheus `koanf:"prometheus"`
	// OnInconclusive says what an inconclusive analysis does (default InconclusiveAsk: the
	// run waits for a person to continue or roll back, as it waits for an approval).
	OnInconclusive OnInconclusive `koanf:"on_inconclusive"`
	// InconclusiveTimeout is how long an inconclusive analysis waits for a person before
	// the release rolls back (default DefaultInconclusiveTimeout).
	InconclusiveTimeout time.Duration `koanf:"inconclusive_timeout"`
	// AfterMobile measures the checks once more after the mobile steps that run
	// after_verified wrote: a failure then reverts the flag first and the tags second.
	AfterMobile bool            `koanf:"after_mobile"`
	Checks      []AnalysisCheck `koanf:"checks"`
}

// Prometheus names the server an analysis queries.
type Prometheus struct {
	// URL is its base URL (the client appends /api/v1/query).
	URL string `koanf:"url"`
}

// AnalysisCheck is one PromQL check (see package analysis for placeholders and outcomes).
type AnalysisCheck struct {
	// Name identifies the check in events, metrics and the plan; unique in the pipeline.
	Name string `koanf:"name"`
	// Query is a PromQL template. A query naming {{service}} or {{uuid}} is measured for
	// each service deployed; the others once per analysis.
	Query string `koanf:"query"`
	// Success is the condition a measured value meets to count as successful ("< 0.05").
	Success string `koanf:"success"`
	// Failure, when set, is the condition that fails a measurement; without it a value that
	// does not meet Success fails.
	Failure string `koanf:"failure"`
	// Interval is the time between measurements, the first one interval after the wave
	// (default DefaultAnalysisInterval).
	Interval time.Duration `koanf:"interval"`
	// Count is how many measurements decide the check (default DefaultAnalysisCount).
	Count int `koanf:"count"`
	// FailureLimit is how many measurements may fail (or, after Count, not succeed) without
	// failing the check (default 0).
	FailureLimit int `koanf:"failure_limit"`
}

// OnInconclusive says what an inconclusive analysis does.
type OnInconclusive string

// Inconclusive-analysis policies.
const (
	InconclusiveAsk      OnInconclusive = "ask"      // default: a person continues or rolls back (a run decision)
	InconclusiveRollback OnInconclusive = "rollback" // as a failed analysis
	InconclusiveContinue OnInconclusive = "continue" // go on as a successful one
)

// DefaultInconclusiveTimeout is how long an inconclusive analysis waits for a person by
// default before it rolls the release back.
const DefaultInconclusiveTimeout = 30 * time.Minute

// Defaults of AnalysisCheck.
const (
	DefaultAnalysisInterval = 30 * time.Second
	DefaultAnalysisCount    = 3
	minAnalysisInterval     = 100 * time.Millisecond
)

// Conditions returns the check's parsed success and failure (nil when unset) conditions.
// A loaded pipeline's checks always parse.
func (c AnalysisCheck) Conditions() (analysis.Condition, *analysis.Condition, error) {
	s, err := analysis.ParseCondition(c.Success)
	if err != nil {
		return s, nil, err
	}
	if c.Failure == "" {
		return s, nil, nil
	}
	f, err := analysis.ParseCondition(c.Failure)
	if err != nil {
		return s, nil, err
	}
	return s, &f, nil
}

func applyAnalysisDefaults(a *Analysis) {
	if a == nil {
		return
	}
	if a.OnInconclusive == "" {
		a.OnInconclusive = InconclusiveAsk
	}
	if a.InconclusiveTimeout == 0 {
		a.InconclusiveTimeout = DefaultInconclusiveTimeout
	}
	for i := range a.Checks {
		c := &a.Checks[i]
		if c.Interval == 0 {
			c.Interval = DefaultAnalysisInterval
		}
		if c.Count == 0 {
			c.Count = DefaultAnalysisCount
		}
	}
}

// analysis checks the analysis block, and that mobile steps ordered after_verified have one.
func (v *validator) analysis(p *Pipeline) {
	a := p.Analysis
	if a == nil {
		for i, m := range p.Mobile {
			if m.When == WhenAfterVerified {
				v.add(fmt.Sprintf("mobile[%d].when", i), "after_verified needs an analysis block")
			}
		}
		return
	}
	v.httpURL("analysis.prometheus.url", a.Prometheus.URL)
	oneOf(v, "analysis.on_inconclusive", a.OnInconclusive, InconclusiveAsk, InconclusiveRollback, InconclusiveContinue)
	if a.InconclusiveTimeout < 0 {
		v.add("analysis.inconclusive_timeout", "must not be negative")
	}
	if len(a.Checks) == 0 {
		v.add("analysis.checks", "is required: name at least one check")
	}
	names := map[string]int{}
	for i := range a.Checks {
		field := fmt.Sprintf("analysis.checks[%d]", i)
		c := &a.Checks[i]
		if v.required(field+".name", c.Name) {
			v.pattern(field+".name", c.Name, stepNamePattern)
			if j, dup := names[c.Name]; dup {
				v.add(field+".name", "duplicate check name %s (also analysis.checks[%d].name)", v.show(field+".name", c.Name), j)
			} else {
				names[c.Name] = i
			}
		}
		if err := analysis.CheckQuery(c.Query); err != nil {
			v.add(field+".query", "%v", err)
		}
		if _, err := analysis.ParseCondition(c.Success); err != nil {
			v.add(field+".success", "%v", err)
		}
		if c.Failure != "" {
			if _, err := analysis.ParseCondition(c.Failure); err != nil {
				v.add(field+".failure", "%v", err)
			}
		}
		if c.Interval < minAnalysisInterval {
			v.add(field+".interval", "must be at least %s", minAnalysisInterval)
		}
		if c.Count < 1 {
			v.add(field+".count", "must be at least 1")
		}
		if c.FailureLimit < 0 || (c.Count >= 1 && c.FailureLimit >= c.Count) {
			v.add(field+".failure_limit", "must be 0 or more and less than count (%d)", c.Count)
		}
	}
}
