package main

import (
	"context"
	"os"
	"path/filepath"
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

// validate refuses an analysis check whose query does not parse, naming the file and field.
func TestValidateRefusesABadQuery(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "prod.yaml")
	y := `coolify: { url: 'http://x', token: t }
services:
  - { name: api, uuid: u1 }
analysis:
  prometheus: { url: 'http://prometheus:9090' }
  checks:
    - { name: errors, query: 'sum(rate(x{service={{service}}}[1m])', success: '< 0.05' }
`
	if err := os.WriteFile(bad, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := invoke(context.Background(), nil, "validate", bad)
	if exitCode(err) != exitUsage {
		t.Fatalf("validate of a bad query: exit %d, want 2", exitCode(err))
	}
	if want := "prod.yaml: analysis.checks[0].query: does not parse"; !strings.Contains(out, want) {
		t.Errorf("validate output lacks %q:\n%s", want, out)
	}
}
