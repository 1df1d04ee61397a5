package coolify_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
)

// waitCost deploys the application and waits for it, and returns the Coolify requests the
// wait made (the fake's own log).
func waitCost(t *testing.T, e *env, appUUID string) int {
	t.Helper()
	ctx := context.Background()
	res, err := e.c.Deploy(ctx, appUUID, false)
	if err != nil {
		t.Fatal(err)
	}
	before := len(e.srv.Requests())
	if _, err := e.c.WaitDeployment(ctx, res.DeploymentUUID, time.Minute); err != nil {
		t.Fatal(err)
	}
	return len(e.srv.Requests()) - before
}

// The requests a wait costs do not grow with the deployment's length: once the client has
// seen how long an application's deployments take, a deployment eight times longer costs
// about the same requests as a short one (polling every interval, it would cost eight times
// more). Ticks are kept well above a loaded machine's timer lateness, which costs short
// ticks more looks than long ones; the bound allows for it.
func TestWaitCostIsFlatInDeploymentTime(t *testing.T) {
	const poll = 40 * time.Millisecond
	cost := func(run time.Duration) int {
		e := setup(t, []coolifytest.Option{coolifytest.WithTiming(coolifytest.Timing{Queued: time.Millisecond, RunMin: run, RunMax: run})},
			coolify.WithPollInterval(poll))
		waitCost(t, e, e.app.UUID) // the client learns the application's durations
		return waitCost(t, e, e.app.UUID)
	}
	short, long := cost(400*time.Millisecond), cost(3200*time.Millisecond)
	t.Logf("requests of a wait: %d for a 400 ms deployment, %d for a 3.2 s one", short, long)
	if float64(long) > 2*float64(short) {
		t.Errorf("a 3.2 s deployment's wait cost %d requests, a 400 ms one's %d: want at most 2×", long, short)
	}
}

// Waits for many deployments share one look per tick: five deployments in flight cost about
// the list requests of one, and each deployment is read once, when it has ended.
func TestWaitsShareOneLookPerTick(t *testing.T) {
	const run = 300 * time.Millisecond
	lists := func(n int) (int, int) {
		e := setup(t, []coolifytest.Option{coolifytest.WithConcurrentBuilds(n),
			coolifytest.WithTiming(coolifytest.Timing{Queued: time.Millisecond, RunMin: run, RunMax: run})},
			coolify.WithPollInterval(10*time.Millisecond))
		ctx := context.Background()
		var ids []string
		for i := range n {
			app := e.srv.AddApplication(coolifytest.Application{Name: fmt.Sprintf("app%d", i), ImageName: "acme/app", ImageTag: "v1"})
			res, err := e.c.Deploy(ctx, app.UUID, false)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.DeploymentUUID)
		}
		before := len(e.srv.Requests())
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for _, id := range ids {
			wg.Go(func() {
				if _, err := e.c.WaitDeployment(ctx, id, time.Minute); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		list, reads := 0, 0
		for _, r := range e.srv.Requests()[before:] {
			switch r.Route {
			case "GET /deployments":
				list++
			case "GET /deployments/{uuid}":
				reads++
			}
		}
		return list, reads
	}
	one, _ := lists(1)
	five, reads := lists(5)
	t.Logf("list requests: %d for one deployment, %d for five", one, five)
	if float64(five) > 1.5*float64(one)+2 {
		t.Errorf("five waits made %d list requests, one wait %d: want them shared", five, one)
	}
	if reads != 5 {
		t.Errorf("five waits read deployments %d times, want 5 (once each, at its end)", reads)
	}
}

// A deployment's end is seen at the first look after it: in the fake's log, at most one list
// request comes between the request that ended it and the wait's read of how it ended.
func TestWaitSeesTheEndWithinOneTick(t *testing.T) {
	e := setup(t, nil, coolify.WithPollInterval(20*time.Millisecond))
	e.srv.SetDeployOutcome(e.app.UUID, coolifytest.Hang)
	ctx := context.Background()
	res, err := e.c.Deploy(ctx, e.app.UUID, false)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.c.WaitDeployment(ctx, res.DeploymentUUID, time.Minute)
		done <- err
	}()
	waitFor(t, func() bool { return len(e.srv.RequestsTo("GET /deployments")) >= 3 })
	if err := e.c.CancelDeployment(ctx, res.DeploymentUUID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, coolify.ErrDeploymentCancelled) {
		t.Fatalf("got %v, want the wait to see the cancel", err)
	}
	var ended, read uint64
	for _, r := range e.srv.Requests() {
		switch {
		case r.Route == "POST /deployments/{uuid}/cancel":
			ended = r.Seq
		case r.Route == "GET /deployments/{uuid}" && ended != 0:
			read = r.Seq
		}
	}
	if read == 0 {
		t.Fatal("the wait never read the ended deployment")
	}
	looks := 0
	for _, r := range e.srv.RequestsTo("GET /deployments") {
		if r.Seq > ended && r.Seq < read {
			looks++
		}
	}
	if looks > 1 {
		t.Errorf("%d looks at the list between the end and its read, want at most 1", looks)
	}
}
