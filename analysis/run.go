package analysis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Outcome is what one measurement, one check or a whole analysis came to.
type Outcome string

// Outcomes.
const (
	Successful   Outcome = "successful"
	Failed       Outcome = "failed"
	Inconclusive Outcome = "inconclusive"
)

// Querier is what a check needs of Prometheus: an instant query (v1.API has it).
type Querier interface {
	Query(ctx context.Context, query string, ts time.Time, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error)
}

// Formatter asks Prometheus to parse a query without running it (v1.API has it).
type Formatter interface {
	FormatQuery(ctx context.Context, query string) (string, error)
}

// Client is the Prometheus API a pipeline's analysis uses: v1.API.
type Client interface {
	Querier
	Formatter
}

// NewClient returns the official client of the Prometheus at url, over hc (nil: a client
// with a 30s timeout).
func NewClient(url string, hc *http.Client) (Client, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	c, err := api.NewClient(api.Config{Address: url, Client: hc})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", url, err)
	}
	return v1.NewAPI(c), nil
}

// Validate asks Prometheus to parse the rendered query, without running it
// (/api/v1/format_query): the server's own parser has the last word.
func Validate(ctx context.Context, f Formatter, query string) error {
	if _, err := f.FormatQuery(ctx, query); err != nil {
		return fmt.Errorf("prometheus refuses the query: %w", err)
	}
	return nil
}

// Check is one rendered check: a query measured every Interval, Count times.
type Check struct {
	// Name is the check's name in the pipeline; Service the service it measures ("" for a
	// release-wide check).
	Name    string
	Service string
	Query   string
	Success Condition
	// Failure, when set, fails a measurement; without it a measurement that does not meet
	// Success fails.
	Failure      *Condition
	Interval     time.Duration
	Count        int
	FailureLimit int
}

// Measurement is one query of a check and what it came to.
type Measurement struct {
	Check   string
	Service string
	// N is the measurement's number (1 to Count); At when it was taken.
	N  int
	At time.Time
	// Value is the measured value; NoData says the query returned nothing (Value is NaN).
	Value   float64
	NoData  bool
	Outcome Outcome
	// Err says why the query failed (the measurement is inconclusive).
	Err string
	// Successes, Failures and Inconclusives count the check's measurements so far.
	Successes, Failures, Inconclusives int
}

// Result is how one check ended.
type Result struct {
	Check, Service string
	Outcome        Outcome
	Measurements   int
	Successes      int
	Failures       int
}

// Run measures the checks at once, each every Interval (the first after one Interval: the
// release serves meanwhile), and calls observe with each measurement as it is taken (from
// several goroutines; observe must be safe for that). A failed check stops the others. It
// returns the analysis' outcome and each check's result, in the checks' order. A canceled
// ctx ends it with ctx's cause.
func Run(ctx context.Context, q Querier, checks []Check, observe func(Measurement)) (Outcome, []Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]Result, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runCheck(ctx, q, c, observe)
			if results[i].Outcome == Failed {
				cancel(errCheckFailed)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, errCheckFailed) {
		return "", results, err
	}
	out := Successful
	for _, r := range results {
		switch r.Outcome {
		case Failed:
			return Failed, results, nil
		case Inconclusive:
			out = Inconclusive
		}
	}
	return out, results, nil
}

var errCheckFailed = errors.New("a check failed")

// runCheck measures one check until it is decided or ctx ends (the result is then
// inconclusive).
func runCheck(ctx context.Context, q Querier, c Check, observe func(Measurement)) Result {
	r := Result{Check: c.Name, Service: c.Service, Outcome: Inconclusive}
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	inconclusive := 0
	for n := 1; n <= c.Count; n++ {
		select {
		case <-ctx.Done():
			return r
		case <-t.C:
		}
		m := measure(ctx, q, c)
		if ctx.Err() != nil {
			return r
		}
		m.N = n
		switch m.Outcome {
		case Successful:
			r.Successes++
		case Failed:
			r.Failures++
		default:
			inconclusive++
		}
		r.Measurements = n
		m.Successes, m.Failures, m.Inconclusives = r.Successes, r.Failures, inconclusive
		if observe != nil {
			observe(m)
		}
		if r.Failures > c.FailureLimit {
			r.Outcome = Failed
			return r
		}
	}
	if c.Count-r.Successes <= c.FailureLimit {
		r.Outcome = Successful
	}
	return r
}

// measure queries once and judges the value.
func measure(ctx context.Context, q Querier, c Check) Measurement {
	m := Measurement{Check: c.Name, Service: c.Service, At: time.Now().UTC(), Value: math.NaN(), Outcome: Inconclusive}
	val, _, _, err := q.Query(ctx, c.Query, time.Time{})
	if err != nil {
		m.Err = err.Error()
		return m
	}
	v, ok, err := scalar(val)
	if err != nil {
		m.Err = err.Error()
		return m
	}
	if !ok {
		m.NoData = true
		return m
	}
	m.Value = v
	switch {
	case c.Failure != nil && c.Failure.Met(v):
		m.Outcome = Failed
	case c.Success.Met(v):
		m.Outcome = Successful
	case c.Failure == nil:
		m.Outcome = Failed
	}
	return m
}

// scalar reads one number from a query's answer: a scalar, or a vector of one sample. An
// empty vector, or NaN (0/0: no traffic), is no data; more than one sample is an error (the
// query must aggregate).
func scalar(v model.Value) (float64, bool, error) {
	switch t := v.(type) {
	case *model.Scalar:
		f := float64(t.Value)
		return f, !math.IsNaN(f), nil
	case model.Vector:
		switch len(t) {
		case 0:
			return math.NaN(), false, nil
		case 1:
			f := float64(t[0].Value)
			return f, !math.IsNaN(f), nil
		}
		return math.NaN(), false, fmt.Errorf("the query returned %d series; want one number (aggregate it, e.g. with sum)", len(t))
	}
	return math.NaN(), false, fmt.Errorf("the query returned a %s; want a scalar or one series", v.Type())
}
