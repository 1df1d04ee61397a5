package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
)

// GitLab's parse step (parseGitLab): it never refuses a delivery, it ignores it with the
// reason.

// GitLab event kinds, by X-Gitlab-Event, and the object_kind each carries (read when the
// header is missing).
var gitlabKinds = map[string]string{
	"pipeline": "Pipeline Hook", "push": "Push Hook", "tag_push": "Tag Push Hook",
	"merge_request": "Merge Request Hook", "build": "Job Hook", "deployment": "Deployment Hook",
	"release": "Release Hook", "note": "Note Hook", "issue": "Issue Hook",
}

// gitlabPipeline is the part of a GitLab pipeline event the daemon reads.
type gitlabPipeline struct {
	ObjectAttributes *struct {
		ID     int64   `json:"id"`
		Name   *string `json:"name"`
		Ref    string  `json:"ref"`
		Tag    bool    `json:"tag"`
		SHA    string  `json:"sha"`
		Source string  `json:"source"`
		Status string  `json:"status"`
		// URL is the pipeline's page (GitLab 15.6 and later).
		URL string `json:"url"`
	} `json:"object_attributes"`
	User   *gitlabUser   `json:"user"`
	Commit *gitlabCommit `json:"commit"`
	// MergeRequest is set on a merge-request pipeline.
	MergeRequest json.RawMessage `json:"merge_request"`
	Project      gitlabProject   `json:"project"`
}

// gitlabPush is the part of a GitLab push or tag push event the daemon reads.
type gitlabPush struct {
	Ref          string        `json:"ref"`
	After        string        `json:"after"`
	Project      gitlabProject `json:"project"`
	UserUsername string        `json:"user_username"`
}

type gitlabProject struct {
	PathWithNamespace string `json:"path_with_namespace"`
	WebURL            string `json:"web_url"`
}

type gitlabUser struct {
	Username string `json:"username"`
}

type gitlabCommit struct {
	URL string `json:"url"`
}

// gitlabOrigin is what a GitLab delivery says asked for the run (the webhook step adds the
// provider, the delivery and cleans it). ref is a branch or tag name, or a full ref.
func gitlabOrigin(p gitlabProject, ref string, tag bool, commit, commitURL, job, actor string) orchestrator.Origin {
	o := orchestrator.Origin{Repo: p.PathWithNamespace, Ref: ref, Tag: tag, CommitURL: commitURL, JobURL: job, Actor: actor}
	if t, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		o.Ref, o.Tag = t, true
	} else if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
		o.Ref = b
	}
	if o.CommitURL == "" && p.WebURL != "" && commit != "" {
		o.CommitURL = strings.TrimSuffix(p.WebURL, "/") + "/-/commit/" + commit
	}
	return o
}

// zeroSHA is the "after" of a push that deleted its ref.
const zeroSHA = "0000000000000000000000000000000000000000"

// parseGitLab reduces a GitLab event to a ciEvent. GitLab disables a hook whose deliveries
// keep failing, so nothing here is an error: an event of a kind that is not a deploy signal,
// or of an unexpected shape, is ignored with the reason, whatever else the body holds.
// obj is body's JSON object (decodeObject), where the kind is read when the header is missing.
func parseGitLab(event string, body []byte, obj map[string]json.RawMessage) (ciEvent, error) {
	kind := event
	if kind == "" {
		var k string
		_ = json.Unmarshal(obj["object_kind"], &k) // a kind missing or of the wrong type stays unknown
		kind = gitlabKinds[k]
	}
	notUnderstood := func(err error) (ciEvent, error) {
		return ciEvent{Event: kind, Ignore: fmt.Sprintf("GitLab %s not understood, so not a deploy signal: %v", truncate(kind, 64), err)}, nil
	}
	switch kind {
	case "Pipeline Hook":
		var p gitlabPipeline
		if err := decodeLenient(body, &p); err != nil {
			return notUnderstood(err)
		}
		oa := p.ObjectAttributes
		if oa == nil {
			return notUnderstood(errors.New("no object_attributes"))
		}
		ev := ciEvent{Event: "pipeline", Repository: p.Project.PathWithNamespace, Workflow: oa.Source, Source: oa.Source,
			Trigger: orchestrator.Trigger{Build: strconv.FormatInt(oa.ID, 10), Commit: oa.SHA}}
		var user, commitURL string
		if p.User != nil {
			user = p.User.Username
		}
		if p.Commit != nil {
			commitURL = p.Commit.URL
		}
		ev.Trigger.Origin = gitlabOrigin(p.Project, oa.Ref, oa.Tag, oa.SHA, commitURL, oa.URL, user)
		if oa.Name != nil && *oa.Name != "" {
			ev.Workflow = *oa.Name
		}
		if !oa.Tag {
			ev.Branch = oa.Ref // a branch name as GitLab gives it, never stripped of refs/heads/
		} else {
			ev.Tag = oa.Ref
		}
		switch {
		case config.NeverDeploys(config.ProviderGitLab, oa.Source) || (len(p.MergeRequest) > 0 && string(p.MergeRequest) != "null"):
			ev.Ignore = "merge-request pipelines never deploy (they run a merge request's code, maybe a fork's)"
		case oa.Status != "success":
			ev.Ignore = fmt.Sprintf("pipeline status %q: only successful pipelines deploy", truncate(oa.Status, 32))
		}
		return ev, nil
	case "Push Hook", "Tag Push Hook":
		var p gitlabPush
		if err := decodeLenient(body, &p); err != nil {
			return notUnderstood(err)
		}
		ev := ciEvent{Event: "push", Repository: p.Project.PathWithNamespace, Source: "push",
			Branch: branchOfRef(p.Ref), Trigger: orchestrator.Trigger{Commit: p.After,
				Origin: gitlabOrigin(p.Project, p.Ref, false, p.After, "", "", p.UserUsername)}}
		if p.After == zeroSHA || p.After == "" {
			ev.Ignore = "push deleted the ref: nothing to deploy"
		}
		return ev, nil
	}
	if kind == "" {
		kind = "without X-Gitlab-Event or object_kind"
	}
	return ciEvent{Event: kind,
		Ignore: fmt.Sprintf("GitLab event %q is not a deploy signal (pipeline events are)", truncate(kind, 64))}, nil
}
