package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks/redislock"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
	"github.com/deploy-orchestrator/orchestrator/runs/runstest"
)

func TestConformance(t *testing.T) {
	runstest.Run(t, backends(t))
}

// TestConformanceSentinel runs the suite through the Sentinel URL of a master with two
// replicas and three sentinels, with the client the daemon builds from its redis_url.
func TestConformanceSentinel(t *testing.T) {
	runstest.Run(t, backendsAt(redistest.StartSentinel(t, redistest.SentinelOptions{}).URL()))
}

// TestConformanceCluster runs the suite on a Cluster of three masters with one replica
// each: every key of the store carries one hash tag, so its scripts never cross slots.
func TestConformanceCluster(t *testing.T) {
	runstest.Run(t, backendsAt(redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: 1}).URL()))
}

func BenchmarkStore(b *testing.B) {
	runstest.Bench(b, backends(b))
}

// backends starts one redis-server for the whole suite and gives each subtest a fresh key
// space of its own (a prefix).
func backends(tb testing.TB) func(testing.TB) runstest.Opener {
	return backendsAt(redistest.Start(tb).URL())
}

// backendsAt gives each subtest a fresh key space (a prefix) on the Redis at url.
func backendsAt(url string) func(testing.TB) runstest.Opener {
	var n atomic.Int64
	return func(testing.TB) runstest.Opener {
		prefix := "t" + strconv.FormatInt(n.Add(1), 10) + ":"
		return func(tb testing.TB) runs.Store {
			rdb, err := redislock.NewClient(url)
			if err != nil {
				tb.Fatal(err)
			}
			s := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			tb.Cleanup(func() {
				s.Close()
				rdb.Close()
			})
			return s
		}
	}
}

// TestSignalsSurviveRestart: the Store's one pattern subscription reconnects when Redis
// comes back, so followers of runs created afterwards are still woken.
func TestSignalsSurviveRestart(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	defer rdb.Close()
	s := redisstore.New(rdb, redisstore.Options{})
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	follow := func() {
		t.Helper()
		r, _, err := s.Create(ctx, runs.Run{Pipeline: "prod"})
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		sub, err := s.Subscribe(ctx, r.ID)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		defer sub.Close()
		if _, err := s.Append(ctx, r.ID, runs.Event{Type: runs.EventRunStarted}); err != nil {
			t.Fatalf("Append: %v", err)
		}
		select {
		case <-sub.C():
		case <-ctx.Done():
			t.Fatal("no signal after Append")
		}
	}
	follow()
	srv.Restart() // an empty server: the data is gone, the subscription must come back
	// go-redis resubscribes in the background once it notices the dropped connection; wait
	// for that by retrying until a signal arrives, bounded by ctx.
	for {
		r, _, err := s.Create(ctx, runs.Run{Pipeline: "prod"})
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("Create after restart: %v", err)
			}
			continue
		}
		sub, err := s.Subscribe(ctx, r.ID)
		if err != nil {
			t.Fatalf("Subscribe after restart: %v", err)
		}
		if _, err := s.Append(ctx, r.ID, runs.Event{Type: runs.EventRunStarted}); err != nil {
			t.Fatalf("Append after restart: %v", err)
		}
		select {
		case <-sub.C():
			sub.Close()
			return
		case <-time.After(200 * time.Millisecond): // not resubscribed yet: try again
		case <-ctx.Done():
			t.Fatal("no signal after Redis restarted")
		}
		sub.Close()
	}
}

// TestCloseStopsGoroutines: Close ends the subscription goroutines the Store started.
func TestCloseStopsGoroutines(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	defer rdb.Close()
	opt := goleak.IgnoreCurrent()
	s := redisstore.New(rdb, redisstore.Options{})
	sub, err := s.Subscribe(t.Context(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := s.Subscribe(t.Context(), "r1"); !errors.Is(err, runs.ErrUnavailable) {
		t.Errorf("Subscribe after Close: %v, want ErrUnavailable", err)
	}
	sub.Close()
	goleak.VerifyNone(t, opt)
}

// processStore is a store on a Redis client of its own, as another daemon's is, closed with
// the test.
func processStore(t *testing.T, addr string) *redisstore.Store {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}})
	s := redisstore.New(rdb, redisstore.Options{})
	t.Cleanup(func() {
		s.Close()
		rdb.Close()
	})
	return s
}

// TestFollowAcrossInstances: a follower on one daemon is woken by the engine of another
// (the API and the engine may run on different hosts sharing one Redis).
func TestFollowAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	engine, api := processStore(t, srv.Addr), processStore(t, srv.Addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, _, err := engine.Create(ctx, runs.Run{Pipeline: "prod"})
	if err != nil {
		t.Fatal(err)
	}

	// The signal itself crosses instances (Subscribe has no polling fallback).
	sub, err := api.Subscribe(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := engine.Append(ctx, r.ID, runs.Event{Type: runs.EventRunQueued}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C():
	case <-ctx.Done():
		t.Fatal("a subscriber on another instance got no signal")
	}

	// And Follow on one instance streams what the other writes, to the end.
	got := make(chan runs.Event)
	done := make(chan error, 1)
	go func() {
		done <- runs.Follow(ctx, api, r.ID, 0, func(e runs.Event) error {
			select {
			case got <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	next := func(seq int64, typ runs.EventType) {
		t.Helper()
		select {
		case e := <-got:
			if e.Seq != seq || e.Type != typ {
				t.Fatalf("follower got seq %d %s, want seq %d %s", e.Seq, e.Type, seq, typ)
			}
		case err := <-done:
			t.Fatalf("Follow returned early: %v", err)
		case <-ctx.Done():
			t.Fatalf("follower on the other instance did not get seq %d %s", seq, typ)
		}
	}
	next(1, runs.EventRunQueued)
	for i, typ := range []runs.EventType{runs.EventRunStarted, runs.EventLockWaiting, runs.EventLockAcquired} {
		if _, err := engine.Append(ctx, r.ID, runs.Event{Type: typ}); err != nil {
			t.Fatal(err)
		}
		next(int64(i+2), typ)
	}
	if _, err := engine.Update(ctx, r.ID, func(x *runs.Run) error { x.Status = runs.StatusSucceeded; return nil },
		runs.Event{Type: runs.EventRunSucceeded}); err != nil {
		t.Fatal(err)
	}
	next(5, runs.EventRunSucceeded)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Follow after the run ended: %v, want nil", err)
		}
	case <-ctx.Done():
		t.Error("Follow did not return after the run ended")
	}
}

// TestReadsWholeRuns: a run stored whole (field d of its hash holds its JSON, steps
// included), as builds before the step fields wrote it, reads as before, and its first
// Update moves it to the header-and-step-fields layout without losing a step.
func TestReadsWholeRuns(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	defer rdb.Close()
	ctx := t.Context()
	r := runstest.LegacyRun()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	const k = redisstore.DefaultPrefix + "{runs}:"
	sk := fmt.Sprintf("%019d:%s", r.CreatedAt.UnixNano(), r.ID)
	pipe := rdb.TxPipeline()
	pipe.HSet(ctx, k+"run:"+r.ID, "d", data, "v", r.Version, "st", string(r.Status), "ow", r.Instance, "sk", sk)
	for _, idx := range []string{"idx:all", "idx:pl:" + r.Pipeline, "idx:st:" + string(r.Status), "idx:ps:" + string(r.Status) + ":" + r.Pipeline} {
		pipe.ZAdd(ctx, k+idx, redis.Z{Member: sk})
	}
	pipe.SAdd(ctx, k+"owner:"+r.Instance, r.ID)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	runstest.CheckLegacyRun(t, func(tb testing.TB) runs.Store {
		s := redisstore.New(rdb, redisstore.Options{})
		tb.Cleanup(func() { s.Close() })
		return s
	})

	fields, err := rdb.HKeys(ctx, k+"run:"+r.ID).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(fields)
	if want := []string{"h", "n", "ow", "s:0", "s:1", "sk", "st", "v"}; !slices.Equal(fields, want) {
		t.Errorf("fields of the run after its updates: %v, want %v", fields, want)
	}
}

// TestReadsMarksWithoutPipelineMarks: a resource's mark as builds before pipeline marks
// stored it (the hash's d and f, no p:<pipeline> field) stands for its pipeline's mark, and
// stays that pipeline's mark once other pipelines write the resource.
func TestReadsMarksWithoutPipelineMarks(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	defer rdb.Close()
	m := runstest.LegacyMark()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	key := redisstore.DefaultPrefix + "{runs}:mark:" + m.UUID
	if err := rdb.HSet(t.Context(), key, "d", data, "f", m.Fence).Err(); err != nil {
		t.Fatal(err)
	}
	s := redisstore.New(rdb, redisstore.Options{})
	defer s.Close()
	runstest.CheckLegacyMark(t, s)
	fields, err := rdb.HKeys(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(fields)
	if want := []string{"d", "f", "p:late", "p:ops"}; !slices.Equal(fields, want) {
		t.Errorf("fields of the resource's marks: %v, want %v", fields, want)
	}
}

// TestListAfterScriptFlush: List reads runs with a script inside a pipeline, where EVALSHA
// cannot fall back to EVAL; after Redis lost its scripts (a restart, SCRIPT FLUSH) it must
// load the script again rather than fail.
func TestListAfterScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	defer rdb.Close()
	ctx := t.Context()
	a := redisstore.New(rdb, redisstore.Options{})
	defer a.Close()
	r, _, err := a.Create(ctx, runs.Run{Pipeline: "prod", Steps: []runs.Step{{Phase: runs.Phase1, Name: "api", Status: runs.StepPending}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	b := redisstore.New(rdb, redisstore.Options{}) // nothing cached: reads the whole run
	defer b.Close()
	// Each store twice: the second read of a page sends the reads of the runs the first
	// answered along with its index read, in the same pipeline.
	for _, s := range []runs.Store{a, b, a, b} {
		page, err := s.List(ctx, runs.Filter{})
		if err != nil || len(page.Runs) != 1 || page.Runs[0].ID != r.ID || len(page.Runs[0].Steps) != 1 {
			t.Fatalf("List after SCRIPT FLUSH: %+v, %v; want the run with its step", page, err)
		}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestListPolledAgain: a page read again sends the reads of the runs it answered last with
// its index read, so polling an unchanged page is one round trip; what changed in between
// (a run updated, one new, one gone) still shows, at the cost of a second.
func TestListPolledAgain(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	defer rdb.Close()
	trips := &roundTrips{}
	rdb.AddHook(trips)
	ctx := t.Context()
	s := redisstore.New(rdb, redisstore.Options{})
	defer s.Close()
	var created []runs.Run
	for range 3 {
		r, _, err := s.Create(ctx, runs.Run{Pipeline: "prod", Steps: []runs.Step{{Phase: runs.Phase1, Name: "api", Status: runs.StepPending}}})
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, r)
	}
	list := func(wantTrips int64, want ...runs.Run) { // wantTrips 0: not checked
		t.Helper()
		before := trips.n.Load()
		page, err := s.List(ctx, runs.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if n := trips.n.Load() - before; wantTrips > 0 && n != wantTrips {
			t.Errorf("List took %d round trips, want %d", n, wantTrips)
		}
		var got, wantIDs []string
		for i, r := range page.Runs {
			got = append(got, r.ID+" "+string(r.Status))
			if i < len(want) && r.Version != want[i].Version {
				t.Errorf("run %s at version %d, want %d", r.ID, r.Version, want[i].Version)
			}
		}
		for _, r := range want {
			wantIDs = append(wantIDs, r.ID+" "+string(r.Status))
		}
		if !slices.Equal(got, wantIDs) {
			t.Errorf("List = %v, want %v", got, wantIDs)
		}
	}
	a, b, c := created[0], created[1], created[2]
	list(0, c, b, a) // not counted: the first read also loads the script
	list(1, c, b, a)

	b, err := s.Update(ctx, b.ID, func(r *runs.Run) error { r.Status = runs.StatusPhase1; return nil })
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := s.Create(ctx, runs.Run{Pipeline: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	// Gone behind the store's back, index entries left: List skips it.
	if err := rdb.Del(ctx, redisstore.DefaultPrefix+"{runs}:run:"+a.ID).Err(); err != nil {
		t.Fatal(err)
	}
	list(2, d, c, b) // d is new to the page: a second round trip for it
	list(1, d, c, b)
}

// roundTrips counts the commands and pipelines a go-redis client sends.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestPruneBounded: 10 000 runs, pruned to the newest 500 after every 1 000, on a server of
// their own; the key count stops growing.
func TestPruneBounded(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { rdb.Close() })
	s := redisstore.New(rdb, redisstore.Options{})
	t.Cleanup(func() { s.Close() })
	runstest.PruneBounded(t, s, 10_000, 500, func() int64 {
		n, err := rdb.DBSize(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	})
}
