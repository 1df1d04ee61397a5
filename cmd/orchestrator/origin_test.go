package main

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/deploy-orchestrator/orchestrator"
)

// TestTriggerOriginFromCI: inside a CI job, the CLI says which job, repository, ref and user
// asked for the run from the CI's own environment; flags override it; outside CI the actor
// is the user.
func TestTriggerOriginFromCI(t *testing.T) {
	const sha = "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e"
	github := map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/api",
		"GITHUB_RUN_ID": "42", "GITHUB_ACTOR": "octocat", "GITHUB_REF_NAME": "v1.2.0", "GITHUB_REF_TYPE": "tag",
		"TRACEPARENT": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	gitlab := map[string]string{"GITLAB_CI": "true", "CI_PROJECT_PATH": "acme/web", "CI_PROJECT_URL": "https://gitlab.example.com/acme/web",
		"CI_JOB_URL": "https://gitlab.example.com/acme/web/-/jobs/9", "GITLAB_USER_LOGIN": "web-bot", "CI_COMMIT_REF_NAME": "main"}
	for _, c := range []struct {
		name  string
		env   map[string]string
		flags []string
		want  orchestrator.Origin
	}{
		{"github", github, []string{"--commit", sha}, orchestrator.Origin{Provider: "cli", Repo: "acme/api", Ref: "v1.2.0", Tag: true,
			CommitURL: "https://github.com/acme/api/commit/" + sha, JobURL: "https://github.com/acme/api/actions/runs/42", Actor: "octocat",
			Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{"gitlab", gitlab, []string{"--commit", sha}, orchestrator.Origin{Provider: "cli", Repo: "acme/web", Ref: "main",
			CommitURL: "https://gitlab.example.com/acme/web/-/commit/" + sha, JobURL: "https://gitlab.example.com/acme/web/-/jobs/9", Actor: "web-bot"}},
		{"flags over the CI's", gitlab, []string{"--repo", "acme/other", "--ref", "hotfix", "--actor", "alice", "--job-url", "https://ci.example.com/1"},
			orchestrator.Origin{Provider: "cli", Repo: "acme/other", Ref: "hotfix", JobURL: "https://ci.example.com/1", Actor: "alice"}},
		{"outside CI", map[string]string{"USER": "bob"}, nil, orchestrator.Origin{Provider: "cli", Actor: "bob"}},
	} {
		fs := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
		tf := addTriggerFlags(fs)
		if err := fs.Parse(c.flags); err != nil {
			t.Fatal(err)
		}
		tr, err := tf.trigger("cli:test", func(k string) string { return c.env[k] })
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if tr.Origin != c.want {
			t.Errorf("%s: origin\n got %+v\nwant %+v", c.name, tr.Origin, c.want)
		}
	}
}
