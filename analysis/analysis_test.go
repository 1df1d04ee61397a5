package analysis_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/analysis"
	"github.com/deploy-orchestrator/orchestrator/internal/promtest"
)

const errRatio = `sum(rate(http_requests_total{service={{service}},version={{image_tag}},code="500"}[5s])) / sum(rate(http_requests_total{service={{service}},version={{image_tag}}}[5s]))`

func TestParseCondition(t *testing.T) {
	for in, want := range map[string]string{"< 0.05": "< 0.05", ">=100": ">= 100", " == 0 ": "== 0", "!= 1e3": "!= 1000", "<= -1": "<= -1"} {
		c, err := analysis.ParseCondition(in)
		if err != nil || c.String() != want {
			t.Errorf("ParseCondition(%q) = %v, %v; want %s", in, c, err, want)
		}
	}
	for _, in := range []string{"", "0.05", "< x", "=< 1", "< NaN", "~ 1"} {
		if _, err := analysis.ParseCondition(in); err == nil {
			t.Errorf("ParseCondition(%q) = nil error, want one", in)
		}
	}
	lt, _ := analysis.ParseCondition("< 0.05")
	if !lt.Met(0.01) || lt.Met(0.05) || lt.Met(0.5) {
		t.Errorf("< 0.05 met by 0.01, 0.05, 0.5: got %v %v %v, want true false false", lt.Met(0.01), lt.Met(0.05), lt.Met(0.5))
	}
}

func TestCheckQuery(t *testing.T) {
	if err := analysis.CheckQuery(errRatio); err != nil {
		t.Fatalf("CheckQuery(errRatio) = %v, want nil", err)
	}
	for q, want := range map[string]string{
		"":                                 "empty",
		`sum(rate(x[1m])`:                  "does not parse",
		`x{a={{nope}}}`:                    "unknown placeholder {{nope}}",
		`x{a=~{{service}}}`:                "regular expression",
		`x{a!~ {{image_tag}}}`:             "regular expression",
		`sum(x{version={{image_tag}}}) > `: "does not parse",
	} {
		err := analysis.CheckQuery(q)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckQuery(%q) = %v, want an error saying %q", q, err, want)
		}
	}
}

func TestRenderQuotesValues(t *testing.T) {
	got, err := analysis.Render(`x{v={{image_tag}},s={{service}}}`, map[string]string{"image_tag": `1"} or vector(1) #`, "service": "api"})
	if err != nil {
		t.Fatal(err)
	}
	want := `x{v="1\"} or vector(1) #",s="api"}`
	if got != want {
		t.Errorf("Render = %s, want %s", got, want)
	}
	if _, err := analysis.Render(`x{v={{build}}}`, map[string]string{}); err == nil {
		t.Error("Render without a value for {{build}}: nil error, want one")
	}
}

// prom starts a Prometheus scraping an App and returns both, with a client.
func prom(t *testing.T) (*promtest.App, *promtest.Server, analysis.Client) {
	app := promtest.StartApp(t)
	srv := promtest.Start(t, app.Addr)
	c, err := analysis.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return app, srv, c
}

func TestAgainstPrometheus(t *testing.T) {
	app, srv, c := prom(t)
	app.Set("api", "v2", promtest.Traffic{Requests: 100, ErrorRatio: 0.01})
	app.Set("web", "v2", promtest.Traffic{Requests: 100, ErrorRatio: 0.5})
	srv.WaitScrapes(t, app, 3)
	ctx := context.Background()

	t.Run("the server parses a rendered query", func(t *testing.T) {
		q, _ := analysis.Render(errRatio, map[string]string{"service": "api", "image_tag": "v2"})
		if err := analysis.Validate(ctx, c, q); err != nil {
			t.Errorf("Validate(good) = %v, want nil", err)
		}
		if err := analysis.Validate(ctx, c, `sum(rate(x[1m])`); err == nil {
			t.Error("Validate(unbalanced) = nil, want prometheus' parse error")
		}
	})

	t.Run("a value cannot inject PromQL", func(t *testing.T) {
		// Unquoted, this tag would make the query `…{version="x"} or vector(1)`: always 1.
		q, _ := analysis.Render(`sum(http_requests_total{version={{image_tag}}})`, map[string]string{"image_tag": `x"} or vector(1) or x{a="`})
		ms := collect(t, c, analysis.Check{Name: "inj", Query: q, Success: cond(t, "> 0"), Interval: 10 * time.Millisecond, Count: 1})
		if len(ms) != 1 || !ms[0].NoData {
			t.Errorf("measurement of an injected value = %+v, want no data (the value stays a label value)", ms)
		}
	})

	cases := []struct {
		name, service string
		failure       string
		want          analysis.Outcome
	}{
		{"healthy version succeeds", "api", "", analysis.Successful},
		{"5xx spike fails", "web", "", analysis.Failed},
		{"no traffic is inconclusive", "nobody", "", analysis.Inconclusive},
		{"neither condition is inconclusive", "web", "> 0.9", analysis.Inconclusive},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := analysis.Render(errRatio, map[string]string{"service": tc.service, "image_tag": "v2"})
			ch := analysis.Check{Name: "errors", Service: tc.service, Query: q, Success: cond(t, "< 0.05"), Interval: 20 * time.Millisecond, Count: 3}
			if tc.failure != "" {
				f := cond(t, tc.failure)
				ch.Failure = &f
			}
			got, res, err := analysis.Run(ctx, c, []analysis.Check{ch}, nil)
			if err != nil || got != tc.want {
				t.Errorf("Run = %s, %v (%+v); want %s", got, err, res, tc.want)
			}
		})
	}

	t.Run("a failed check stops the others and fails the analysis", func(t *testing.T) {
		good, _ := analysis.Render(errRatio, map[string]string{"service": "api", "image_tag": "v2"})
		bad, _ := analysis.Render(errRatio, map[string]string{"service": "web", "image_tag": "v2"})
		var mu sync.Mutex
		var seen []analysis.Measurement
		got, res, err := analysis.Run(ctx, c, []analysis.Check{
			{Name: "errors", Service: "api", Query: good, Success: cond(t, "< 0.05"), Interval: 50 * time.Millisecond, Count: 1000},
			{Name: "errors", Service: "web", Query: bad, Success: cond(t, "< 0.05"), Interval: 50 * time.Millisecond, Count: 1000, FailureLimit: 1},
		}, func(m analysis.Measurement) { mu.Lock(); seen = append(seen, m); mu.Unlock() })
		if err != nil || got != analysis.Failed {
			t.Fatalf("Run = %s, %v; want failed", got, err)
		}
		if res[1].Failures != 2 || res[1].Measurements != 2 {
			t.Errorf("web: %d failures in %d measurements, want 2 in 2 (failure_limit 1)", res[1].Failures, res[1].Measurements)
		}
		if res[0].Measurements >= 1000 {
			t.Errorf("api measured %d times: not stopped by web's failure", res[0].Measurements)
		}
		mu.Lock()
		defer mu.Unlock()
		webSeen := false
		for _, m := range seen {
			webSeen = webSeen || (m.Service == "web" && m.Value > 0.4 && m.Outcome == analysis.Failed)
		}
		if !webSeen {
			t.Errorf("observed %+v, want web's failed ratio (0.5) among them", seen)
		}
	})
}

func cond(t *testing.T, s string) analysis.Condition {
	t.Helper()
	c, err := analysis.ParseCondition(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func collect(t *testing.T, c analysis.Querier, ch analysis.Check) []analysis.Measurement {
	t.Helper()
	var ms []analysis.Measurement
	var mu sync.Mutex
	if _, _, err := analysis.Run(context.Background(), c, []analysis.Check{ch}, func(m analysis.Measurement) { mu.Lock(); ms = append(ms, m); mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	return ms
}
