package pacing_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/pacing"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
)

// daemons returns n Coolify clients of the fake, each with its own pool on one Redis, as n
// daemons sharing a Redis have.
func daemons(t *testing.T, srv *coolifytest.Server, rdbAddr string, n int) []*coolify.Client {
	var out []*coolify.Client
	for range n {
		rdb := redis.NewClient(&redis.Options{Addr: rdbAddr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		pool, err := pacing.NewRedisPool(rdb, pacing.Budget{Limit: 6000, Window: time.Minute}, pacing.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, coolify.New(srv.URL, srv.Token, coolify.WithPollInterval(20*time.Millisecond),
			coolify.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}),
			coolify.WithLimiter(pool.For(srv.URL, srv.Token)), coolify.WithBoard(pool.Board(srv.URL, srv.Token))))
	}
	return out
}

// deployAll deploys one new application per client and waits for each on its client; it
// returns the list requests the waits made.
func deployAll(t *testing.T, srv *coolifytest.Server, clients []*coolify.Client) int {
	ctx := context.Background()
	ids := make([]string, len(clients))
	for i, c := range clients {
		app := srv.AddApplication(coolifytest.Application{Name: fmt.Sprintf("app%d", i), ImageName: "acme/app", ImageTag: "v1"})
		res, err := c.Deploy(ctx, app.UUID, false)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.DeploymentUUID
	}
	before := len(srv.RequestsTo("GET /deployments"))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			if _, err := c.WaitDeployment(ctx, ids[i], time.Minute); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	return len(srv.RequestsTo("GET /deployments")) - before
}

// Daemons on one Redis share one look per tick: three daemons waiting for three deployments
// make about the list requests one daemon waiting for one makes.
func TestBoardSharesTheLookAmongDaemons(t *testing.T) {
	rsrv := redistest.Start(t)
	timing := coolifytest.WithTiming(coolifytest.Timing{Queued: time.Millisecond, RunMin: 400 * time.Millisecond, RunMax: 400 * time.Millisecond})
	srv1 := coolifytest.NewServer(t, timing, coolifytest.WithConcurrentBuilds(3))
	alone := deployAll(t, srv1, daemons(t, srv1, rsrv.Addr, 1))
	srv3 := coolifytest.NewServer(t, timing, coolifytest.WithConcurrentBuilds(3))
	three := deployAll(t, srv3, daemons(t, srv3, rsrv.Addr, 3))
	t.Logf("list requests: %d for one daemon, %d for three", alone, three)
	if float64(three) > 1.5*float64(alone)+2 {
		t.Errorf("three daemons made %d list requests, one %d: want them shared", three, alone)
	}
}

// A daemon that died holding the fetcher's lease holds the others up only until the lease
// expires: then one of them asks Coolify.
func TestBoardOutlivesADeadFetcher(t *testing.T) {
	rsrv := redistest.Start(t)
	srv := coolifytest.NewServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: rsrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	pool, err := pacing.NewRedisPool(rdb, pacing.DefaultCoolifyBudget, pacing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := pool.Board(srv.URL, srv.Token)
	// The dead daemon's lease, as it left it: no answer will come.
	if err := rdb.Set(context.Background(), pacing.DefaultPrefix+"active-lease:"+pacing.Key(srv.URL, srv.Token), "dead", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	fetched := 0
	got, err := b.Share(context.Background(), time.Now(), func(context.Context) ([]byte, error) { fetched++; return []byte("[]"), nil })
	if err != nil || string(got) != "[]" || fetched != 1 {
		t.Fatalf("got %q, %v after %d fetches; want the list fetched once the lease expired", got, err, fetched)
	}
	// The answer is stored for the others: a second daemon's ask for the same point reads it.
	other, err := pacing.NewRedisPool(redis.NewClient(&redis.Options{Addr: rsrv.Addr}), pacing.DefaultCoolifyBudget, pacing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Board(srv.URL, srv.Token).Share(context.Background(), time.Now().Add(-time.Second),
		func(context.Context) ([]byte, error) { fetched++; return []byte("[]"), nil }); err != nil || fetched != 1 {
		t.Errorf("second daemon: %v after %d fetches, want the stored list read", err, fetched)
	}
}
