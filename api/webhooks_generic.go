package api

import (
	"encoding/json"

	"github.com/deploy-orchestrator/orchestrator"
)

// The generic webhook's parse step (parseGeneric).

// genericDelivery is the body of the generic webhook. Every field is optional; rules match on
// event, repository, branch and workflow, and the trigger fields become the run's defaults
// (build a string or a whole number, as for the API). Other fields are allowed and can be read
// by rules with ${payload.…}.
type genericDelivery struct {
	Event      string            `json:"event"`
	Repository string            `json:"repository"`
	Branch     string            `json:"branch"`
	Workflow   string            `json:"workflow"`
	Build      buildText         `json:"build"`
	ImageTag   string            `json:"image_tag"`
	Commit     string            `json:"commit"`
	AppVersion string            `json:"app_version"`
	Params     map[string]string `json:"params"`
	// What asked for the run (orchestrator.Origin): the branch is its ref.
	JobURL      string `json:"job_url"`
	CommitURL   string `json:"commit_url"`
	Actor       string `json:"actor"`
	Traceparent string `json:"traceparent"`
}

// parseGeneric reads a generic delivery, its JSON object's members (obj, from decodeObject). A
// field it reads that holds a value of the wrong type is a 400 naming it, every such field at
// once.
func parseGeneric(obj map[string]json.RawMessage) (ciEvent, error) {
	var p genericDelivery
	if es := decodeFields(obj, false, stringField("event", &p.Event), stringField("repository", &p.Repository),
		stringField("branch", &p.Branch), stringField("workflow", &p.Workflow), buildField(&p.Build),
		stringField("image_tag", &p.ImageTag), stringField("commit", &p.Commit), stringField("app_version", &p.AppVersion),
		paramsField(&p.Params), stringField("job_url", &p.JobURL), stringField("commit_url", &p.CommitURL),
		stringField("actor", &p.Actor), stringField("traceparent", &p.Traceparent)); len(es) > 0 {
		return ciEvent{}, es
	}
	return ciEvent{Event: p.Event, Repository: p.Repository, Branch: p.Branch, Workflow: p.Workflow,
		Trigger: orchestrator.Trigger{Build: string(p.Build), ImageTag: p.ImageTag, Commit: p.Commit, AppVersion: p.AppVersion, Params: p.Params,
			Origin: orchestrator.Origin{Repo: p.Repository, Ref: p.Branch, JobURL: p.JobURL, CommitURL: p.CommitURL,
				Actor: p.Actor, Traceparent: p.Traceparent}}}, nil
}
