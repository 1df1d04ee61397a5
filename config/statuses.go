package config

import (
	"cmp"
	"regexp"
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

// environmentPattern is what an environment may be called: GitHub takes any name up to 255
// characters; GitLab letters, digits, spaces and - _ / $ { } . So both hosts take it as it
// is and nothing in it reads as markup or a path.
var environmentPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 _./-]{0,127}$`)

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
		v.repo(f+".repo", g.Repo, true)
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
		v.hostEnvironment(f, g.HostEnvironment)
	}
	if g := s.GitLab; g != nil {
		f := field + ".gitlab"
		v.repo(f+".project", g.Project, false)
		v.hostURL(f+".url", g.URL)
		if !g.Token.IsSet() {
			v.add(f+".token", "is required; write it as \"${VAR}\"")
		}
		v.hostEnvironment(f, g.HostEnvironment)
		if !orchestrator.ValidRef(g.Ref) {
			v.add(f+".ref", "%s is not a branch or tag name", v.show(f+".ref", g.Ref))
		}
	}
}

// repo checks a repository path (orchestrator.ValidRepo); github wants exactly owner/name.
func (v *validator) repo(field, value string, github bool) {
	if !v.required(field, value) {
		return
	}
	if !orchestrator.ValidRepo(value) || (github && strings.Count(value, "/") != 1) {
		want := "group/sub/project"
		if github {
			want = "owner/name"
		}
		v.add(field, "%s is not a repository path: want %s, each part letters, digits, '.', '_' or '-'", v.show(field, value), want)
	}
}

// hostURL checks a Git host's base URL: http(s), no query or fragment.
func (v *validator) hostURL(field, value string) {
	if u := v.httpURL(field, value); u != nil && (u.RawQuery != "" || u.Fragment != "") {
		v.add(field, "must not have a query or fragment")
	}
}

func (v *validator) hostEnvironment(field string, e HostEnvironment) {
	v.pattern(field+".environment", e.Environment, environmentPattern)
	if e.EnvironmentURL != "" {
		v.httpURL(field+".environment_url", e.EnvironmentURL)
	}
	if e.CommitStatus != "" {
		v.pattern(field+".commit_status", e.CommitStatus, environmentPattern)
	}
}
