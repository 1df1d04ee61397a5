package orchestrator_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

// fields returns the field every problem of err names, in order.
func fields(t *testing.T, err error) []string {
	t.Helper()
	if !errors.Is(err, orchestrator.ErrInvalid) {
		t.Fatalf("got %v, want an error matching ErrInvalid", err)
	}
	var out []string
	for _, fe := range orchestrator.AsFieldErrors(err) {
		out = append(out, fe.Field)
	}
	return out
}

func TestTriggerValidate(t *testing.T) {
	if err := (orchestrator.Trigger{Build: "1234", ImageTag: "v1.2.3", Commit: "0a1b2c", AppVersion: "2.3.0", Params: map[string]string{"region": "eu"}}).Validate(); err != nil {
		t.Errorf("valid trigger refused: %v", err)
	}
	if err := (orchestrator.Trigger{}).Validate(); err != nil {
		t.Errorf("empty trigger refused: %v", err)
	}
	bad := orchestrator.Trigger{
		Build: "12/34", ImageTag: "-x", Commit: "-x", AppVersion: "1 2",
		Params: map[string]string{"bad-key": "v", "ok": "line\nbreak"},
	}
	got := fields(t, bad.Validate())
	for _, f := range []string{"build", "image_tag", "commit", "app_version", "params.bad-key", "params.ok"} {
		if !slices.Contains(got, f) {
			t.Errorf("problems name %v, want %s among them", got, f)
		}
	}
}

// TestTriggerLimits: commit and app_version have one limit (MaxCommitLen), a reason goes
// with any trigger, and text problems come before each field's rule.
func TestTriggerLimits(t *testing.T) {
	long := "a" + strings.Repeat("b", orchestrator.MaxCommitLen)
	for _, tr := range []orchestrator.Trigger{{Commit: long}, {AppVersion: "1." + strings.Repeat("1", orchestrator.MaxCommitLen)}} {
		if err := tr.Validate(); err == nil {
			t.Errorf("%+v: a value over %d bytes accepted", tr, orchestrator.MaxCommitLen)
		}
	}
	if err := (orchestrator.Trigger{Commit: long[:orchestrator.MaxCommitLen]}).Validate(); err != nil {
		t.Errorf("a commit of %d bytes refused: %v", orchestrator.MaxCommitLen, err)
	}
	for _, tr := range []orchestrator.Trigger{{Reason: "hotfix for INC-12"}, {Reason: "why", Rollback: true}} {
		if err := tr.Validate(); err != nil {
			t.Errorf("%+v refused: %v", tr, err)
		}
	}
	got := fields(t, orchestrator.Trigger{Build: "4/2", ImageTag: "a\x00"}.Validate())
	if !slices.Equal(got, []string{"image_tag", "build"}) {
		t.Errorf("problems name %v, want [image_tag build]: text first, then rules, one per field", got)
	}
}

// Issue 41, item 3: a numeric build has an upper bound, MaxBuildNumber (18 digits, leading
// zeros aside), so no trigger can put a build out of reach of every later one.
func TestTriggerBuildUpperBound(t *testing.T) {
	for _, b := range []string{"999999999999999999", "000000000000000000000000042", "20261203052652", "v99999999999999999999999999"} {
		if err := (orchestrator.Trigger{Build: b}).Validate(); err != nil {
			t.Errorf("build %s refused: %v", b, err)
		}
	}
	for _, b := range []string{"1000000000000000000", "99999999999999999999999999"} {
		got := fields(t, orchestrator.Trigger{Build: b}.Validate())
		if !slices.Equal(got, []string{"build"}) {
			t.Errorf("build %s: problems name %v, want [build]", b, got)
		}
	}
	if err := (orchestrator.Trigger{Build: "99999999999999999999999999"}).Validate(); err == nil || strings.Contains(err.Error(), "99999") ||
		!strings.Contains(err.Error(), "999 999 999 999 999 999") {
		t.Errorf("error %v: want it to name the bound, not the value", err)
	}
}
