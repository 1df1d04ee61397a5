package config

import (
	"strings"
	"testing"
	"time"
)

const analysisPipeline = `
coolify: { url: https://coolify.example.com, token: "${COOLIFY_TOKEN}" }
services:
  - { name: api, uuid: u1, image_tag: "${trigger.image_tag}" }
mobile:
  - flagsmith: { url: https://flagsmith.example.com, api_key: "${FS_KEY}", environment: env1 }
    feature: version_state
    when: after_verified
    set: { api.version: "${trigger.image_tag}" }
analysis:
  prometheus: { url: https://prometheus.example.com }
  after_mobile: true
  checks:
`

func TestLoadPipelineAnalysis(t *testing.T) {
	p, err := LoadPipelineBytes("a.yaml", []byte(analysisPipeline+`
    - name: errors
      query: 'sum(rate(http_requests_total{service={{service}},version={{image_tag}},code="500"}[1m])) / sum(rate(http_requests_total{service={{service}}}[1m]))'
      success: "< 0.05"
      failure: ">= 0.2"
      interval: 10s
      count: 5
      failure_limit: 1
    - { name: latency, query: 'avg(up)', success: "> 0" }
`), testEnv())
	if err != nil {
		t.Fatal(err)
	}
	a := p.Analysis
	if a == nil || len(a.Checks) != 2 || !a.AfterMobile || a.OnInconclusive != InconclusiveAsk ||
		a.InconclusiveTimeout != DefaultInconclusiveTimeout {
		t.Fatalf("analysis: got %+v, want two checks, after_mobile, on_inconclusive ask (the default) for 30m", a)
	}
	c := a.Checks[0]
	if c.Interval != 10*time.Second || c.Count != 5 || c.FailureLimit != 1 {
		t.Errorf("errors: got interval %s count %d limit %d, want 10s 5 1", c.Interval, c.Count, c.FailureLimit)
	}
	if d := a.Checks[1]; d.Interval != DefaultAnalysisInterval || d.Count != DefaultAnalysisCount {
		t.Errorf("latency defaults: got %s %d, want %s %d", d.Interval, d.Count, DefaultAnalysisInterval, DefaultAnalysisCount)
	}
	s, f, err := c.Conditions()
	if err != nil || s.String() != "< 0.05" || f == nil || f.String() != ">= 0.2" {
		t.Errorf("Conditions() = %v, %v, %v", s, f, err)
	}
	if p.Mobile[0].When != WhenAfterVerified {
		t.Errorf("mobile when: got %s, want after_verified", p.Mobile[0].When)
	}
}

func TestLoadPipelineAnalysisProblems(t *testing.T) {
	_, err := LoadPipelineBytes("bad.yaml", []byte(analysisPipeline+`
    - { name: errors, query: 'sum(rate(x[1m])', success: "< 0.05" }
    - { name: errors, query: 'x{v=~{{image_tag}}}', success: "0.05", failure: "> y", interval: 1ms, count: 2, failure_limit: 2 }
    - { name: other, query: 'x{v={{tag}}}', success: "< 1", count: -1 }
`), testEnv())
	ps := mustProblems(t, err)
	for _, w := range []struct{ field, substr string }{
		{"analysis.checks[0].query", "does not parse"},
		{"analysis.checks[1].name", "duplicate check name"},
		{"analysis.checks[1].query", "regular expression"},
		{"analysis.checks[1].success", "want one of"},
		{"analysis.checks[1].failure", "want an operator and a number"},
		{"analysis.checks[1].interval", "at least 100ms"},
		{"analysis.checks[1].failure_limit", "less than count"},
		{"analysis.checks[2].query", "unknown placeholder {{tag}}"},
		{"analysis.checks[2].count", "at least 1"},
	} {
		wantProblem(t, ps, w.field, w.substr)
	}
	if !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("problems do not name the file:\n%v", err)
	}

	_, err = LoadPipelineBytes("nocheck.yaml", []byte(strings.Replace(analysisPipeline, "analysis:\n  prometheus: { url: https://prometheus.example.com }\n  after_mobile: true\n  checks:\n", "", 1)), testEnv())
	wantProblem(t, mustProblems(t, err), "mobile[0].when", "needs an analysis block")

	_, err = LoadPipelineBytes("unknown.yaml", []byte(analysisPipeline+"    - { name: e, query: 'up', success: '> 0', sucess: '> 1' }\n"), testEnv())
	wantProblem(t, mustProblems(t, err), "analysis.checks[0].sucess", "")
}

func TestLoadPipelineInconclusiveProblems(t *testing.T) {
	bad := strings.Replace(analysisPipeline, "  after_mobile: true\n", "  on_inconclusive: maybe\n  inconclusive_timeout: -1s\n", 1)
	_, err := LoadPipelineBytes("bad.yaml", []byte(bad+`    - { name: latency, query: 'avg(up)', success: "> 0" }
`), testEnv())
	ps := mustProblems(t, err)
	wantProblem(t, ps, "analysis.on_inconclusive", "is not one of: ask, rollback, continue")
	wantProblem(t, ps, "analysis.inconclusive_timeout", "negative")
}
