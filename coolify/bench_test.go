package coolify_test

import (
	"context"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
)

// BenchmarkGetApplication measures one read through the client and the fake (loopback HTTP,
// no spec validation). The fake's throttle is off in these benchmarks: they measure the client.
func BenchmarkGetApplication(b *testing.B) {
	srv := coolifytest.NewServer(b, coolifytest.WithoutRateLimit())
	app := srv.AddApplication(coolifytest.Application{Name: "api"})
	c := coolify.New(srv.URL, srv.Token)
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.GetApplication(ctx, app.UUID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpsertEnvs measures a bulk write of 20 variables.
func BenchmarkUpsertEnvs(b *testing.B) {
	srv := coolifytest.NewServer(b, coolifytest.WithoutRateLimit())
	app := srv.AddApplication(coolifytest.Application{Name: "api"})
	c := coolify.New(srv.URL, srv.Token)
	vars := twentyVars()
	ctx := context.Background()
	for b.Loop() {
		if err := c.UpsertEnvs(ctx, coolify.AppRef(app.UUID), vars); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeployAndWait measures deploy + confirm + wait on a fake whose deployments take no
// time, i.e. the client's own overhead per deployment (poll interval 1 ms).
func BenchmarkDeployAndWait(b *testing.B) {
	app, c := deployingApp(b)
	ctx := context.Background()
	for b.Loop() {
		deployAndWait(ctx, b, c, app.UUID)
	}
}

// BenchmarkListEnvs measures one listing of an application's 20 variables (and their 20
// preview twins), as Phase 1 reads them before and after a write.
func BenchmarkListEnvs(b *testing.B) {
	srv := coolifytest.NewServer(b, coolifytest.WithoutRateLimit())
	app := srv.AddApplication(coolifytest.Application{Name: "api"})
	c := coolify.New(srv.URL, srv.Token)
	vars := twentyVars()
	ctx := context.Background()
	if err := c.UpsertEnvs(ctx, coolify.AppRef(app.UUID), vars); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.ListAllEnvs(ctx, coolify.AppRef(app.UUID)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkActiveDeployments measures the guard's read before every write, for an
// application with 20 ended deployments: the team's active list (GET /deployments), since
// the client learned the application's id from its deploys. (Before the client knows it, the
// read was a page of the application's 20 newest rows, logs included: about 11 times the
// memory and 13 times the allocations of this one, measured when the list replaced it. It
// is now the newest row alone, which names the id, then this list.)
func BenchmarkActiveDeployments(b *testing.B) {
	app, c := deployingApp(b)
	ctx := context.Background()
	for range 20 {
		deployAndWait(ctx, b, c, app.UUID)
	}
	for b.Loop() {
		if _, err := c.ActiveDeployments(ctx, app.UUID); err != nil {
			b.Fatal(err)
		}
	}
}

// twentyVars is a batch of 20 variables.
func twentyVars() []coolify.EnvVar {
	vars := make([]coolify.EnvVar, 20)
	for i := range vars {
		vars[i] = coolify.NewEnvVar("KEY_"+string(rune('A'+i)), "value")
	}
	return vars
}

// deployingApp is an application on a fake whose deployments take no time, and a client
// that polls every millisecond.
func deployingApp(b *testing.B) (coolifytest.Application, *coolify.Client) {
	srv := coolifytest.NewServer(b, coolifytest.WithTiming(coolifytest.Timing{}), coolifytest.WithQueueLimit(1<<30, time.Second), coolifytest.WithoutRateLimit())
	app := srv.AddApplication(coolifytest.Application{Name: "api"})
	return app, coolify.New(srv.URL, srv.Token, coolify.WithPollInterval(time.Millisecond))
}

func deployAndWait(ctx context.Context, b *testing.B, c *coolify.Client, appUUID string) {
	res, err := c.Deploy(ctx, appUUID, false)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.WaitDeployment(ctx, res.DeploymentUUID, time.Minute); err != nil {
		b.Fatal(err)
	}
}
