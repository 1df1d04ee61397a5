package gitlab_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/gitlab"
	"github.com/deploy-orchestrator/orchestrator/gitlab/gitlabtest"
)

var sha = strings.Repeat("9c", 20)

const project = "acme/platform/web"

func deployment() orchestrator.HostDeployment {
	return orchestrator.HostDeployment{Repo: project, Commit: sha, Ref: "main", Environment: "staging",
		LogURL: "https://orch.example.com/runs/r1", RunID: "r1", CommitStatus: "orchestrator/deploy"}
}

func newPair(t *testing.T, opts ...gitlabtest.Option) (*gitlabtest.Server, *gitlab.Client) {
	t.Helper()
	srv := gitlabtest.NewServer(t, opts...)
	srv.AddProject(project, "main", sha, false)
	c, err := gitlab.New(srv.URL, gitlab.Token(srv.Token), gitlab.WithHTTPClient(checkedClient(t)))
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

func setAll(t *testing.T, c *gitlab.Client, d orchestrator.HostDeployment, id string, states ...orchestrator.HostState) {
	t.Helper()
	for _, s := range states {
		if err := c.SetDeploymentState(context.Background(), d, id, s, "run "+string(s)); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestCreateAndStatesInOrder(t *testing.T) {
	srv, c := newPair(t)
	d := deployment()
	id, err := c.CreateDeployment(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	setAll(t, c, d, id, orchestrator.HostQueued, orchestrator.HostInProgress, orchestrator.HostSuccess)
	n, _ := strconv.ParseInt(id, 10, 64)
	// Created running (the API takes no "created"); queued changes nothing; in_progress is
	// already running and counts as done.
	if got, want := srv.Statuses(n), []string{"running", "success"}; !slices.Equal(got, want) {
		t.Errorf("deployment statuses: got %v, want %v", got, want)
	}
	cs := srv.CommitStatuses(project, sha)
	if len(cs) != 1 {
		t.Fatalf("got %d commit statuses, want 1 moved through its states: %+v", len(cs), cs)
	}
	if want := []string{"pending", "running", "success"}; !slices.Equal(cs[0].States, want) || cs[0].Name != d.CommitStatus ||
		cs[0].TargetURL != d.LogURL || cs[0].Ref != "main" {
		t.Errorf("commit status: got %+v, want states %v, name, target_url and ref", cs[0], want)
	}
	for _, r := range srv.Requests() {
		if !strings.Contains(r.Path, "/projects/acme%2Fplatform%2Fweb/") {
			t.Errorf("%s %s: want the project as one escaped segment", r.Method, r.Path)
		}
	}
}

func TestCanceledFailedInactive(t *testing.T) {
	srv, c := newPair(t)
	ctx := context.Background()
	d := deployment()
	id, _ := c.CreateDeployment(ctx, d)
	setAll(t, c, d, id, orchestrator.HostCanceled, orchestrator.HostInactive)
	n, _ := strconv.ParseInt(id, 10, 64)
	if got, want := srv.Statuses(n), []string{"running", "canceled"}; !slices.Equal(got, want) {
		t.Errorf("statuses: got %v, want %v (inactive makes no call)", got, want)
	}
	d.RunID = "r2"
	id2, _ := c.CreateDeployment(ctx, d)
	setAll(t, c, d, id2, orchestrator.HostError)
	n2, _ := strconv.ParseInt(id2, 10, 64)
	if got, want := srv.Statuses(n2), []string{"running", "failed"}; !slices.Equal(got, want) {
		t.Errorf("error: got %v, want %v", got, want)
	}
}

// A crash between GitLab's answer and the caller recording the ID, and a state set twice.
func TestRepeatedCalls(t *testing.T) {
	srv, c := newPair(t)
	ctx := context.Background()
	d := deployment()
	first, err := c.CreateDeployment(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateDeployment(ctx, d)
	if err != nil || again != first || len(srv.Deployments(project)) != 1 {
		t.Fatalf("got %s %v and %d deployments, want %s and one", again, err, len(srv.Deployments(project)), first)
	}
	// A state set again (its first answer lost): GitLab refuses running→running and
	// success→success with 400, for the deployment and the commit status both.
	setAll(t, c, d, first, orchestrator.HostInProgress, orchestrator.HostInProgress, orchestrator.HostSuccess, orchestrator.HostSuccess)
	n, _ := strconv.ParseInt(first, 10, 64)
	if got, want := srv.Statuses(n), []string{"running", "success"}; !slices.Equal(got, want) {
		t.Errorf("statuses: got %v, want %v", got, want)
	}
	// A finished deployment is not found again: the next run's gets its own.
	next, err := c.CreateDeployment(ctx, d)
	if err != nil || next == first {
		t.Errorf("after success: got %s %v, want a new deployment", next, err)
	}
}

func TestRefusedTransition(t *testing.T) {
	_, c := newPair(t)
	ctx := context.Background()
	d := deployment()
	id, _ := c.CreateDeployment(ctx, d)
	setAll(t, c, d, id, orchestrator.HostSuccess)
	err := c.SetDeploymentState(ctx, d, id, orchestrator.HostInProgress, "")
	var ae *gitlab.APIError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || len(ae.Errors["status"]) == 0 {
		t.Fatalf("success→running: got %v, want 400 on status", err)
	}
	if _, ok := ae.Retryable(); ok {
		t.Errorf("a refused transition reads as retryable")
	}
}

func TestCIDeploymentsLeftAlone(t *testing.T) {
	srv, c := newPair(t)
	ctx := context.Background()
	ci := srv.AddCIDeployment(project, "staging", "main")
	id, err := c.CreateDeployment(ctx, deployment())
	if err != nil {
		t.Fatal(err)
	}
	if id == strconv.FormatInt(ci, 10) {
		t.Errorf("the CI job's deployment was taken over")
	}
	err = c.SetDeploymentState(ctx, deployment(), strconv.FormatInt(ci, 10), orchestrator.HostSuccess, "")
	if !errors.Is(err, gitlab.ErrForbidden) {
		t.Errorf("updating a CI deployment: got %v, want 403", err)
	}
}

func TestJobToken(t *testing.T) {
	srv := gitlabtest.NewServer(t)
	srv.AddProject(project, "v1.2.0", sha, true)
	c, err := gitlab.New(srv.URL+"/", gitlab.JobToken(gitlabtest.DefaultJobToken), gitlab.WithHTTPClient(checkedClient(t)))
	if err != nil {
		t.Fatal(err)
	}
	d := deployment()
	d.Ref, d.Tag = "v1.2.0", true
	if _, err := c.CreateDeployment(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if deps := srv.Deployments(project); len(deps) != 1 || !deps[0].Tag {
		t.Errorf("got %+v, want one deployment of a tag", deps)
	}
	for _, r := range srv.Requests() {
		if r.Auth != "job_token" {
			t.Errorf("%s %s authenticated as %q, want job_token", r.Method, r.Path, r.Auth)
		}
	}
}

func TestErrorsClassified(t *testing.T) {
	ctx := context.Background()
	t.Run("401", func(t *testing.T) {
		srv := gitlabtest.NewServer(t)
		srv.AddProject(project, "main", sha, false)
		c, _ := gitlab.New(srv.URL, gitlab.Token("glpat-wrong"), gitlab.WithHTTPClient(checkedClient(t)))
		_, err := c.CreateDeployment(ctx, deployment())
		var ae *gitlab.APIError
		if !errors.As(err, &ae) || !errors.Is(err, gitlab.ErrUnauthorized) {
			t.Fatalf("got %v, want 401", err)
		}
		if _, ok := ae.Retryable(); ok {
			t.Error("401 reads as retryable")
		}
	})
	t.Run("404", func(t *testing.T) {
		_, c := newPair(t)
		d := deployment()
		d.Repo = "acme/nothing"
		_, err := c.CreateDeployment(ctx, d)
		var ae *gitlab.APIError
		if !errors.As(err, &ae) || !errors.Is(err, gitlab.ErrNotFound) {
			t.Fatalf("got %v, want 404", err)
		}
		if _, ok := ae.Retryable(); ok {
			t.Error("404 reads as retryable")
		}
	})
	t.Run("unknown ref: 400", func(t *testing.T) {
		_, c := newPair(t)
		d := deployment()
		d.Ref = "nope"
		_, err := c.CreateDeployment(ctx, d)
		var ae *gitlab.APIError
		if !errors.As(err, &ae) || ae.StatusCode != 400 || len(ae.Errors["ref"]) == 0 {
			t.Fatalf("got %v, want 400 on ref", err)
		}
	})
	t.Run("503", func(t *testing.T) {
		srv, c := newPair(t)
		srv.FailNext(1, http.StatusServiceUnavailable)
		_, err := c.CreateDeployment(ctx, deployment())
		var ae *gitlab.APIError
		if !errors.As(err, &ae) || ae.StatusCode != 503 {
			t.Fatalf("got %v, want 503", err)
		}
		if _, ok := ae.Retryable(); !ok {
			t.Error("503 reads as not retryable")
		}
	})
	t.Run("429 waits Retry-After", func(t *testing.T) {
		srv, c := newPair(t)
		srv.RateLimit(42 * time.Second)
		_, err := c.CreateDeployment(ctx, deployment())
		var ae *gitlab.APIError
		if !errors.As(err, &ae) || !errors.Is(err, gitlab.ErrRateLimited) {
			t.Fatalf("got %v, want 429", err)
		}
		if after, ok := ae.Retryable(); !ok || after != 42*time.Second {
			t.Errorf("Retryable: got %s %v, want 42s true", after, ok)
		}
	})
}

func TestHostileValues(t *testing.T) {
	srv, c := newPair(t)
	ctx := context.Background()
	for _, edit := range []func(*orchestrator.HostDeployment){
		func(d *orchestrator.HostDeployment) { d.Repo = "../x" },
		func(d *orchestrator.HostDeployment) { d.Repo = "acme/%2e%2e/x" },
		func(d *orchestrator.HostDeployment) { d.Commit = "main?x=1" },
		func(d *orchestrator.HostDeployment) { d.Ref = "" },
		func(d *orchestrator.HostDeployment) { d.Environment = "review/${CI_COMMIT_REF_NAME}" },
	} {
		d := deployment()
		edit(&d)
		if _, err := c.CreateDeployment(ctx, d); !errors.Is(err, orchestrator.ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", d, err)
		}
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests reached the server, want none", n)
	}
	d := deployment()
	d.Environment = "review/feature x"
	id, err := c.CreateDeployment(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.CreateDeployment(ctx, d); again != id {
		t.Errorf("found again: got %s, want %s", again, id)
	}
	if got := srv.Deployments(project)[0].Environment; got != d.Environment {
		t.Errorf("environment: got %q, want %q", got, d.Environment)
	}
}

func TestNoTokenInErrors(t *testing.T) {
	const secret = "glpat-supersecret0123"
	ctx := context.Background()
	srv := gitlabtest.NewServer(t)
	srv.AddProject(project, "main", sha, false)
	c, _ := gitlab.New(srv.URL, gitlab.Token(secret))
	_, err1 := c.CreateDeployment(ctx, deployment())
	err2 := c.SetDeploymentState(ctx, deployment(), "7", orchestrator.HostSuccess, "")
	down, _ := gitlab.New("http://127.0.0.1:1", gitlab.Token(secret))
	_, err3 := down.CreateDeployment(ctx, deployment())
	for _, err := range []error{err1, err2, err3} {
		if err == nil {
			t.Fatal("want an error")
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error holds the token: %v", err)
		}
	}
}
