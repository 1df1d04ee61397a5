package orchestrator_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

// TestOriginRules: what a caller says asked for a run is checked before anything stores or
// shows it: a repository is a path (never one that climbs out of its route), page URLs are
// http or https without credentials (no javascript: link on the dashboard), a traceparent
// is W3C's. Each problem names the API's field.
func TestOriginRules(t *testing.T) {
	good := orchestrator.Origin{Provider: "api", Repo: "octo/app", Ref: "main", Actor: "alice",
		JobURL: "https://github.com/octo/app/actions/runs/1", CommitURL: "https://gitlab.example.com/g/sub/p/-/commit/abc",
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	if err := (orchestrator.Trigger{Origin: good}).Validate(); err != nil {
		t.Fatalf("valid origin refused: %v", err)
	}
	for _, repo := range []string{"group/sub/project", "a.b/c_d-e"} {
		if !orchestrator.ValidRepo(repo) {
			t.Errorf("ValidRepo(%q) = false, want true", repo)
		}
	}
	for _, c := range []struct {
		field string
		o     orchestrator.Origin
	}{
		{"repo", orchestrator.Origin{Repo: "octo"}},
		{"repo", orchestrator.Origin{Repo: "octo/.."}},
		{"repo", orchestrator.Origin{Repo: "../octo/app"}},
		{"repo", orchestrator.Origin{Repo: "octo/app?x=1"}},
		{"repo", orchestrator.Origin{Repo: "octo/app/"}},
		{"job_url", orchestrator.Origin{JobURL: "javascript:alert(1)"}},
		{"job_url", orchestrator.Origin{JobURL: "/relative"}},
		{"commit_url", orchestrator.Origin{CommitURL: "https://user:pass@git.example.com/c"}},
		{"actor", orchestrator.Origin{Actor: "al\nice"}},
		{"ref", orchestrator.Origin{Ref: strings.Repeat("r", orchestrator.MaxOriginText+1)}},
		{"traceparent", orchestrator.Origin{Traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}},
		{"traceparent", orchestrator.Origin{Traceparent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
	} {
		got := fields(t, orchestrator.Trigger{Origin: c.o}.Validate())
		if !slices.Equal(got, []string{c.field}) {
			t.Errorf("%+v: problems name %v, want [%s]", c.o, got, c.field)
		}
		if cleaned := c.o.Cleaned(); !cleaned.IsZero() {
			t.Errorf("%+v cleaned = %+v, want the bad value dropped", c.o, cleaned)
		}
	}
	mixed := good
	mixed.JobURL = "javascript:alert(1)"
	want := good
	want.JobURL = ""
	if got := mixed.Cleaned(); got != want {
		t.Errorf("cleaned = %+v, want only job_url dropped: %+v", got, want)
	}
}

func TestOriginString(t *testing.T) {
	o := orchestrator.Origin{Provider: "github", Repo: "octo/app", Ref: "main", Actor: "alice",
		JobURL: "https://github.com/octo/app/actions/runs/7", Delivery: "d-1", Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	want := "github octo/app@main by alice, job https://github.com/octo/app/actions/runs/7, delivery d-1"
	if got := o.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (orchestrator.Origin{}).String(); got != "" {
		t.Errorf("empty origin String() = %q, want empty", got)
	}
}
