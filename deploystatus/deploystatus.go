// Package deploystatus tells Git hosts (GitHub, GitLab) about runs: each run of a pipeline
// with a statuses block becomes a deployment on the host, whose state follows the run
// (queued, in progress, then success, failure, error or canceled; inactive once a newer run
// replaced it), with a link to the run's page.
//
// It is off the critical path and loses nothing: the engine only appends a state to the
// run's report in the run store's outbox (runs.ReportStore), which returns at once; a
// Reporter's loop claims due reports and tells the host, in order per report, retrying with
// backoff and within the host's rate limits, and a report that is not fully told when the
// daemon stops is told by the next daemon that runs (any daemon sharing the store). A host
// that fails or is slow never blocks, slows or fails a deploy: its failures show as run
// events (status.failed) and the metric orchestrator_deployment_statuses_total.
package deploystatus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Host is one Git host's deployments API (*github.Client, *gitlab.Client).
type Host interface {
	// CreateDeployment creates the deployment d (or finds the one created for d.RunID
	// before) and returns its ID.
	CreateDeployment(ctx context.Context, d orchestrator.HostDeployment) (id string, err error)
	// SetDeploymentState sets deployment id's state, and d's commit status if it names one.
	SetDeploymentState(ctx context.Context, d orchestrator.HostDeployment, id string, s orchestrator.HostState, description string) error
}

// The Git hosts a pipeline's statuses block can name.
const (
	HostGitHub = string(orchestrator.GitHub)
	HostGitLab = string(orchestrator.GitLab)
)

// Store is what the reporter keeps reports in and records failures on (*runs.Portable with
// a store that implements runs.ReportStore).
type Store interface {
	runs.ReportStore
	Append(ctx context.Context, id string, evs ...runs.Event) ([]runs.Event, error)
}

// Options configure a Reporter. Store, Pipelines and Client are required.
type Options struct {
	Store Store
	// Pipelines are the loaded pipelines by name: a report is told with its pipeline's
	// host settings.
	Pipelines map[string]*config.Pipeline
	// Client returns the client of host ("github", "gitlab") for a pipeline's statuses block
	// (called once per pipeline and host, then kept).
	Client func(p *config.Pipeline, host string) (Host, error)
	// Owner names this daemon in the outbox's claims (runs.Run.Instance's value).
	Owner string
	// PublicURL is the dashboard's address; a deployment's log URL is its run's page there.
	PublicURL string
	Logger    *slog.Logger
	// Outcome counts each state told or not (host; sent, retry, dropped).
	Outcome func(host, outcome string)
	// Poll is how often due reports are looked for besides being woken (default 2s); Lease
	// how long a claim lasts (default 2m); GiveUp how long a state is retried before it is
	// dropped (default 24h); Backoff the first retry's wait, doubling to MaxBackoff
	// (defaults 2s and 5m); RequestTimeout bounds one request to a host (default 20s).
	Poll, Lease, GiveUp, Backoff, MaxBackoff, RequestTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Reporter records run states as reports and tells them to the hosts.
type Reporter struct {
	o    Options
	log  *slog.Logger
	wake chan struct{}

	mu      sync.Mutex
	clients map[string]Host // by pipeline and host
}

// New returns a reporter; Run delivers.
func New(o Options) *Reporter {
	o.Poll = orDur(o.Poll, 2*time.Second)
	o.Lease = orDur(o.Lease, 2*time.Minute)
	o.GiveUp = orDur(o.GiveUp, 24*time.Hour)
	o.Backoff = orDur(o.Backoff, 2*time.Second)
	o.MaxBackoff = orDur(o.MaxBackoff, 5*time.Minute)
	o.RequestTimeout = orDur(o.RequestTimeout, 20*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Outcome == nil {
		o.Outcome = func(string, string) {}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reporter{o: o, log: log, wake: make(chan struct{}, 1), clients: map[string]Host{}}
}

func orDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// recordTimeout bounds the outbox write a run makes at each of its states.
const recordTimeout = 5 * time.Second

// Report records the state run r is in (r as stored: queued, in a phase, or ended) for each
// Git host its pipeline names, and wakes the delivery loop. It returns once the outbox has
// the state; it never fails the run: a store error is logged.
func (rp *Reporter) Report(ctx context.Context, r runs.Run) {
	p := rp.o.Pipelines[r.Pipeline]
	if p == nil || p.Statuses == nil {
		return
	}
	st, ok := stateOf(r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	for _, host := range hostsOf(p) {
		d, skip := rp.deployment(p, host, r)
		if skip != "" {
			if r.Status == runs.StatusQueued {
				rp.event(ctx, r.ID, runs.Event{Type: runs.EventStatusSkipped, Message: host + ": " + skip,
					Data: map[string]string{dataHost: host}})
			}
			continue
		}
		seed := runs.Report{Key: reportKey(host, r.ID), Host: host, RunID: r.ID, Pipeline: r.Pipeline, Deployment: d}
		state := runs.ReportState{State: st, Description: describe(r), At: rp.o.Now().UTC()}
		if err := rp.o.Store.AddReportState(ctx, seed, state); err != nil {
			rp.o.Outcome(host, outcomeDropped)
			rp.log.LogAttrs(ctx, slog.LevelWarn, "deployment state not recorded", slog.String(logkey.RunID, r.ID),
				slog.String(logHost, host), slog.String(logState, string(st)), slog.String(logkey.Error, err.Error()))
		}
	}
	select {
	case rp.wake <- struct{}{}:
	default:
	}
}

// Event data keys and log keys.
const (
	dataHost    = "host"
	dataState   = "state"
	dataAttempt = "attempt"
	dataGaveUp  = "gave_up"
	logHost     = "host"
	logState    = "state"
)

// Outcomes counted (Options.Outcome).
const (
	outcomeSent    = "sent"
	outcomeRetry   = "retry"
	outcomeDropped = "dropped"
)

// hostsOf lists the hosts p's statuses block names.
func hostsOf(p *config.Pipeline) []string {
	var out []string
	if p.Statuses.GitHub != nil {
		out = append(out, HostGitHub)
	}
	if p.Statuses.GitLab != nil {
		out = append(out, HostGitLab)
	}
	return out
}

func reportKey(host, runID string) string { return host + "/" + runID }

// stateOf is the host state of run r's status; false for none.
func stateOf(r runs.Run) (orchestrator.HostState, bool) {
	switch r.Status {
	case runs.StatusQueued, runs.StatusAwaiting: // awaiting: waits for approval, not started
		return orchestrator.HostQueued, true
	case runs.StatusPhase1, runs.StatusPhase2, runs.StatusMobile:
		return orchestrator.HostInProgress, true
	case runs.StatusSucceeded:
		return orchestrator.HostSuccess, true
	case runs.StatusFailed:
		return orchestrator.HostFailure, true
	case runs.StatusInterrupted:
		return orchestrator.HostError, true
	case runs.StatusCanceled, runs.StatusExpired: // expired: nobody approved it in time; nothing deployed
		return orchestrator.HostCanceled, true
	case runs.StatusSuperseded:
		return orchestrator.HostInactive, true
	}
	return "", false
}

// deployment is run r's deployment on host as p configures it, or why r is not reported
// there: a run reports on the configured repository only, and needs its full commit SHA
// (orchestrator.ValidHostDeployment).
func (rp *Reporter) deployment(p *config.Pipeline, host string, r runs.Run) (orchestrator.HostDeployment, string) {
	t, o := r.Trigger, r.Trigger.Origin
	d := orchestrator.HostDeployment{Commit: t.Commit, RunID: r.ID}
	if rp.o.PublicURL != "" {
		d.LogURL = strings.TrimSuffix(rp.o.PublicURL, "/") + "/runs/" + r.ID
	}
	var env config.HostEnvironment
	switch host {
	case HostGitHub:
		g := p.Statuses.GitHub
		d.Repo, env, d.Transient, d.Production = g.Repo, g.HostEnvironment, g.Transient, g.Production != nil && *g.Production
	case HostGitLab:
		g := p.Statuses.GitLab
		d.Repo, env, d.Ref = g.Project, g.HostEnvironment, g.Ref
		if o.Ref != "" && orchestrator.ValidRef(o.Ref) {
			d.Ref, d.Tag = o.Ref, o.Tag
		}
	}
	d.Environment, d.EnvironmentURL, d.CommitStatus = env.Environment, env.EnvironmentURL, env.CommitStatus
	if o.Repo != "" && !strings.EqualFold(o.Repo, d.Repo) {
		return d, fmt.Sprintf("the trigger names the repository %s, not %s", o.Repo, d.Repo)
	}
	if err := orchestrator.ValidHostDeployment(orchestrator.GitHost(host), d); err != nil {
		return d, "not a deployment the host takes: " + err.Error()
	}
	return d, ""
}

// maxDescription is the longest description told (GitHub's limit for a status).
const maxDescription = 140

// describe says in one line what run r's state is, for the host's deployment page.
func describe(r runs.Run) string {
	build := "build " + r.Trigger.Build
	switch {
	case r.Trigger.Build == "" && r.Trigger.ImageTag != "":
		build = "image " + r.Trigger.ImageTag
	case r.Trigger.Build == "":
		build = "commit " + short(r.Trigger.Commit)
	}
	var s string
	switch r.Status {
	case runs.StatusQueued:
		s = "Queued: " + build
	case runs.StatusPhase1, runs.StatusPhase2, runs.StatusMobile:
		s = "Deploying " + build
	case runs.StatusSucceeded:
		s = "Deployed " + build
	default:
		s = strings.ToUpper(string(r.Status[:1])) + string(r.Status[1:]) + ": " + build
		if r.Reason != "" {
			s += ": " + r.Reason
		}
	}
	return orchestrator.CapHostDescription(s, maxDescription)
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// event appends ev to run id's events; a failure is logged only.
func (rp *Reporter) event(ctx context.Context, id string, ev runs.Event) {
	if _, err := rp.o.Store.Append(ctx, id, ev); err != nil {
		rp.log.LogAttrs(ctx, slog.LevelWarn, "run event not written", slog.String(logkey.RunID, id),
			slog.String(logkey.Event, string(ev.Type)), slog.String(logkey.Error, err.Error()))
	}
}

// client returns the host client of pipeline name's statuses block.
func (rp *Reporter) client(pipeline, host string) (Host, error) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	k := pipeline + "\x00" + host
	if c, ok := rp.clients[k]; ok {
		return c, nil
	}
	p := rp.o.Pipelines[pipeline]
	if p == nil || p.Statuses == nil || !slices.Contains(hostsOf(p), host) {
		return nil, fmt.Errorf("pipeline %q no longer names %s in its statuses block", pipeline, host)
	}
	c, err := rp.o.Client(p, host)
	if err != nil {
		return nil, fmt.Errorf("%s client of pipeline %q: %w", host, pipeline, err)
	}
	rp.clients[k] = c
	return c, nil
}

// retryable reports whether err is worth trying again, and the wait the host asked for:
// an error that says (a host's API error: 5xx, rate limits) or one that is no answer at all
// (the network, a timeout).
func retryable(err error) (time.Duration, bool) {
	var r interface {
		Retryable() (time.Duration, bool)
	}
	if errors.As(err, &r) {
		return r.Retryable()
	}
	return 0, true
}
