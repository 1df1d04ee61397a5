package coolify_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
)

// The Phase 2 path for one application: set the tag, deploy, wait with a deadline. A second
// deploy while the first is still queued is dropped by Coolify, and the client says so. (The
// fake's clock is stepped by hand so that the second deploy surely meets the first.)
func Example() {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	fake := coolifytest.New(coolifytest.WithClock(clock))
	app := fake.AddApplication(coolifytest.Application{Name: "api", ImageName: "ghcr.io/acme/api", ImageTag: "v1"})
	srv := httptest.NewServer(fake)
	defer srv.Close()

	c := coolify.New(srv.URL, coolifytest.DefaultToken, coolify.WithVersion("1.0.0"),
		coolify.WithPollInterval(10*time.Millisecond))
	ctx := coolify.WithTrace(context.Background(), "prod#1234", 42)

	if err := c.SetImageTag(ctx, app.UUID, "v2"); err != nil {
		fmt.Println(err)
		return
	}
	res, err := c.Deploy(ctx, app.UUID, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := c.Deploy(ctx, app.UUID, false); errors.Is(err, coolify.ErrDeployDeduplicated) {
		fmt.Println("second deploy: dropped by Coolify")
	}
	clock.Advance(time.Minute) // the first deployment runs and finishes
	d, err := c.WaitDeployment(ctx, res.DeploymentUUID, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	a, _ := fake.App(app.UUID)
	fmt.Println("deployment:", d.Status)
	fmt.Println("running tag:", a.DeployedImageTag)
	// Output:
	// second deploy: dropped by Coolify
	// deployment: finished
	// running tag: v2
}
