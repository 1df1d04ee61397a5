package github_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/github"
	"github.com/deploy-orchestrator/orchestrator/github/githubtest"
)

var sha = strings.Repeat("3f", 20)

func deployment() orchestrator.HostDeployment {
	return orchestrator.HostDeployment{Repo: "acme/web", Commit: sha, Environment: "staging",
		EnvironmentURL: "https://staging.example.com/", LogURL: "https://orch.example.com/runs/r1",
		RunID: "r1", CommitStatus: "orchestrator/deploy"}
}

func newPair(t *testing.T, opts ...githubtest.Option) (*githubtest.Server, *github.Client) {
	t.Helper()
	srv := githubtest.NewServer(t, opts...)
	srv.AddRepo("acme/web", sha)
	c, err := github.New(srv.URL, github.Token(srv.Token), github.WithHTTPClient(checkedClient(t)))
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

// A state whose commit status fails has posted no deployment status yet: told again, it
// adds no second line to the deployment's history (a commit status told again only
// replaces itself).
func TestCommitStatusGoesFirst(t *testing.T) {
	srv, c := newPair(t)
	ctx := context.Background()
	d := deployment()
	id, err := c.CreateDeployment(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	srv.FailNextOn("/statuses/"+sha, http.StatusUnprocessableEntity)
	if err := c.SetDeploymentState(ctx, d, id, orchestrator.HostQueued, "queued"); err == nil {
		t.Fatal("the commit status was refused, want an error")
	}
	n, _ := strconv.ParseInt(id, 10, 64)
	if got := srv.States(n); len(got) != 0 {
		t.Fatalf("deployment states after a refused commit status = %v, want none", got)
	}
	if err := c.SetDeploymentState(ctx, d, id, orchestrator.HostQueued, "queued"); err != nil {
		t.Fatal(err)
	}
	if got := srv.States(n); !slices.Equal(got, []string{"queued"}) {
		t.Errorf("deployment states after the state told again = %v, want [queued]", got)
	}
}

func TestCreateAndStatesInOrder(t *testing.T) {
	srv, c := newPair(t)
	ctx := context.Background()
	d := deployment()
	id, err := c.CreateDeployment(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []orchestrator.HostState{orchestrator.HostQueued, orchestrator.HostInProgress, orchestrator.HostSuccess} {
		if err := c.SetDeploymentState(ctx, d, id, s, "run "+string(s)); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	n, _ := strconv.ParseInt(id, 10, 64)
	if got, want := srv.States(n), []string{"queued", "in_progress", "success"}; !slices.Equal(got, want) {
		t.Errorf("states: got %v, want %v", got, want)
	}
	deps := srv.Deployments("acme/web")
	if len(deps) != 1 {
		t.Fatalf("got %d deployments, want 1", len(deps))
	}
	dep := deps[0]
	if dep.SHA != sha || dep.Environment != "staging" || dep.RequiredContexts == nil || len(dep.RequiredContexts) != 0 ||
		dep.AutoMerge == nil || *dep.AutoMerge {
		t.Errorf("deployment: got %+v, want sha, staging, required_contexts [] and auto_merge false", dep)
	}
	for _, st := range dep.Statuses {
		if st.AutoInactive == nil || *st.AutoInactive || st.LogURL != d.LogURL || st.EnvironmentURL != d.EnvironmentURL {
			t.Errorf("status %+v: want auto_inactive false, log_url and environment_url", st)
		}
	}
	var got []string
	for _, s := range srv.CommitStatuses("acme/web", sha) {
		got = append(got, s.State)
		if s.Context != d.CommitStatus || s.TargetURL != d.LogURL {
			t.Errorf("commit status %+v: want context %q and target_url %q", s, d.CommitStatus, d.LogURL)
		}
	}
	if want := []string{"pending", "pending", "success"}; !slices.Equal(got, want) {
		t.Errorf("commit statuses: got %v, want %v", got, want)
	}
}

func TestCanceledAndInactive(t *testing.T) {
	srv, c := newPair(t)
	ctx := context.Background()
	d := deployment()
	id, err := c.CreateDeployment(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetDeploymentState(ctx, d, id, orchestrator.HostCanceled, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDeploymentState(ctx, d, id, orchestrator.HostInactive, "replaced"); err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(id, 10, 64)
	if got, want := srv.States(n), []string{"error", "inactive"}; !slices.Equal(got, want) {
		t.Errorf("states: got %v, want %v", got, want)
	}
	if st := srv.Deployments("acme/web")[0].Statuses[0]; st.Description != "canceled" {
		t.Errorf("canceled description: got %q, want %q", st.Description, "canceled")
	}
	if got := srv.CommitStatuses("acme/web", sha); len(got) != 1 || got[0].State != "error" {
		t.Errorf("commit statuses: got %+v, want one error (inactive posts none)", got)
	}
}

// A crash between GitHub's answer and the caller recording the ID: the second call finds
// the deployment instead of creating another.
func TestCreateDeploymentAfterLostAnswer(t *testing.T) {
	srv, c := newPair(t)
	ctx := context.Background()
	d := deployment()
	first, err := c.CreateDeployment(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateDeployment(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if again != first || len(srv.Deployments("acme/web")) != 1 {
		t.Errorf("got id %s (first %s) and %d deployments, want the same id and one", again, first, len(srv.Deployments("acme/web")))
	}
	// Another run of the same commit and environment gets its own deployment.
	d.RunID = "r2"
	other, err := c.CreateDeployment(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if other == first {
		t.Errorf("run r2 got run r1's deployment %s", first)
	}
}

func TestAppAuth(t *testing.T) {
	srv := githubtest.NewServer(t, githubtest.WithApp(4242, 77), githubtest.WithPrefix("/api/v3"))
	srv.AddRepo("acme/web", sha)
	c, err := github.New(srv.URL, github.App(4242, 77, srv.AppKeyPEM()), github.WithHTTPClient(checkedClient(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := c.CreateDeployment(ctx, deployment())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetDeploymentState(ctx, deployment(), id, orchestrator.HostSuccess, "done"); err != nil {
		t.Fatal(err)
	}
	if n := srv.TokenExchanges(); n != 1 {
		t.Errorf("token exchanges: got %d, want 1 (the token is cached)", n)
	}
	want := map[string]string{"deployments": "write", "statuses": "write", "metadata": "read"}
	if got := srv.TokenPermissions(); len(got) != 1 || !maps.Equal(got[0], want) {
		t.Errorf("token permissions asked: got %v, want %v (least privilege)", got, want)
	}
	for _, r := range srv.Requests() {
		if strings.Contains(r.Path, "/repos/") && r.Auth != "installation" {
			t.Errorf("%s %s authenticated as %q, want installation", r.Method, r.Path, r.Auth)
		}
	}

	// A key that is not the App's: the exchange is refused, 401, not retryable.
	other := githubtest.New(githubtest.WithApp(4242, 77))
	bad, err := github.New(srv.URL, github.App(4242, 77, other.AppKeyPEM()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.CreateDeployment(ctx, deployment())
	var ae *github.APIError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong key: got %v, want a 401 APIError", err)
	}
	if _, ok := ae.Retryable(); ok {
		t.Errorf("a refused App key reads as retryable")
	}
	if _, err := github.New(srv.URL, github.App(1, 2, []byte("not a key"))); err == nil {
		t.Errorf("New accepted a malformed App key")
	}
}

func TestErrorsClassified(t *testing.T) {
	ctx := context.Background()
	t.Run("422 not retryable", func(t *testing.T) {
		srv, c := newPair(t)
		d := deployment()
		d.Commit = strings.Repeat("0", 40) // not in the repository
		_, err := c.CreateDeployment(ctx, d)
		var ae *github.APIError
		if !errors.As(err, &ae) || ae.StatusCode != 422 || !errors.Is(err, github.ErrValidation) {
			t.Fatalf("got %v, want 422", err)
		}
		if _, ok := ae.Retryable(); ok {
			t.Errorf("422 reads as retryable")
		}
		_ = srv
	})
	t.Run("404 not retryable", func(t *testing.T) {
		_, c := newPair(t)
		d := deployment()
		d.Repo = "acme/nothing"
		_, err := c.CreateDeployment(ctx, d)
		var ae *github.APIError
		if !errors.As(err, &ae) || !errors.Is(err, github.ErrNotFound) {
			t.Fatalf("got %v, want 404", err)
		}
		if _, ok := ae.Retryable(); ok {
			t.Errorf("404 reads as retryable")
		}
		if err := c.SetDeploymentState(ctx, deployment(), "999999", orchestrator.HostSuccess, ""); !errors.Is(err, github.ErrNotFound) {
			t.Errorf("unknown deployment: got %v, want 404", err)
		}
	})
	t.Run("401 not retryable", func(t *testing.T) {
		srv := githubtest.NewServer(t)
		srv.AddRepo("acme/web", sha)
		c, _ := github.New(srv.URL, github.Token("ghp_wrong"), github.WithHTTPClient(checkedClient(t)))
		_, err := c.CreateDeployment(ctx, deployment())
		var ae *github.APIError
		if !errors.As(err, &ae) || !errors.Is(err, github.ErrUnauthorized) {
			t.Fatalf("got %v, want 401", err)
		}
		if _, ok := ae.Retryable(); ok {
			t.Errorf("401 reads as retryable")
		}
	})
	t.Run("503 retryable", func(t *testing.T) {
		srv, c := newPair(t)
		srv.FailNext(1, http.StatusServiceUnavailable)
		_, err := c.CreateDeployment(ctx, deployment())
		var ae *github.APIError
		if !errors.As(err, &ae) || ae.StatusCode != 503 {
			t.Fatalf("got %v, want 503", err)
		}
		if _, ok := ae.Retryable(); !ok {
			t.Errorf("503 reads as not retryable")
		}
	})
	t.Run("primary rate limit waits for the reset", func(t *testing.T) {
		srv, c := newPair(t)
		srv.ExhaustRateLimit(90 * time.Second)
		_, err := c.CreateDeployment(ctx, deployment())
		var ae *github.APIError
		if !errors.As(err, &ae) || !errors.Is(err, github.ErrRateLimited) {
			t.Fatalf("got %v, want rate limited", err)
		}
		after, ok := ae.Retryable()
		if !ok || after < 80*time.Second || after > 92*time.Second {
			t.Errorf("Retryable: got %s %v, want about 90s true", after, ok)
		}
		// go-github now refuses without sending until the reset: the same answer.
		before := len(srv.Requests())
		_, err = c.CreateDeployment(ctx, deployment())
		if !errors.As(err, &ae) || !ae.RateLimited || len(srv.Requests()) != before {
			t.Errorf("second call: got %v and %d more requests, want rate limited and none", err, len(srv.Requests())-before)
		}
	})
	t.Run("secondary rate limit waits retry-after", func(t *testing.T) {
		srv, c := newPair(t)
		srv.SecondaryRateLimit(30 * time.Second)
		_, err := c.CreateDeployment(ctx, deployment())
		var ae *github.APIError
		if !errors.As(err, &ae) || !ae.RateLimited {
			t.Fatalf("got %v, want rate limited", err)
		}
		if after, ok := ae.Retryable(); !ok || after != 30*time.Second {
			t.Errorf("Retryable: got %s %v, want 30s true", after, ok)
		}
	})
	t.Run("no answer: not an APIError", func(t *testing.T) {
		c, _ := github.New("http://127.0.0.1:1/", github.Token("ghp_secret_value"))
		_, err := c.CreateDeployment(ctx, deployment())
		var ae *github.APIError
		if err == nil || errors.As(err, &ae) {
			t.Fatalf("got %v, want a transport error", err)
		}
	})
}

func TestHostileValuesRefused(t *testing.T) {
	srv, c := newPair(t)
	ctx := context.Background()
	for _, edit := range []func(*orchestrator.HostDeployment){
		func(d *orchestrator.HostDeployment) { d.Repo = "../x" },
		func(d *orchestrator.HostDeployment) { d.Repo = "acme/web/../../x" },
		func(d *orchestrator.HostDeployment) { d.Commit = "main/../x" },
		func(d *orchestrator.HostDeployment) { d.Commit = sha[:39] + "?" },
		func(d *orchestrator.HostDeployment) { d.Environment = "prod&sha=" + sha },
	} {
		d := deployment()
		edit(&d)
		if _, err := c.CreateDeployment(ctx, d); !errors.Is(err, orchestrator.ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", d, err)
		}
		if err := c.SetDeploymentState(ctx, d, "1", orchestrator.HostSuccess, ""); !errors.Is(err, orchestrator.ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", d, err)
		}
	}
	for _, id := range []string{"1/../2", "-1", "01", "1?x=1", ""} {
		if err := c.SetDeploymentState(ctx, deployment(), id, orchestrator.HostSuccess, ""); !errors.Is(err, orchestrator.ErrInvalid) {
			t.Errorf("id %q: got %v, want ErrInvalid", id, err)
		}
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests reached the server, want none", n)
	}
	// An environment with spaces and slashes is a value: it is encoded, and found again.
	d := deployment()
	d.Environment = "review/feature x"
	id1, err := c.CreateDeployment(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if id2, err := c.CreateDeployment(ctx, d); err != nil || id2 != id1 {
		t.Errorf("found again: got %s %v, want %s", id2, err, id1)
	}
	if got := srv.Deployments("acme/web"); got[0].Environment != d.Environment {
		t.Errorf("environment: got %q, want %q", got[0].Environment, d.Environment)
	}
}

func TestNoTokenInErrors(t *testing.T) {
	const secret = "ghp_supersecret_0123456789"
	ctx := context.Background()
	srv := githubtest.NewServer(t)
	srv.AddRepo("acme/web", sha)
	c, _ := github.New(srv.URL, github.Token(secret))
	var errs []error
	_, err := c.CreateDeployment(ctx, deployment())
	errs = append(errs, err)
	errs = append(errs, c.SetDeploymentState(ctx, deployment(), "5", orchestrator.HostSuccess, ""))
	down, _ := github.New("http://127.0.0.1:1/", github.Token(secret))
	_, err = down.CreateDeployment(ctx, deployment())
	errs = append(errs, err)
	for _, err := range errs {
		if err == nil {
			t.Fatal("want an error")
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error holds the token: %v", err)
		}
	}
}
