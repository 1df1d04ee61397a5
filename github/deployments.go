package github

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	gogithub "github.com/google/go-github/v89/github"

	"github.com/deploy-orchestrator/orchestrator"
)

// PayloadRunKey is the key of the deployment payload that names the orchestrator run.
const PayloadRunKey = "orchestrator_run"

// findPageSize is how many of the newest deployments of the commit and environment
// CreateDeployment looks through for one of the same run (GitHub's largest page).
const findPageSize = 100

// CreateDeployment creates the deployment of d.Commit to d.Environment and returns its ID
// (decimal). It is safe to call again after a failure or a crash between GitHub's answer and
// the caller recording the ID: it first lists the deployments of the commit and environment
// (GET /repos/{owner}/{repo}/deployments?sha=&environment=, the newest 100) and returns the
// one whose payload names d.RunID, if any; otherwise it creates one (POST
// /repos/{owner}/{repo}/deployments) with ref = d.Commit, required_contexts [], auto_merge
// false, payload {"orchestrator_run": d.RunID}.
//
// Errors: a FieldErrors (errors.Is orchestrator.ErrInvalid) for a value
// orchestrator.ValidHostDeployment refuses, nothing sent; an *APIError for an answer; any
// other error when no answer came.
func (c *Client) CreateDeployment(ctx context.Context, d orchestrator.HostDeployment) (string, error) {
	if err := orchestrator.ValidHostDeployment(orchestrator.GitHub, d); err != nil {
		return "", fmt.Errorf("github deployment: %w", err)
	}
	owner, repo, _ := strings.Cut(d.Repo, "/")
	path := c.path("repos/" + d.Repo + "/deployments")

	list, resp, err := c.gh.Repositories.ListDeployments(ctx, owner, repo, &gogithub.DeploymentsListOptions{
		SHA: d.Commit, Environment: d.Environment, ListOptions: gogithub.ListOptions{PerPage: findPageSize},
	})
	c.debug(ctx, http.MethodGet, "/repos/{owner}/{repo}/deployments", statusOf(respOf(resp), 0))
	if err != nil {
		return "", apiError(http.MethodGet, path, err)
	}
	for _, dep := range list {
		if dep.GetSHA() == d.Commit && dep.GetEnvironment() == d.Environment && payloadRun(dep.Payload) == d.RunID {
			return strconv.FormatInt(dep.GetID(), 10), nil
		}
	}

	req := gogithub.DeploymentRequest{
		Ref:                   d.Commit,
		Task:                  gogithub.Ptr("deploy"),
		AutoMerge:             gogithub.Ptr(false),
		RequiredContexts:      []string{}, // not nil: GitHub must see [] to skip the status checks
		Payload:               map[string]string{PayloadRunKey: d.RunID},
		Environment:           gogithub.Ptr(d.Environment),
		Description:           gogithub.Ptr(orchestrator.CapHostDescription("orchestrator run "+d.RunID, MaxDescription)),
		TransientEnvironment:  gogithub.Ptr(d.Transient),
		ProductionEnvironment: gogithub.Ptr(d.Production),
	}
	dep, resp, err := c.gh.Repositories.CreateDeployment(ctx, owner, repo, req)
	c.debug(ctx, http.MethodPost, "/repos/{owner}/{repo}/deployments", statusOf(respOf(resp), 0))
	if err != nil {
		return "", apiError(http.MethodPost, path, err)
	}
	if dep.GetID() <= 0 {
		return "", &APIError{Method: http.MethodPost, Path: path, StatusCode: resp.StatusCode, Message: "answer without a deployment id"}
	}
	return strconv.FormatInt(dep.GetID(), 10), nil
}

// payloadRun reads the run ID from a deployment's payload: an object, or a string holding
// one (GitHub keeps what it was given).
func payloadRun(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		raw = json.RawMessage(s)
	}
	var p map[string]any
	if json.Unmarshal(raw, &p) != nil {
		return ""
	}
	run, _ := p[PayloadRunKey].(string)
	return run
}

// DeploymentState is the deployment status state GitHub is sent for s. Canceled maps to
// "error": the run stopped before it finished, so the environment's active deployment stays
// the last successful one, while "inactive" would show a transient environment as destroyed.
func DeploymentState(s orchestrator.HostState) string {
	if s == orchestrator.HostCanceled {
		return "error"
	}
	return string(s)
}

// CommitState is the commit status state GitHub is sent for s, "" for none: queued and
// in_progress are "pending", canceled is "error", inactive posts no commit status (a replaced
// deployment says nothing new about its commit).
func CommitState(s orchestrator.HostState) string {
	switch s {
	case orchestrator.HostQueued, orchestrator.HostInProgress:
		return "pending"
	case orchestrator.HostSuccess, orchestrator.HostFailure, orchestrator.HostError:
		return string(s)
	case orchestrator.HostCanceled:
		return "error"
	}
	return ""
}

// SetDeploymentState tells deployment id state s: first, when d.CommitStatus is set and
// [CommitState] has a state for s, the commit status (POST
// /repos/{owner}/{repo}/statuses/{sha}) with context d.CommitStatus and target_url d.LogURL;
// then the deployment status (POST /repos/{owner}/{repo}/deployments/{id}/statuses, mapped by
// [DeploymentState]) with log_url d.LogURL, environment_url d.EnvironmentURL, the description
// (cut at 140 characters; "canceled" when s is canceled and it is empty) and auto_inactive
// false. GitHub accepts statuses in any order and again, so the call can be repeated, and in
// this order a repeat after a failure adds no second line to the deployment's history.
//
// Errors: as [Client.CreateDeployment]; a FieldError on "id" or "state" for a malformed
// deployment ID or an unknown state.
func (c *Client) SetDeploymentState(ctx context.Context, d orchestrator.HostDeployment, id string, s orchestrator.HostState, description string) error {
	if err := orchestrator.ValidHostDeployment(orchestrator.GitHub, d); err != nil {
		return fmt.Errorf("github deployment status: %w", err)
	}
	depID, err := strconv.ParseInt(id, 10, 64)
	if err != nil || depID <= 0 || strconv.FormatInt(depID, 10) != id {
		return fmt.Errorf("github deployment status: %w", orchestrator.Fieldf("id", "not a GitHub deployment ID"))
	}
	if !s.Valid() {
		return fmt.Errorf("github deployment status: %w", orchestrator.Fieldf("state", "unknown state %q", s))
	}
	if description == "" && s == orchestrator.HostCanceled {
		description = "canceled"
	}
	description = orchestrator.CapHostDescription(description, MaxDescription)
	owner, repo, _ := strings.Cut(d.Repo, "/")

	// The commit status goes first: told again after a failure it only replaces itself (the
	// latest per context counts), while a deployment status told again adds a line to the
	// deployment's history. So a state is told once its deployment status is.
	if state := CommitState(s); d.CommitStatus != "" && state != "" {
		status := gogithub.RepoStatus{
			State:       gogithub.Ptr(state),
			Context:     gogithub.Ptr(d.CommitStatus),
			Description: gogithub.Ptr(description),
		}
		if d.LogURL != "" {
			status.TargetURL = gogithub.Ptr(d.LogURL)
		}
		_, resp, err := c.gh.Repositories.CreateStatus(ctx, owner, repo, d.Commit, status)
		c.debug(ctx, http.MethodPost, "/repos/{owner}/{repo}/statuses/{sha}", statusOf(respOf(resp), 0))
		if err != nil {
			return apiError(http.MethodPost, c.path("repos/"+d.Repo+"/statuses/"+d.Commit), err)
		}
	}

	req := gogithub.DeploymentStatusRequest{
		State:        DeploymentState(s),
		Description:  gogithub.Ptr(description),
		AutoInactive: gogithub.Ptr(false),
	}
	if d.LogURL != "" {
		req.LogURL = gogithub.Ptr(d.LogURL)
	}
	if d.EnvironmentURL != "" {
		req.EnvironmentURL = gogithub.Ptr(d.EnvironmentURL)
	}
	_, resp, err := c.gh.Repositories.CreateDeploymentStatus(ctx, owner, repo, depID, req)
	c.debug(ctx, http.MethodPost, "/repos/{owner}/{repo}/deployments/{deployment_id}/statuses", statusOf(respOf(resp), 0))
	if err != nil {
		return apiError(http.MethodPost, c.path("repos/"+d.Repo+"/deployments/"+id+"/statuses"), err)
	}
	return nil
}

// path is a request's path below the API base, as sent (the values are valid, so unescaped).
func (c *Client) path(rest string) string { return c.basePath + rest }

func respOf(r *gogithub.Response) *http.Response {
	if r == nil {
		return nil
	}
	return r.Response
}

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
