package config

import (
	"cmp"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
)

// Statuses says which Git hosts are told of a pipeline's runs (a pipeline's `statuses:`):
// each run becomes a deployment on GitHub or GitLab, whose state follows the run (queued,
// in progress, success, failure or error, inactive once a newer run replaces it), and,
// optionally, a commit status. The updates go through a durable outbox and never slow or
// fail a deploy.
//
//	statuses:
//	  github:
//	    repo: acme/api
//	    token: ${GITHUB_TOKEN}        # or app: {id, installation_id, private_key}
//	    environment: production       # default: the pipeline's name
//	    environment_url: https://api.example.com
//	  gitlab:
//	    project: acme/web
//	    url: https://gitlab.example.com
//	    token: ${GITLAB_TOKEN}
//
// A run reports on the configured repository only: a run whose trigger names another
// repository (a webhook of another repository, a caller's repo) is not reported there, and
// its events say so. A run needs a commit (a hex SHA) to be reported.
type Statuses struct {
	GitHub *GitHubStatuses `koanf:"github"`
	GitLab *GitLabStatuses `koanf:"gitlab"`
}

// GitHubStatuses are a pipeline's GitHub deployments.
type GitHubStatuses struct {
	// Repo is "owner/name".
	Repo string `koanf:"repo"`
	// URL is the REST API's base (default DefaultGitHubAPI; GitHub Enterprise Server:
	// https://HOST/api/v3).
	URL string `koanf:"url"`
	// Token authenticates with a token (fine-grained: Deployments read and write, and Commit
	// statuses for CommitStatus); App as a GitHub App installation instead. Exactly one.
	Token           Secret     `koanf:"token"`
	App             *GitHubApp `koanf:"app"`
	HostEnvironment `koanf:",squash"`
	// Transient marks the environment as one that will stop existing (a preview).
	Transient bool `koanf:"transient"`
	// Production marks it as the one end users use; default: the environment is named
	// "production".
	Production *bool `koanf:"production"`
}

// GitHubApp authenticates as one installation of a GitHub App (permissions: Deployments
// read and write; Commit statuses read and write for commit_status).
type GitHubApp struct {
	ID             int64  `koanf:"id"`
	InstallationID int64  `koanf:"installation_id"`
	PrivateKey     Secret `koanf:"private_key"` // the App's PEM key; write it as "${VAR}"
}

// GitLabStatuses are a pipeline's GitLab deployments.
type GitLabStatuses struct {
	// Project is the project's path, "group/sub/project".
	Project string `koanf:"project"`
	// URL is the GitLab instance (default DefaultGitLabURL); the client adds /api/v4.
	URL string `koanf:"url"`
	// Token is a project or group access token with the api scope (Developer role for
	// deployments to unprotected environments).
	Token           Secret `koanf:"token"`
	HostEnvironment `koanf:",squash"`
	// Ref is the branch or tag a deployment names when the run's trigger names none (GitLab
	// needs one; default DefaultGitLabRef).
	Ref string `koanf:"ref"`
}

// HostEnvironment is what both hosts take: where the deployment goes and what it links to.
type HostEnvironment struct {
	// Environment is the deployment's environment (default: the pipeline's name).
	Environment string `koanf:"environment"`
	// EnvironmentURL is where the environment is reached (optional).
	EnvironmentURL string `koanf:"environment_url"`
	// CommitStatus, when set, also posts a commit status under this context (GitHub) or
	// name (GitLab), e.g. "orchestrator/deploy".
	CommitStatus string `koanf:"commit_status"`
}

// Defaults of the statuses block.
const (
	DefaultGitHubAPI = "https://api.github.com"
	DefaultGitLabURL = "https://gitlab.com"
	DefaultGitLabRef = "main"
)

// applyStatusesDefaults fills the defaults of a pipeline's statuses block.
func applyStatusesDefaults(s *Statuses, pipeline string) {
	if s == nil {
		return
	}
	if g := s.GitHub; g != nil {
		g.URL = cmp.Or(g.URL, DefaultGitHubAPI)
		g.Environment = cmp.Or(g.Environment, pipeline)
		if g.Production == nil {
			prod := g.Environment == "production"
			g.Production = &prod
		}
	}
	if g := s.GitLab; g != nil {
		g.URL = cmp.Or(g.URL, DefaultGitLabURL)
		g.Environment = cmp.Or(g.Environment, pipeline)
		g.Ref = cmp.Or(g.Ref, DefaultGitLabRef)
	}
}

// statuses checks a pipeline's statuses block.
func (v *validator) statuses(field string, s *Statuses) {
	if s == nil {
		return
	}
	if g := s.GitHub; g != nil {
		f := field + ".github"
		v.hostURL(f+".url", g.URL)
		switch {
		case g.Token.IsSet() && g.App != nil:
			v.add(f+".token", "give a token or an app, not both")
		case !g.Token.IsSet() && g.App == nil:
			v.add(f+".token", "is required (or app: {id, installation_id, private_key}); write it as \"${VAR}\"")
		case g.App != nil:
			if g.App.ID <= 0 {
				v.add(f+".app.id", "is required: the App's ID, a positive number")
			}
			if g.App.InstallationID <= 0 {
				v.add(f+".app.installation_id", "is required: the installation's ID, a positive number")
			}
			if !strings.Contains(g.App.PrivateKey.Reveal(), "PRIVATE KEY-----") {
				v.add(f+".app.private_key", "want the App's PEM private key (write it as \"${VAR}\")")
			}
		}
		v.hostValues(f, orchestrator.GitHub, g.Repo, "", g.HostEnvironment)
	}
	if g := s.GitLab; g != nil {
		f := field + ".gitlab"
		v.hostURL(f+".url", g.URL)
		if !g.Token.IsSet() {
			v.add(f+".token", "is required; write it as \"${VAR}\"")
		}
		v.hostValues(f, orchestrator.GitLab, g.Project, g.Ref, g.HostEnvironment)
	}
}

// hostValues checks the values of a statuses block that reach the host by the one rule for
// them, orchestrator.ValidHostDeployment, naming each problem by the block's field (GitLab's
// repo is project).
func (v *validator) hostValues(field string, host orchestrator.GitHost, repo, ref string, e HostEnvironment) {
	d := orchestrator.HostDeployment{Repo: repo, Ref: ref, Environment: e.Environment, EnvironmentURL: e.EnvironmentURL,
		CommitStatus: e.CommitStatus, Commit: probeCommit, RunID: "config"}
	names := map[string]string{"repo": "repo", "ref": "ref", "environment": "environment",
		"environment_url": "environment_url", "commit_status": "commit_status"}
	if host == orchestrator.GitLab {
		names["repo"] = "project"
	}
	for _, fe := range orchestrator.AsFieldErrors(orchestrator.ValidHostDeployment(host, d)) {
		if name, ok := names[fe.Field]; ok {
			v.add(field+"."+name, "%s", fe.Reason)
		}
	}
}

// probeCommit stands for the run's commit when a statuses block is checked.
const probeCommit = "0000000000000000000000000000000000000000"

// hostURL checks a Git host's base URL: http(s), no query or fragment.
func (v *validator) hostURL(field, value string) {
	if u := v.httpURL(field, value); u != nil && (u.RawQuery != "" || u.Fragment != "") {
		v.add(field, "must not have a query or fragment")
	}
}
