package main

import (
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
)

func TestPlanPrintsTheChecks(t *testing.T) {
	var b strings.Builder
	printPlan(&b, &orchestrator.Plan{Pipeline: "prod", Checks: []orchestrator.CheckPlan{
		{Name: "errors", Service: "api", Query: `sum(x{service="api"})`, Success: "< 0.05", Failure: ">= 0.2", Interval: 30 * time.Second, Count: 3},
		{Name: "bad", Query: `rate(x)`, Success: "< 1", Interval: time.Second, Count: 1, Error: "prometheus refuses the query: parse error"},
	}})
	for _, want := range []string{
		"Analysis (after each wave and after the last)",
		"errors on api: successful if < 0.05, failed if >= 0.2; every 30s, 3 times, 0 failure(s) allowed",
		`    sum(x{service="api"})`,
		"    refused: prometheus refuses the query: parse error",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, b.String())
		}
	}
}
