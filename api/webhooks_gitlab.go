package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

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
	} `json:"object_attributes"`
	// MergeRequest is set on a merge-request pipeline.
	MergeRequest json.RawMessage `json:"merge_request"`
	Project      gitlabProject   `json:"project"`
}

// gitlabPush is the part of a GitLab push or tag push event the daemon reads.
type gitlabPush struct {
	Ref     string        `json:"ref"`
	After   string        `json:"after"`
	Project gitlabProject `json:"project"`
}

type gitlabProject struct {
	PathWithNamespace string `json:"path_with_namespace"`
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
		if oa.Name != nil && *oa.Name != "" {
			ev.Workflow = *oa.Name
		}
		if !oa.Tag {
			ev.Branch = oa.Ref // a branch name as GitLab gives it, never stripped of refs/heads/
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
			Branch: branchOfRef(p.Ref), Trigger: orchestrator.Trigger{Commit: p.After}}
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
