package deploystatus_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/deploystatus"
	"github.com/deploy-orchestrator/orchestrator/github"
	"github.com/deploy-orchestrator/orchestrator/github/githubtest"
	"github.com/deploy-orchestrator/orchestrator/gitlab"
	"github.com/deploy-orchestrator/orchestrator/gitlab/gitlabtest"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
)

const (
	sha1 = "5f2c3e1a9b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e"
	sha2 = "7a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
)

// world is a run store, the Git host fakes and the pipelines reporting to them.
type world struct {
	t         *testing.T
	dir       string
	store     *sqlitestore.Store
	gh        *githubtest.Server
	gl        *gitlabtest.Server
	pipelines map[string]*config.Pipeline
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, dir: t.TempDir(), gh: githubtest.NewServer(t), gl: gitlabtest.NewServer(t)}
	w.store = w.open()
	w.gh.AddRepo("acme/api", sha1, sha2)
	w.gl.AddProject("acme/platform/web", "main", sha1, false)
	w.gl.AddProject("acme/platform/web", "release", sha2, false)
	prod := true
	w.pipelines = map[string]*config.Pipeline{
		"api": {Name: "api", Statuses: &config.Statuses{GitHub: &config.GitHubStatuses{Repo: "acme/api", URL: w.gh.URL,
			Token: config.Secret(w.gh.Token), Production: &prod,
			HostEnvironment: config.HostEnvironment{Environment: "production", EnvironmentURL: "https://api.example.com", CommitStatus: "orchestrator/deploy"}}}},
		"web": {Name: "web", Statuses: &config.Statuses{GitLab: &config.GitLabStatuses{Project: "acme/platform/web", URL: w.gl.URL,
			Token: config.Secret(w.gl.Token), Ref: "main", HostEnvironment: config.HostEnvironment{Environment: "production"}}}},
	}
	return w
}

// open opens the world's run store (again, for a restarted daemon).
func (w *world) open() *sqlitestore.Store {
	w.t.Helper()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(w.dir, "runs.db"))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { st.Close() })
	return st
}

// client is the daemon's client factory, for the fakes.
func client(p *config.Pipeline, host string) (deploystatus.Host, error) {
	if host == deploystatus.HostGitHub {
		return github.New(p.Statuses.GitHub.URL, github.Token(p.Statuses.GitHub.Token.Reveal()))
	}
	return gitlab.New(p.Statuses.GitLab.URL, gitlab.Token(p.Statuses.GitLab.Token.Reveal()))
}

// reporter is one daemon's reporter on store, its loop running until the test ends or stop.
type reporter struct {
	*deploystatus.Reporter
	stop func()
}

func (w *world) reporter(owner string, store *sqlitestore.Store, loop bool) *reporter {
	rp := deploystatus.New(deploystatus.Options{Store: store, Pipelines: w.pipelines, Client: client, Owner: owner,
		// A claim outlives a loaded race run's slowest delivery: one taken again while it is
		// told would tell its states twice.
		PublicURL: "https://deploy.example.com", Poll: 20 * time.Millisecond, Lease: time.Minute,
		Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if loop {
		wg.Go(func() { rp.Run(ctx) })
	}
	stop := sync.OnceFunc(func() { cancel(); wg.Wait() })
	w.t.Cleanup(stop)
	return &reporter{Reporter: rp, stop: stop}
}

// run creates a queued run of pipeline for commit in store.
func (w *world) run(store *sqlitestore.Store, pipeline, commit string, o orchestrator.Origin) runs.Run {
	w.t.Helper()
	r, _, err := store.Create(context.Background(), runs.Run{Pipeline: pipeline, Instance: "test",
		Trigger: orchestrator.Trigger{Build: "41", Commit: commit, By: "api:trigger", Origin: o}})
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// move reports run r in status st (reason for an end).
func move(rp *reporter, r *runs.Run, st runs.Status, reason string) {
	r.Status, r.Reason = st, reason
	rp.Report(context.Background(), *r)
}

// eventually waits for cond, failing with what after 20s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ghStates is the states of the GitHub deployment of run id, and the deployment.
func (w *world) ghDeployment(id string) (githubtest.Deployment, bool) {
	for _, d := range w.gh.Deployments("acme/api") {
		if strings.Contains(string(d.Payload), id) {
			return d, true
		}
	}
	return githubtest.Deployment{}, false
}

func (w *world) ghStates(id string) []string {
	d, _ := w.ghDeployment(id)
	return d.States
}

// TestGitHubDeploymentFollowsRun: a run of a pipeline with a GitHub statuses block becomes a
// deployment whose states follow it exactly (queued, in_progress, success), linking to the
// run's page, with the commit status alongside; the next run's success marks it inactive.
func TestGitHubDeploymentFollowsRun(t *testing.T) {
	w := newWorld(t)
	rp := w.reporter("d1", w.store, true)
	r := w.run(w.store, "api", sha1, orchestrator.Origin{})
	move(rp, &r, runs.StatusQueued, "")
	move(rp, &r, runs.StatusPhase1, "")
	move(rp, &r, runs.StatusPhase2, "") // the same state: told once
	move(rp, &r, runs.StatusSucceeded, "")
	want := []string{"queued", "in_progress", "success"}
	eventually(t, "three states", func() bool { return len(w.ghStates(r.ID)) >= 3 })
	d, _ := w.ghDeployment(r.ID)
	if !slices.Equal(d.States, want) {
		t.Errorf("states = %v, want %v", d.States, want)
	}
	if d.SHA != sha1 || d.Environment != "production" || d.RequiredContexts == nil || len(d.RequiredContexts) != 0 {
		t.Errorf("deployment = %+v, want sha %s in production with required_contexts []", d, sha1)
	}
	last := d.Statuses[len(d.Statuses)-1]
	if last.LogURL != "https://deploy.example.com/runs/"+r.ID || last.EnvironmentURL != "https://api.example.com" || !strings.Contains(last.Description, "Deployed build 41") {
		t.Errorf("success status = %+v", last)
	}
	// The commit status follows each deployment status, in a request of its own.
	var commit []string
	eventually(t, "three commit statuses", func() bool {
		commit = nil
		for _, c := range w.gh.CommitStatuses("acme/api", sha1) {
			if c.Context == "orchestrator/deploy" {
				commit = append(commit, c.State)
			}
		}
		return len(commit) >= 3
	})
	if !slices.Equal(commit, []string{"pending", "pending", "success"}) {
		t.Errorf("commit statuses = %v, want pending, pending, success", commit)
	}

	r2 := w.run(w.store, "api", sha2, orchestrator.Origin{})
	for _, st := range []runs.Status{runs.StatusQueued, runs.StatusPhase1, runs.StatusSucceeded} {
		move(rp, &r2, st, "")
	}
	eventually(t, "the replaced deployment inactive", func() bool { return len(w.ghStates(r.ID)) == 4 })
	if got := w.ghStates(r.ID); got[3] != "inactive" {
		t.Errorf("first run's states = %v, want inactive last", got)
	}
	if got := w.ghStates(r2.ID); !slices.Equal(got, want) {
		t.Errorf("second run's states = %v, want %v", got, want)
	}
}

// TestGitLabDeploymentFollowsRun: the same through GitLab, whose API has no queued state for
// a deployment (created running) and marks failures failed.
func TestGitLabDeploymentFollowsRun(t *testing.T) {
	w := newWorld(t)
	rp := w.reporter("d1", w.store, true)
	r := w.run(w.store, "web", sha1, orchestrator.Origin{Provider: "gitlab", Repo: "acme/platform/web", Ref: "main"})
	move(rp, &r, runs.StatusQueued, "")
	move(rp, &r, runs.StatusPhase1, "")
	move(rp, &r, runs.StatusFailed, "phase 2: deploy web: health check failed")
	eventually(t, "a failed deployment", func() bool {
		ds := w.gl.Deployments("acme/platform/web")
		return len(ds) == 1 && slices.Contains(w.gl.Statuses(ds[0].ID), "failed")
	})
	d := w.gl.Deployments("acme/platform/web")[0]
	if got, want := w.gl.Statuses(d.ID), []string{"running", "failed"}; !slices.Equal(got, want) {
		t.Errorf("statuses = %v, want %v", got, want)
	}
	if d.Environment != "production" || d.Ref != "main" || d.SHA != sha1 {
		t.Errorf("deployment = %+v", d)
	}
}

// TestStatusesAfterRestart: a daemon stopped between two updates (the second in the outbox,
// not told) leaves it to its next life on the store, which tells it, once and in order.
func TestStatusesAfterRestart(t *testing.T) {
	w := newWorld(t)
	d1 := w.reporter("d1", w.store, true)
	r := w.run(w.store, "api", sha1, orchestrator.Origin{})
	move(d1, &r, runs.StatusQueued, "")
	eventually(t, "queued told", func() bool { return len(w.ghStates(r.ID)) == 1 })
	d1.stop() // killed: its run's next states reach the outbox, nobody tells them
	move(d1, &r, runs.StatusPhase1, "")
	move(d1, &r, runs.StatusSucceeded, "")
	if got := w.ghStates(r.ID); len(got) != 1 {
		t.Fatalf("states told with no reporter running: %v", got)
	}

	// The restarted daemon (the same instance name, its own store handle): it takes back any
	// claim its earlier life held when it stopped.
	w.reporter("d1", w.open(), true)
	eventually(t, "the missing states", func() bool { return len(w.ghStates(r.ID)) == 3 })
	if got, want := w.ghStates(r.ID), []string{"queued", "in_progress", "success"}; !slices.Equal(got, want) {
		t.Errorf("states = %v, want %v", got, want)
	}
	if n := len(w.gh.Deployments("acme/api")); n != 1 {
		t.Errorf("deployments = %d, want 1", n)
	}
}

// TestStatusesThroughHostFailures: 5xx answers and a spent rate limit delay the states,
// which then arrive in order; the run records the failure once, not per attempt.
func TestStatusesThroughHostFailures(t *testing.T) {
	w := newWorld(t)
	rp := w.reporter("d1", w.store, true)
	w.gh.FailNext(3, 503)
	r := w.run(w.store, "api", sha1, orchestrator.Origin{})
	move(rp, &r, runs.StatusQueued, "")
	eventually(t, "queued told through 503s", func() bool { return len(w.ghStates(r.ID)) == 1 })
	w.gh.ExhaustRateLimit(300 * time.Millisecond)
	move(rp, &r, runs.StatusPhase1, "")
	move(rp, &r, runs.StatusSucceeded, "")
	eventually(t, "all states", func() bool { return len(w.ghStates(r.ID)) == 3 })
	if got, want := w.ghStates(r.ID), []string{"queued", "in_progress", "success"}; !slices.Equal(got, want) {
		t.Errorf("states = %v, want %v", got, want)
	}
	evs, err := w.store.Events(context.Background(), r.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, ev := range evs {
		if ev.Type == runs.EventStatusFailed {
			failed++
			if ev.Data["gave_up"] != "" || ev.Data["host"] != "github" {
				t.Errorf("event %+v: want a retry on github", ev)
			}
		}
	}
	if failed == 0 || failed > 2 {
		t.Errorf("status.failed events = %d, want one per state that failed (1 or 2)", failed)
	}
}

// TestStatusRefusedIsDropped: a state the host refuses for good (a 422) is dropped with an
// event saying so, and the states after it still go.
func TestStatusRefusedIsDropped(t *testing.T) {
	w := newWorld(t)
	rp := w.reporter("d1", w.store, true)
	r := w.run(w.store, "api", sha1, orchestrator.Origin{})
	move(rp, &r, runs.StatusQueued, "")
	eventually(t, "queued told", func() bool { return len(w.ghStates(r.ID)) == 1 })
	w.gh.FailNext(1, 422)
	move(rp, &r, runs.StatusPhase1, "")
	move(rp, &r, runs.StatusSucceeded, "")
	eventually(t, "success told", func() bool { return slices.Contains(w.ghStates(r.ID), "success") })
	if got, want := w.ghStates(r.ID), []string{"queued", "success"}; !slices.Equal(got, want) {
		t.Errorf("states = %v, want %v (in_progress refused)", got, want)
	}
	evs, _ := w.store.Events(context.Background(), r.ID, 0, 100)
	i := slices.IndexFunc(evs, func(ev runs.Event) bool { return ev.Type == runs.EventStatusFailed })
	if i < 0 || evs[i].Data["gave_up"] != "true" || evs[i].Data["state"] != "in_progress" || !strings.Contains(evs[i].Message, "422") {
		t.Errorf("events = %+v, want status.failed given up on in_progress with the 422", evs)
	}
}

// TestStatusesSkipped: a run of another repository, or without a full commit SHA, is not
// reported, and its events say why; nothing reaches the host.
func TestStatusesSkipped(t *testing.T) {
	w := newWorld(t)
	rp := w.reporter("d1", w.store, true)
	other := w.run(w.store, "api", sha1, orchestrator.Origin{Provider: "api", Repo: "mallory/api"})
	short := w.run(w.store, "api", "5f2c3e1", orchestrator.Origin{})
	for _, r := range []*runs.Run{&other, &short} {
		move(rp, r, runs.StatusQueued, "")
		move(rp, r, runs.StatusSucceeded, "")
	}
	for r, why := range map[string]string{other.ID: "mallory/api", short.ID: "commit"} {
		evs, _ := w.store.Events(context.Background(), r, 0, 100)
		i := slices.IndexFunc(evs, func(ev runs.Event) bool { return ev.Type == runs.EventStatusSkipped })
		if i < 0 || !strings.Contains(evs[i].Message, why) {
			t.Errorf("run %s events = %+v, want status.skipped naming %s", r, evs, why)
		}
	}
	rp.Drain(context.Background())
	if n := len(w.gh.Requests()); n != 0 {
		t.Errorf("the host got %d requests for runs it must not hear of", n)
	}
}
