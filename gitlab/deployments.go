package gitlab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	gogitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/deploy-orchestrator/orchestrator"
)

// findPageSize is how many of the environment's newest deployments CreateDeployment looks
// through for an unfinished one of the same commit and ref.
const findPageSize = 20

// CreateDeployment creates the deployment of d.Commit (ref d.Ref, tag d.Tag) to
// d.Environment as running, and returns its ID (decimal). GitLab creates the environment if
// it does not exist. It is safe to call again after a failure or a crash between GitLab's
// answer and the caller recording the ID: it first lists the environment's newest
// deployments (GET /projects/:id/deployments?environment=&order_by=id&sort=desc) and returns
// the newest unfinished one (created or running) of the same commit and ref that no CI job
// created, if any. GitLab deployments carry no run ID, so a deployment another run left
// unfinished for the same commit, ref and environment is taken over; the daemon's locks keep
// two runs from deploying one environment at once.
//
// Errors: a FieldErrors (errors.Is orchestrator.ErrInvalid) for a value
// orchestrator.ValidHostDeployment refuses, nothing sent; an *APIError for an answer; any
// other error when no answer came.
func (c *Client) CreateDeployment(ctx context.Context, d orchestrator.HostDeployment) (string, error) {
	if err := orchestrator.ValidHostDeployment(orchestrator.GitLab, d); err != nil {
		return "", fmt.Errorf("gitlab deployment: %w", err)
	}
	path := c.path("deployments", d.Repo)
	list, resp, err := c.gl.Deployments.ListProjectDeployments(d.Repo, &gogitlab.ListProjectDeploymentsOptions{
		ListOptions: gogitlab.ListOptions{PerPage: findPageSize},
		OrderBy:     gogitlab.Ptr("id"), Sort: gogitlab.Ptr("desc"), Environment: gogitlab.Ptr(d.Environment),
	}, gogitlab.WithContext(ctx))
	c.debug(ctx, http.MethodGet, "/projects/:id/deployments", statusOf(resp))
	if err != nil {
		return "", apiError(http.MethodGet, path, resp, err)
	}
	for _, dep := range list {
		if dep.SHA == d.Commit && dep.Ref == d.Ref && dep.Deployable.ID == 0 &&
			(dep.Status == "created" || dep.Status == "running") &&
			(dep.Environment == nil || dep.Environment.Name == d.Environment) {
			return strconv.FormatInt(dep.ID, 10), nil
		}
	}
	dep, resp, err := c.gl.Deployments.CreateProjectDeployment(d.Repo, &gogitlab.CreateProjectDeploymentOptions{
		Environment: gogitlab.Ptr(d.Environment), Ref: gogitlab.Ptr(d.Ref), SHA: gogitlab.Ptr(d.Commit),
		Tag: gogitlab.Ptr(d.Tag), Status: gogitlab.Ptr(gogitlab.DeploymentStatusRunning),
	}, gogitlab.WithContext(ctx))
	c.debug(ctx, http.MethodPost, "/projects/:id/deployments", statusOf(resp))
	if err != nil {
		return "", apiError(http.MethodPost, path, resp, err)
	}
	if dep == nil || dep.ID <= 0 {
		return "", &APIError{Method: http.MethodPost, Path: path, StatusCode: statusOf(resp), Message: "answer without a deployment id"}
	}
	return strconv.FormatInt(dep.ID, 10), nil
}

// DeploymentStatus is the deployment status GitLab is sent for s, "" for none: queued has no
// form the API accepts (a deployment is created running), in_progress is running, failure
// and error are failed, inactive has no GitLab state.
func DeploymentStatus(s orchestrator.HostState) string {
	switch s {
	case orchestrator.HostInProgress:
		return "running"
	case orchestrator.HostSuccess:
		return "success"
	case orchestrator.HostFailure, orchestrator.HostError:
		return "failed"
	case orchestrator.HostCanceled:
		return "canceled"
	}
	return ""
}

// CommitState is the commit status state GitLab is sent for s, "" for none: queued is
// pending, in_progress running, failure and error failed; inactive posts none.
func CommitState(s orchestrator.HostState) string {
	switch s {
	case orchestrator.HostQueued:
		return "pending"
	case orchestrator.HostInProgress:
		return "running"
	case orchestrator.HostSuccess:
		return "success"
	case orchestrator.HostFailure, orchestrator.HostError:
		return "failed"
	case orchestrator.HostCanceled:
		return "canceled"
	}
	return ""
}

// SetDeploymentState moves deployment id to state s (PUT /projects/:id/deployments/:id,
// mapped by [DeploymentStatus]; no call when it has none), then, when d.CommitStatus is set
// and [CommitState] has a state for s, posts the commit status (POST
// /projects/:id/statuses/:sha) with name d.CommitStatus, ref d.Ref, target_url d.LogURL and
// the description (cut at 255 characters). A 400 for a state the deployment or commit status
// already has counts as done, so the call can be repeated; GitLab refuses other transitions
// (success→running) with a 400 *APIError.
//
// Errors: as [Client.CreateDeployment]; a FieldError on "id" or "state" for a malformed
// deployment ID or an unknown state.
func (c *Client) SetDeploymentState(ctx context.Context, d orchestrator.HostDeployment, id string, s orchestrator.HostState, description string) error {
	if err := orchestrator.ValidHostDeployment(orchestrator.GitLab, d); err != nil {
		return fmt.Errorf("gitlab deployment status: %w", err)
	}
	depID, err := strconv.ParseInt(id, 10, 64)
	if err != nil || depID <= 0 || strconv.FormatInt(depID, 10) != id {
		return fmt.Errorf("gitlab deployment status: %w", orchestrator.Fieldf("id", "not a GitLab deployment ID"))
	}
	if !s.Valid() {
		return fmt.Errorf("gitlab deployment status: %w", orchestrator.Fieldf("state", "unknown state %q", s))
	}
	if status := DeploymentStatus(s); status != "" {
		if err := c.updateDeployment(ctx, d, depID, status); err != nil {
			return err
		}
	}
	state := CommitState(s)
	if d.CommitStatus == "" || state == "" {
		return nil
	}
	if description == "" && s == orchestrator.HostCanceled {
		description = "canceled"
	}
	opt := &gogitlab.SetCommitStatusOptions{State: gogitlab.BuildStateValue(state), Ref: gogitlab.Ptr(d.Ref),
		Name: gogitlab.Ptr(d.CommitStatus), Description: gogitlab.Ptr(orchestrator.CapHostDescription(description, MaxDescription))}
	if d.LogURL != "" {
		opt.TargetURL = gogitlab.Ptr(d.LogURL)
	}
	_, resp, err := c.gl.Commits.SetCommitStatus(d.Repo, d.Commit, opt, gogitlab.WithContext(ctx))
	c.debug(ctx, http.MethodPost, "/projects/:id/statuses/:sha", statusOf(resp))
	if err == nil {
		return nil
	}
	aerr := apiError(http.MethodPost, c.path("statuses/"+d.Commit, d.Repo), resp, err)
	var ae *APIError
	if errors.As(aerr, &ae) && ae.StatusCode == http.StatusBadRequest && alreadyIn(ae.Message, state) {
		return nil
	}
	return aerr
}

// updateDeployment sets the deployment's status; a 400 is re-read, and counts as done when
// the deployment already has the status.
func (c *Client) updateDeployment(ctx context.Context, d orchestrator.HostDeployment, id int64, status string) error {
	path := c.path("deployments/"+strconv.FormatInt(id, 10), d.Repo)
	_, resp, err := c.gl.Deployments.UpdateProjectDeployment(d.Repo, id, &gogitlab.UpdateProjectDeploymentOptions{
		Status: gogitlab.Ptr(gogitlab.DeploymentStatusValue(status)),
	}, gogitlab.WithContext(ctx))
	c.debug(ctx, http.MethodPut, "/projects/:id/deployments/:deployment_id", statusOf(resp))
	if err == nil {
		return nil
	}
	aerr := apiError(http.MethodPut, path, resp, err)
	var ae *APIError
	if !errors.As(aerr, &ae) || ae.StatusCode != http.StatusBadRequest {
		return aerr
	}
	cur, resp, gerr := c.gl.Deployments.GetProjectDeployment(d.Repo, id, gogitlab.WithContext(ctx))
	c.debug(ctx, http.MethodGet, "/projects/:id/deployments/:deployment_id", statusOf(resp))
	if gerr == nil && cur.Status == status {
		return nil
	}
	return aerr
}

// alreadyIn reports whether a commit status refusal says the status is already in state:
// "Cannot transition status via :run from :running (…)".
func alreadyIn(msg, state string) bool {
	return strings.Contains(msg, "Cannot transition status via") && strings.Contains(msg+" ", "from :"+state+" ")
}

// path is the request path of a route below the project, as sent (the project escaped).
func (c *Client) path(rest, project string) string {
	u, _ := url.Parse(c.base)
	return strings.TrimSuffix(u.Path, "/") + "/projects/" + gogitlab.PathEscape(project) + "/" + rest
}

func statusOf(resp *gogitlab.Response) int {
	if resp == nil || resp.Response == nil {
		return 0
	}
	return resp.StatusCode
}
