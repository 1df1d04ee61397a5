package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/deploystatus"
	"github.com/deploy-orchestrator/orchestrator/github"
	"github.com/deploy-orchestrator/orchestrator/gitlab"
	"github.com/deploy-orchestrator/orchestrator/metrics"
)

// statusesGrace is how long a stopping daemon goes on telling the Git hosts what its runs'
// last states were; what is left is told by the next daemon on the store.
const statusesGrace = 5 * time.Second

// startStatuses starts the reporter of the pipelines' statuses blocks (nil, and a no-op stop,
// when no pipeline names a Git host). stop ends its loop after a short grace for what is
// due, and waits for it: call it after the engine's shutdown, so the runs' last states are
// in the outbox.
func startStatuses(ctx context.Context, b *backends, pipelines map[string]*config.Pipeline, instance, publicURL string,
	c *clients, m *metrics.Metrics, log *slog.Logger) (*deploystatus.Reporter, func()) {
	any := false
	for _, p := range pipelines {
		any = any || p.Statuses != nil
	}
	if !any {
		return nil, func() {}
	}
	rp := deploystatus.New(deploystatus.Options{
		Store: b.store, Pipelines: pipelines, Client: c.gitHost, Owner: instance, PublicURL: publicURL,
		Logger: log, Outcome: m.DeploymentStatus,
	})
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { rp.Run(rctx) })
	return rp, func() {
		t := time.AfterFunc(statusesGrace, cancel)
		rp.Drain(rctx)
		t.Stop()
		cancel()
		wg.Wait()
	}
}

// gitHost is the client of a pipeline's statuses block for host.
func (c *clients) gitHost(p *config.Pipeline, host string) (deploystatus.Host, error) {
	switch host {
	case deploystatus.HostGitHub:
		g := p.Statuses.GitHub
		auth := github.Token(g.Token.Reveal())
		if g.App != nil {
			auth = github.App(g.App.ID, g.App.InstallationID, []byte(g.App.PrivateKey.Reveal()))
		}
		return github.New(g.URL, auth, github.WithLogger(c.log), github.WithVersion(version), github.WithMetrics(c.metrics))
	case deploystatus.HostGitLab:
		g := p.Statuses.GitLab
		return gitlab.New(g.URL, gitlab.Token(g.Token.Reveal()), gitlab.WithLogger(c.log), gitlab.WithVersion(version), gitlab.WithMetrics(c.metrics))
	}
	return nil, fmt.Errorf("no Git host %q", host)
}
