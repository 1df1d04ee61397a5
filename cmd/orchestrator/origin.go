package main

import (
	"cmp"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
)

// ciOrigin is what the CI job the CLI runs in says of itself, from its environment: GitHub
// Actions (GITHUB_REPOSITORY, GITHUB_SERVER_URL, GITHUB_RUN_ID, GITHUB_ACTOR, GITHUB_REF_NAME,
// GITHUB_REF_TYPE) or GitLab CI (CI_PROJECT_PATH, CI_PROJECT_URL, CI_JOB_URL,
// GITLAB_USER_LOGIN, CI_COMMIT_REF_NAME, CI_COMMIT_TAG); TRACEPARENT, when the job exports
// its trace context, either way. commit, when set, gives the commit's page. Outside CI the
// actor is the user.
func ciOrigin(getenv func(string) string, commit string) orchestrator.Origin {
	o := orchestrator.Origin{Provider: "cli", Traceparent: getenv("TRACEPARENT")}
	switch {
	case getenv("GITHUB_ACTIONS") == "true":
		server := strings.TrimSuffix(cmp.Or(getenv("GITHUB_SERVER_URL"), "https://github.com"), "/")
		o.Repo, o.Actor, o.Ref = getenv("GITHUB_REPOSITORY"), getenv("GITHUB_ACTOR"), getenv("GITHUB_REF_NAME")
		o.Tag = getenv("GITHUB_REF_TYPE") == "tag"
		if o.Repo != "" {
			if id := getenv("GITHUB_RUN_ID"); id != "" {
				o.JobURL = server + "/" + o.Repo + "/actions/runs/" + id
			}
			if commit != "" {
				o.CommitURL = server + "/" + o.Repo + "/commit/" + commit
			}
		}
	case getenv("GITLAB_CI") == "true":
		o.Repo, o.Actor, o.JobURL = getenv("CI_PROJECT_PATH"), getenv("GITLAB_USER_LOGIN"), getenv("CI_JOB_URL")
		o.Ref, o.Tag = getenv("CI_COMMIT_REF_NAME"), getenv("CI_COMMIT_TAG") != ""
		if p := getenv("CI_PROJECT_URL"); p != "" && commit != "" {
			o.CommitURL = strings.TrimSuffix(p, "/") + "/-/commit/" + commit
		}
	default:
		o.Actor = userName(getenv)
	}
	return o
}
