package orchestrator

import (
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// HostDeployment is a run's deployment as a Git host (GitHub, GitLab) shows it. Every value
// reaches the host's API: ValidHostDeployment is the one rule for them, used by the clients
// (package github, package gitlab) before anything is sent and by the daemon before it
// records a deployment to report.
type HostDeployment struct {
	// Repo is GitHub's "owner/name" or GitLab's project path "group/sub/project".
	Repo string `json:"repo"`
	// Commit is the full SHA the run deploys (the deployment's ref on GitHub, sha on GitLab).
	Commit string `json:"commit"`
	// Ref is the branch or tag name when known (GitLab needs one; GitHub ignores it).
	Ref string `json:"ref,omitempty"`
	// Tag says Ref is a tag (GitLab).
	Tag         bool   `json:"tag,omitempty"`
	Environment string `json:"environment"`
	// EnvironmentURL is where the deployed environment is reached; "" for none.
	EnvironmentURL string `json:"environment_url,omitempty"`
	// LogURL is the run's dashboard page.
	LogURL string `json:"log_url,omitempty"`
	// RunID is the orchestrator run. GitHub carries it in the deployment's payload
	// ({"orchestrator_run": RunID}) so a deployment can be found again.
	RunID string `json:"run_id"`
	// Production and Transient are GitHub's production_environment and transient_environment.
	Production bool `json:"production,omitempty"`
	Transient  bool `json:"transient,omitempty"`
	// CommitStatus is the commit status context (GitHub) or name (GitLab) the states are also
	// posted under; "" posts no commit status.
	CommitStatus string `json:"commit_status,omitempty"`
}

// HostState is a deployment state, as the orchestrator reports it to a Git host. Each client
// documents how it maps the states onto its host's.
type HostState string

// The deployment states.
const (
	HostQueued     HostState = "queued"
	HostInProgress HostState = "in_progress"
	HostSuccess    HostState = "success"
	HostFailure    HostState = "failure"
	HostError      HostState = "error"
	HostInactive   HostState = "inactive"
	HostCanceled   HostState = "canceled"
)

// Valid reports whether s is one of the states above.
func (s HostState) Valid() bool {
	switch s {
	case HostQueued, HostInProgress, HostSuccess, HostFailure, HostError, HostInactive, HostCanceled:
		return true
	}
	return false
}

// GitHost names the Git host a HostDeployment is checked for.
type GitHost string

// The Git hosts.
const (
	GitHub GitHost = "github"
	GitLab GitHost = "gitlab"
)

// Limits of the values of a HostDeployment (bytes).
const (
	MaxHostRepoSegment  = 100  // one owner, group or repository name
	MaxGitLabRepoDepth  = 20   // path segments of a GitLab project (groups nest up to 20 levels)
	MaxHostRefLen       = 255  // a branch or tag name
	MaxHostEnvLen       = 255  // an environment name (GitHub's and GitLab's limit)
	MaxHostURLLen       = 2048 // EnvironmentURL, LogURL
	MaxCommitStatusName = 100  // CommitStatus
)

var (
	// repoSegment: the characters GitHub allows in owner and repository names, and GitLab in
	// group and project paths. Each is unreserved in a URL, so a valid Repo needs no escaping
	// in a path; the clients escape it all the same.
	repoSegment = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	// commitSHA: a full SHA-1 or SHA-256 object name, lower case (what both hosts answer with,
	// so a deployment found again compares equal).
	commitSHA = regexp.MustCompile(`^(?:[0-9a-f]{40}|[0-9a-f]{64})$`)
	// gitRef: the branch and tag names git accepts, less every character a URL, a shell or a
	// template would read: letters, digits and . _ / -.
	gitRef = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._/-]*$`)
	// environmentName: GitLab's environment name characters less $ { } (which GitLab reads as
	// variables), starting with a letter or digit.
	environmentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._/-]*$`)
	// statusName: a commit status context or name.
	statusName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._:/()-]*$`)
	// runID: the daemon's run IDs (api's runIDPattern).
	runID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
)

// ValidHostDeployment checks d for host: nil, or a FieldErrors (matching ErrInvalid) naming
// every field whose value a host could read as something else than a value. The rules:
//
//   - repo: path segments of [A-Za-z0-9_.-], none "." or "..", none ending in ".git", each at
//     most 100 bytes; exactly two on GitHub (owner/name), 2 to 20 on GitLab;
//   - commit: a full SHA, 40 or 64 lower-case hex digits (a short SHA or a branch name would
//     be resolved by the host, and a deployment could not be found again by it);
//   - ref: required on GitLab; when set, a git branch or tag name of [A-Za-z0-9._/-] without
//     "..", "//", "@{", a leading "-", ".", "/" or a trailing "/", ".", ".lock";
//   - environment: required; letters, digits, space and . _ / -, starting with a letter or
//     digit, not ending in a space, at most 255 bytes;
//   - environment_url, log_url: "" or an absolute http(s) URL with a host and no user
//     information, at most 2048 bytes, without control characters;
//   - run_id: the daemon's run ID ([A-Za-z0-9][A-Za-z0-9_-]{0,63});
//   - commit_status: "" or letters, digits, space and . _ : / ( ) -, at most 100 bytes.
func ValidHostDeployment(host GitHost, d HostDeployment) error {
	var errs FieldErrors
	add := func(fe *FieldError) {
		if fe != nil {
			errs = append(errs, fe)
		}
	}
	if host != GitHub && host != GitLab {
		add(Fieldf("host", "unknown Git host %q", host))
	}
	add(checkRepo(host, d.Repo))
	if !commitSHA.MatchString(d.Commit) {
		add(Fieldf("commit", "want a full commit SHA (40 or 64 lower-case hex digits)"))
	}
	switch {
	case d.Ref == "" && host == GitLab:
		add(Fieldf("ref", "required on GitLab"))
	case d.Ref != "":
		add(checkRef(d.Ref))
	}
	switch {
	case d.Environment == "":
		add(Fieldf("environment", "required"))
	case len(d.Environment) > MaxHostEnvLen:
		add(Fieldf("environment", "longer than %d bytes", MaxHostEnvLen))
	case !environmentName.MatchString(d.Environment) || strings.HasSuffix(d.Environment, " "):
		add(Fieldf("environment", "want letters, digits, space and . _ / -, starting with a letter or digit"))
	}
	add(checkHostURL("environment_url", d.EnvironmentURL))
	add(checkHostURL("log_url", d.LogURL))
	if !runID.MatchString(d.RunID) {
		add(Fieldf("run_id", "not a run ID"))
	}
	if d.CommitStatus != "" && (len(d.CommitStatus) > MaxCommitStatusName || !statusName.MatchString(d.CommitStatus)) {
		add(Fieldf("commit_status", "want at most %d bytes of letters, digits, space and . _ : / ( ) -", MaxCommitStatusName))
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

func checkRepo(host GitHost, repo string) *FieldError {
	segs := strings.Split(repo, "/")
	switch {
	case repo == "":
		return Fieldf("repo", "required")
	case host == GitHub && len(segs) != 2:
		return Fieldf("repo", "want owner/name")
	case host == GitLab && (len(segs) < 2 || len(segs) > MaxGitLabRepoDepth):
		return Fieldf("repo", "want group/project, at most %d segments", MaxGitLabRepoDepth)
	}
	for _, s := range segs {
		switch {
		case s == "" || s == "." || s == "..":
			return Fieldf("repo", "empty, \".\" or \"..\" path segment")
		case len(s) > MaxHostRepoSegment:
			return Fieldf("repo", "a segment longer than %d bytes", MaxHostRepoSegment)
		case !repoSegment.MatchString(s):
			return Fieldf("repo", "want segments of letters, digits and . _ -")
		case strings.HasSuffix(strings.ToLower(s), ".git"):
			return Fieldf("repo", "a segment ending in .git")
		}
	}
	return nil
}

func checkRef(ref string) *FieldError {
	switch {
	case len(ref) > MaxHostRefLen:
		return Fieldf("ref", "longer than %d bytes", MaxHostRefLen)
	case !gitRef.MatchString(ref),
		strings.Contains(ref, ".."), strings.Contains(ref, "//"), strings.Contains(ref, "/."),
		strings.HasSuffix(ref, "/"), strings.HasSuffix(ref, "."), strings.HasSuffix(ref, ".lock"):
		return Fieldf("ref", "not a branch or tag name of letters, digits and . _ / -")
	}
	return nil
}

func checkHostURL(field, v string) *FieldError {
	if v == "" {
		return nil
	}
	if len(v) > MaxHostURLLen {
		return Fieldf(field, "longer than %d bytes", MaxHostURLLen)
	}
	if !utf8.ValidString(v) || strings.IndexFunc(v, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) >= 0 {
		return Fieldf(field, "holds a space or control character")
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return Fieldf(field, "want an absolute http or https URL")
	}
	if u.User != nil {
		return Fieldf(field, "holds user information")
	}
	return nil
}

// CapHostDescription makes a description fit a host's limit of max characters: control
// characters become spaces and a longer text is cut, ending in "…".
func CapHostDescription(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) <= max || max <= 0 {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}
