package orchestrator

import (
	"net/url"
	"regexp"
	"strings"
)

// Origin is what asked for a run, for the people who look at it later: the CI job or
// pipeline, the person, the repository and commit, the delivery. The front doors fill it (a
// webhook from the delivery, the API and the CLI from what the caller says, the CLI from its
// CI's environment); the run stores it with its trigger; the dashboard, `runs show`,
// notifications, Git host statuses and traces show it. It never decides what a run does:
// Trigger.By (the token or the verified webhook) is who is answerable, and Actor is what
// the caller said of itself.
type Origin struct {
	// Provider is where the trigger came from: github, gitlab, generic, api or cli.
	Provider string `json:"provider,omitempty"`
	// Repo is the repository the commit belongs to: GitHub's "owner/name", GitLab's project
	// path "group/sub/project" (ValidRepo).
	Repo string `json:"repo,omitempty"`
	// Ref is the branch or tag the commit was built from, when known (GitLab deployments
	// need one).
	Ref string `json:"ref,omitempty"`
	// Tag reports that Ref is a tag, not a branch.
	Tag bool `json:"tag,omitempty"`
	// CommitURL is the commit's page on the Git host; JobURL the CI job's or pipeline's.
	CommitURL string `json:"commit_url,omitempty"`
	JobURL    string `json:"job_url,omitempty"`
	// Actor is the person or bot the CI or the caller names (a login), as they said it.
	Actor string `json:"actor,omitempty"`
	// Delivery is the webhook's delivery ID.
	Delivery string `json:"delivery,omitempty"`
	// Traceparent is the W3C trace context the run's trace continues (the CI job's span).
	Traceparent string `json:"traceparent,omitempty"`
}

// Limits on an origin's values (bytes).
const (
	MaxOriginText = 256  // repo, ref, actor, delivery
	MaxOriginURL  = 1024 // commit_url and job_url
)

// traceparentPattern is a W3C Trace Context traceparent of version 00.
var traceparentPattern = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// ValidRepo reports whether repo is a repository path a Git host takes: GitHub's owner/name
// or a GitLab project path of up to 20 segments (the rule of ValidHostDeployment's repo).
func ValidRepo(repo string) bool { return checkRepo(GitLab, repo) == nil }

// ValidRef reports whether ref is a branch or tag name by ValidHostDeployment's rule for ref.
func ValidRef(ref string) bool { return ref != "" && checkRef(ref) == nil }

// ValidTraceparent reports whether tp is a W3C traceparent of version 00 whose trace and
// parent IDs are not all zeros.
func ValidTraceparent(tp string) bool {
	return traceparentPattern.MatchString(tp) && tp[3:35] != strings.Repeat("0", 32) && tp[36:52] != strings.Repeat("0", 16)
}

// IsZero reports whether the origin says nothing.
func (o Origin) IsZero() bool { return o == Origin{} }

// problems lists what is wrong with each value, named by the API's field (repo, ref,
// commit_url, job_url, actor, delivery, traceparent). Provider is set by the front door.
func (o Origin) problems() FieldErrors {
	var es FieldErrors
	add := func(fe *FieldError) {
		if fe != nil {
			es = append(es, fe)
		}
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"provider", o.Provider, 32}, {"repo", o.Repo, MaxOriginText}, {"ref", o.Ref, MaxOriginText},
		{"actor", o.Actor, MaxOriginText}, {"delivery", o.Delivery, MaxOriginText},
		{"commit_url", o.CommitURL, MaxOriginURL}, {"job_url", o.JobURL, MaxOriginURL},
		{"traceparent", o.Traceparent, 55},
	} {
		if fe := checkText(f.name, f.v, f.max); fe != nil {
			add(fe)
			continue
		}
		switch {
		case f.v == "":
		case f.name == "ref" && !ValidRef(f.v):
			add(Fieldf("ref", "not a branch or tag name"))
		case f.name == "repo" && !ValidRepo(f.v):
			add(Fieldf("repo", "want a repository path such as owner/name or group/sub/project: letters, digits, '.', '_' or '-' in each segment"))
		case (f.name == "commit_url" || f.name == "job_url") && !pageURL(f.v):
			add(Fieldf(f.name, "want an absolute http or https URL with a host and no credentials"))
		case f.name == "traceparent" && !ValidTraceparent(f.v):
			add(Fieldf("traceparent", "want a W3C traceparent: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>"))
		}
	}
	return es
}

// Cleaned returns the origin without the values that break its rules: for what a signed
// webhook delivery says, which is kept as far as it is sound rather than refused (a CI
// host's odd job URL must not stop a deploy).
func (o Origin) Cleaned() Origin {
	for _, fe := range o.problems() {
		switch fe.Field {
		case "provider":
			o.Provider = ""
		case "repo":
			o.Repo = ""
		case "ref":
			o.Ref, o.Tag = "", false
		case "actor":
			o.Actor = ""
		case "delivery":
			o.Delivery = ""
		case "commit_url":
			o.CommitURL = ""
		case "job_url":
			o.JobURL = ""
		case "traceparent":
			o.Traceparent = ""
		}
	}
	return o
}

// pageURL reports whether s is a page people may open from the dashboard: absolute http or
// https with a host, without user information (which would show a credential).
func pageURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil
}

// String is the origin in one line, for a terminal or a chat message: "github octo/app@main
// by alice, job https://…". Empty for an empty origin.
func (o Origin) String() string {
	var b strings.Builder
	add := func(sep, s string) {
		if s == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteString(sep)
		}
		b.WriteString(s)
	}
	add("", o.Provider)
	if o.Repo != "" {
		add(" ", o.Repo)
		if o.Ref != "" {
			b.WriteString("@" + o.Ref)
		}
	} else if o.Ref != "" {
		add(" ", o.Ref)
	}
	if o.Actor != "" {
		add(" ", "by "+o.Actor)
	}
	if o.JobURL != "" {
		add(", ", "job "+o.JobURL)
	}
	if o.Delivery != "" {
		add(", ", "delivery "+o.Delivery)
	}
	return b.String()
}
