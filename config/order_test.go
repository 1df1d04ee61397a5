package config

import (
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

func TestCompareBuilds(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"5", "4", 1}, {"4", "5", -1}, {"10", "9", 1}, {"0042", "42", 0},
		{"123456789012345678901234567890", "99", 1}, {"7", "7", 0}, {"0", "", 0},
	}
	for _, tt := range tests {
		if got := CompareBuilds(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareBuilds(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestOrderEffective(t *testing.T) {
	tests := []struct {
		order Order
		build string
		want  Order
	}{
		{"", "42", OrderBuild}, {"", "v1.2", OrderNone}, {"", "", OrderNone},
		{OrderCreated, "42", OrderCreated}, {OrderNone, "42", OrderNone}, {OrderBuild, "42", OrderBuild},
	}
	for _, tt := range tests {
		if got := tt.order.Effective(tt.build); got != tt.want {
			t.Errorf("Order(%q).Effective(%q) = %q, want %q", tt.order, tt.build, got, tt.want)
		}
	}
}

func TestResolveOrderBuildWantsANumber(t *testing.T) {
	p, err := LoadPipelineBytes("o.yaml", []byte(minimal+"order: build\n"), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	for _, build := range []string{"", "v12", "1.2"} {
		_, err := p.Resolve(orchestrator.Trigger{Build: build, ImageTag: "v1"})
		wantProblem(t, mustProblems(t, err), "build", "order: build")
	}
	if _, err := p.Resolve(orchestrator.Trigger{Build: "12", ImageTag: "v1"}); err != nil {
		t.Errorf("numeric build: %v", err)
	}
}
