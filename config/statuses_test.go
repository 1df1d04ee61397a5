package config

import (
	"testing"
)

// TestLoadPipelineStatuses: a statuses block loads with its defaults (the environment is the
// pipeline's name, GitHub's production flag follows it, GitLab's ref is main), its tokens
// from the environment, kept as Secrets.
func TestLoadPipelineStatuses(t *testing.T) {
	y := minimal + `
statuses:
  github:
    repo: acme/api
    token: "${GITHUB_TOKEN}"
    environment_url: https://api.example.com
    commit_status: orchestrator/deploy
  gitlab:
    project: acme/platform/web
    url: https://gitlab.example.com
    token: "${GITLAB_TOKEN}"
    environment: production
`
	p, err := LoadPipelineBytes("prod.yaml", []byte(y), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	gh, gl := p.Statuses.GitHub, p.Statuses.GitLab
	if gh == nil || gh.Repo != "acme/api" || gh.URL != DefaultGitHubAPI || gh.Environment != "prod" || gh.Production == nil || *gh.Production ||
		gh.Token.Reveal() != sentinel+"-GITHUB_TOKEN" || gh.EnvironmentURL != "https://api.example.com" || gh.CommitStatus != "orchestrator/deploy" {
		t.Errorf("github = %+v", gh)
	}
	if gl == nil || gl.Project != "acme/platform/web" || gl.Environment != "production" || gl.Ref != DefaultGitLabRef || gl.Token.Reveal() != sentinel+"-GITLAB_TOKEN" {
		t.Errorf("gitlab = %+v", gl)
	}
	p2, err := LoadPipelineBytes("prod.yaml", []byte(minimal+"statuses:\n  github: {repo: acme/api, token: \"${T}\", environment: production}\n"), testEnv())
	if err != nil || !*p2.Statuses.GitHub.Production {
		t.Errorf("environment production: %+v, %v (want production: true by default)", p2.Statuses, err)
	}
}

// TestLoadPipelineStatusesProblems: each mistake is named by its field, and no token shown.
func TestLoadPipelineStatusesProblems(t *testing.T) {
	y := minimal + `
statuses:
  github:
    repo: acme/api/extra
    url: "https://api.github.com/?x=1"
    token: "${GITHUB_TOKEN}"
    app: { id: 0, installation_id: 2, private_key: "${KEY}" }
    environment: "<script>"
    environment_url: "javascript:alert(1)"
  gitlab:
    project: "../admin"
    ref: "a..b"
`
	_, err := LoadPipelineBytes("prod.yaml", []byte(y), testEnv())
	ps := mustProblems(t, err)
	wantProblem(t, ps, "statuses.github.repo", "owner/name")
	wantProblem(t, ps, "statuses.github.url", "query")
	wantProblem(t, ps, "statuses.github.token", "not both")
	wantProblem(t, ps, "statuses.github.environment", "starting with a letter or digit")
	wantProblem(t, ps, "statuses.github.environment_url", "absolute http")
	wantProblem(t, ps, "statuses.gitlab.project", `"." or ".."`)
	wantProblem(t, ps, "statuses.gitlab.token", "is required")
	wantProblem(t, ps, "statuses.gitlab.ref", "not a branch or tag name")

	_, err = LoadPipelineBytes("prod.yaml", []byte(minimal+`
statuses:
  github: { repo: acme/api, app: { id: 0, private_key: "${KEY}" } }
`), testEnv())
	ps = mustProblems(t, err)
	wantProblem(t, ps, "statuses.github.app.id", "is required")
	wantProblem(t, ps, "statuses.github.app.installation_id", "is required")
	wantProblem(t, ps, "statuses.github.app.private_key", "PEM")
}
