package github_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/github"
)

// retryLater is how a caller (the daemon's outbox) reads a failure: a refusal is final, an
// answer that asks to wait or no answer at all is tried again.
func retryLater(err error) (time.Duration, bool) {
	var ae *github.APIError
	if errors.As(err, &ae) {
		return ae.Retryable()
	}
	return 0, !errors.Is(err, orchestrator.ErrInvalid)
}

func Example() {
	c, err := github.New("", github.App(12345, 67890, []byte("-----BEGIN RSA PRIVATE KEY-----\n…")))
	if err != nil {
		fmt.Println("configuration:", err)
		return
	}
	ctx := context.Background()
	d := orchestrator.HostDeployment{Repo: "acme/web", Commit: "3f786850e387550fdab836ed7e6dc881de23001b",
		Environment: "production", Production: true, RunID: "20261206-x1",
		LogURL: "https://orchestrator.example.com/runs/20261206-x1", CommitStatus: "orchestrator/deploy"}
	id, err := c.CreateDeployment(ctx, d) // again after a crash: the same id
	if err != nil {
		if after, ok := retryLater(err); ok {
			fmt.Println("try again in", after)
		}
		return
	}
	_ = c.SetDeploymentState(ctx, d, id, orchestrator.HostInProgress, "deploying")
}
