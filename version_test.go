package orchestrator_test

import (
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

func TestCompareVersions(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"2.10.0", "2.9.9", 1},
		{"2.9.9", "2.10.0", -1},
		{"2.4", "2.4.0", 0},
		{"v2.4.0", "2.4.0", 0},
		{"2.4.0+build.7", "2.4.0+build.9", 0},
		{"2.4.0-beta.1", "2.4.0", -1},
		{"2.4.0-beta.2", "2.4.0-beta.10", -1},
		{"2.4.0-1", "2.4.0-alpha", -1},
		{"2.4.0-alpha", "2.4.0-alpha.1", -1},
		{"2.4.0-rc.1", "2.4.0-beta.9", 1},
		{"10", "9.99.99", 1},
		{"1.0.0.1", "1.0.0", 1},
	}
	for _, c := range cases {
		got, err := orchestrator.CompareVersions(c.a, c.b)
		if err != nil || got != c.want {
			t.Errorf("compare(%q, %q): got %d, %v; want %d", c.a, c.b, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "latest", "2.x", "2..1", "-1.0", "2.4.0-", "<b>1</b>", "1.0-<b>", "1.0+a b", "1.0-beta..1", "2.4.0+"} {
		if _, err := orchestrator.CompareVersions(bad, "1.0.0"); err == nil {
			t.Errorf("compare(%q, …): got no error, want one", bad)
		}
	}
}
