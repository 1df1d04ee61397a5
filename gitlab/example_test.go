package gitlab_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/gitlab"
)

func Example() {
	c, err := gitlab.New("https://gitlab.example.com", gitlab.Token("glpat-…"))
	if err != nil {
		fmt.Println("configuration:", err)
		return
	}
	ctx := context.Background()
	d := orchestrator.HostDeployment{Repo: "acme/platform/web", Commit: "3f786850e387550fdab836ed7e6dc881de23001b",
		Ref: "main", Environment: "production", RunID: "20261206-x1",
		LogURL: "https://orchestrator.example.com/runs/20261206-x1", CommitStatus: "orchestrator/deploy"}
	id, err := c.CreateDeployment(ctx, d)
	var ae *gitlab.APIError
	if errors.As(err, &ae) {
		if after, ok := ae.Retryable(); ok {
			fmt.Println("try again in", after)
		}
		return
	}
	if err != nil {
		return // no answer: try again
	}
	_ = c.SetDeploymentState(ctx, d, id, orchestrator.HostSuccess, "deployed")
}
