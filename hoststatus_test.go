package orchestrator_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

func goodHostDeployment() orchestrator.HostDeployment {
	return orchestrator.HostDeployment{
		Repo: "acme/web", Commit: strings.Repeat("a1", 20), Ref: "main", Environment: "production",
		EnvironmentURL: "https://web.example.com/", LogURL: "https://orchestrator.example.com/runs/r1",
		RunID: "20261201-abc", CommitStatus: "orchestrator/deploy",
	}
}

func TestValidHostDeployment(t *testing.T) {
	for _, host := range []orchestrator.GitHost{orchestrator.GitHub, orchestrator.GitLab} {
		if err := orchestrator.ValidHostDeployment(host, goodHostDeployment()); err != nil {
			t.Errorf("%s: a good deployment: got %v, want nil", host, err)
		}
	}
	cases := []struct {
		name  string
		host  orchestrator.GitHost
		edit  func(*orchestrator.HostDeployment)
		field string
	}{
		{"traversal", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Repo = "../x" }, "repo"},
		{"dot segment", orchestrator.GitLab, func(d *orchestrator.HostDeployment) { d.Repo = "g/./p" }, "repo"},
		{"three segments on GitHub", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Repo = "a/b/c" }, "repo"},
		{"one segment on GitLab", orchestrator.GitLab, func(d *orchestrator.HostDeployment) { d.Repo = "p" }, "repo"},
		{"encoded slash", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Repo = "a/b%2Fc" }, "repo"},
		{"query in repo", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Repo = "a/b?x=1" }, "repo"},
		{".git", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Repo = "a/b.git" }, "repo"},
		{"commit with slash", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Commit = "main/x" }, "commit"},
		{"commit with query", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Commit = strings.Repeat("a", 39) + "?" }, "commit"},
		{"short commit", orchestrator.GitLab, func(d *orchestrator.HostDeployment) { d.Commit = "abc1234" }, "commit"},
		{"upper-case commit", orchestrator.GitLab, func(d *orchestrator.HostDeployment) { d.Commit = strings.Repeat("A", 40) }, "commit"},
		{"no ref on GitLab", orchestrator.GitLab, func(d *orchestrator.HostDeployment) { d.Ref = "" }, "ref"},
		{"ref with ..", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Ref = "a..b" }, "ref"},
		{"ref with @{", orchestrator.GitLab, func(d *orchestrator.HostDeployment) { d.Ref = "a@{1}" }, "ref"},
		{"no environment", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Environment = "" }, "environment"},
		{"variable in environment", orchestrator.GitLab, func(d *orchestrator.HostDeployment) { d.Environment = "review/${CI_COMMIT_REF}" }, "environment"},
		{"newline in environment", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Environment = "prod\nx" }, "environment"},
		{"ampersand in environment", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.Environment = "prod&sha=1" }, "environment"},
		{"javascript url", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.LogURL = "javascript:alert(1)" }, "log_url"},
		{"credentials in url", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.EnvironmentURL = "https://u:p@x.example/" }, "environment_url"},
		{"bad run id", orchestrator.GitHub, func(d *orchestrator.HostDeployment) { d.RunID = "r 1" }, "run_id"},
		{"bad status name", orchestrator.GitLab, func(d *orchestrator.HostDeployment) { d.CommitStatus = "x\ny" }, "commit_status"},
	}
	for _, tc := range cases {
		d := goodHostDeployment()
		tc.edit(&d)
		err := orchestrator.ValidHostDeployment(tc.host, d)
		var fes orchestrator.FieldErrors
		if !errors.As(err, &fes) || !errors.Is(err, orchestrator.ErrInvalid) {
			t.Errorf("%s: got %v, want FieldErrors matching ErrInvalid", tc.name, err)
			continue
		}
		if len(fes) != 1 || fes[0].Field != tc.field {
			t.Errorf("%s: got %v, want one error on %s", tc.name, err, tc.field)
		}
	}
}

func TestCapHostDescription(t *testing.T) {
	if got := orchestrator.CapHostDescription("a\nb", 140); got != "a b" {
		t.Errorf("got %q, want %q", got, "a b")
	}
	got := orchestrator.CapHostDescription(strings.Repeat("é", 200), 140)
	if n := len([]rune(got)); n != 140 || !strings.HasSuffix(got, "…") {
		t.Errorf("got %d runes %q, want 140 ending in …", n, got)
	}
}
