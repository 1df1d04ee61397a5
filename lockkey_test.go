package orchestrator_test

import (
	"errors"
	"strings"
	"testing"

	. "github.com/deploy-orchestrator/orchestrator"
)

func TestRegisteredNamespacesDoNotOverlap(t *testing.T) {
	if err := CheckNamespaces(Namespaces()); err != nil {
		t.Fatal(err)
	}
}

func TestCheckNamespacesRefusesOverlap(t *testing.T) {
	tests := []struct {
		ns   []string
		want string
	}{
		{[]string{"coolify:", "coolify:"}, `"coolify:" and "coolify:" overlap`},
		{[]string{"coolify:", "coolify:db:"}, "overlap"},
		{[]string{"mobile:flagsmith:", "mobile:"}, "overlap"},
		{[]string{"coolify"}, "ending in ':'"},
		{[]string{""}, "ending in ':'"},
	}
	for _, tc := range tests {
		err := CheckNamespaces(tc.ns)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckNamespaces(%q) = %v, want error containing %q", tc.ns, err, tc.want)
		}
	}
	if err := CheckNamespaces([]string{"coolify:", "mobile:", "dns:"}); err != nil {
		t.Errorf("disjoint namespaces refused: %v", err)
	}
}

func TestNamespaceOf(t *testing.T) {
	for key, want := range map[string]string{
		Phase1Key:                NamespaceCoolify,
		ServiceLockKey("abc"):    NamespaceCoolify,
		MobileLockKey("version"): NamespaceMobile,
		"coolify:":               "",
		"dns:example.com":        "",
		"mobilex:flagsmith:abc":  "",
	} {
		if got := NamespaceOf(key); got != want {
			t.Errorf("NamespaceOf(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestCheckLockKey(t *testing.T) {
	for _, ok := range []string{"coolify:phase2", "coolify:q8m2k4v7x1c9d3f6h0j5n2p8", "mobile:flagsmith:version_state"} {
		if err := CheckLockKey(ok); err != nil {
			t.Errorf("CheckLockKey(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"whatever", "coolfy:phase2", "coolify:", "coolify:../x", "coolify:a b", "daemon:live:x", ""} {
		err := CheckLockKey(bad)
		if err == nil || !strings.Contains(err.Error(), "coolify:, mobile:") {
			t.Errorf("CheckLockKey(%q) = %v, want an error naming the namespaces", bad, err)
		}
	}
}

func TestCheckLockKeyError(t *testing.T) {
	var ke *LockKeyError
	if err := CheckLockKey("coolfy:phase2"); !errors.As(err, &ke) || ke.Key != "coolfy:phase2" || ke.Reason == "" || !errors.Is(err, ErrInvalid) {
		t.Errorf("CheckLockKey(coolfy:phase2) = %v, want a *LockKeyError with key and reason matching ErrInvalid", err)
	}
}

func TestIsPhaseKey(t *testing.T) {
	for key, want := range map[string]bool{
		Phase1Key:                      true,
		Phase2Key:                      true,
		ServiceLockKey("2b1f-uuid"):    false,
		MobileLockKey("version_state"): false,
		"phase1":                       true,
	} {
		if got := IsPhaseKey(key); got != want {
			t.Errorf("IsPhaseKey(%q): got %v, want %v", key, got, want)
		}
	}
}

func TestHolders(t *testing.T) {
	for _, c := range []struct{ name, got, want string }{
		{"step", StepHolder("prod", "1234", "01J", "api"), "prod#1234/api"},
		{"step without a build", StepHolder("prod", "", "01J", "api"), "prod#01J/api"},
		{"daemon", DaemonHolder("d1"), "daemon/d1"},
		{"operator", OperatorHolder("alice"), "operator:alice"},
		{"unnamed operator", OperatorHolder(""), "operator:unknown"},
	} {
		if c.got != c.want {
			t.Errorf("%s: got holder %q, want %q", c.name, c.got, c.want)
		}
	}
}
