package coolify_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/pacing"
)

// Two clients of one instance and token (two pipelines of a daemon) paced by the pool's one
// Pacer make three times the throttle's limit in calls, reads and writes mixed, and the
// fake's throttle (scaled to 20 per 300 ms to keep the test short) never answers 429.
func TestPacedClientsMeetTheThrottle(t *testing.T) {
	budget := pacing.Budget{Limit: 20, Window: 300 * time.Millisecond}
	e := setup(t, []coolifytest.Option{coolifytest.WithRateLimit(budget.Limit, budget.Window)})
	pool, err := pacing.NewLocalPool(budget, pacing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		c := newClient(t, e.srv, e.srv.Token, coolify.WithLimiter(pool.For(e.srv.URL, e.srv.Token)))
		wg.Go(func() {
			for i := range budget.Limit * 3 / 2 {
				var err error
				if i%3 == 0 {
					err = c.UpsertEnvs(t.Context(), coolify.AppRef(e.app.UUID), []coolify.EnvVar{{Key: "K", Value: "v"}})
				} else {
					_, err = c.GetApplication(t.Context(), e.app.UUID)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	n := 0
	for _, r := range e.srv.Requests() {
		if r.Status == http.StatusTooManyRequests {
			n++
		}
	}
	if n > 0 {
		t.Errorf("%d answers were 429 (of %d requests)", n, len(e.srv.Requests()))
	}
}

// recordingLimiter remembers the priority each attempt waited with.
type recordingLimiter struct {
	mu    sync.Mutex
	asked []outbound.Priority
}

func (l *recordingLimiter) Wait(_ context.Context, p outbound.Priority) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked = append(l.asked, p)
	return nil
}

func (l *recordingLimiter) take() []outbound.Priority {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.asked
	l.asked = nil
	return out
}

// Reads and cancels wait with priority, writes and deploys with normal priority unless the
// caller made them Urgent.
func TestCallPriorities(t *testing.T) {
	lim := &recordingLimiter{}
	// A manual clock: the deployment stays in progress until the test cancels it, however
	// slow the machine.
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := setup(t, []coolifytest.Option{coolifytest.WithClock(clock)}, coolify.WithLimiter(lim))
	ctx := context.Background()
	high, normal := outbound.PriorityHigh, outbound.PriorityNormal
	steps := []struct {
		name string
		do   func() error
		want outbound.Priority
	}{
		{"read", func() error { _, err := e.c.GetApplication(ctx, e.app.UUID); return err }, high},
		{"write", func() error { return e.c.SetImageTag(ctx, e.app.UUID, "v2") }, normal},
		{"urgent write", func() error { return e.c.SetImageTag(coolify.Urgent(ctx), e.app.UUID, "v1") }, high},
		{"deploy, then its status", func() error {
			d, err := e.c.Deploy(ctx, e.app.UUID, false)
			if err != nil {
				return err
			}
			if got := lim.take(); !slices.Contains(got, normal) {
				t.Errorf("deploy waited with %v, want normal priority", got)
			}
			_, err = e.c.GetDeployment(ctx, d.DeploymentUUID)
			if err == nil {
				err = e.c.CancelDeployment(ctx, d.DeploymentUUID)
			}
			return err
		}, high},
	}
	for _, s := range steps {
		lim.take()
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got := lim.take()
		if len(got) == 0 {
			t.Fatalf("%s: the limiter was not asked", s.name)
		}
		for _, p := range got {
			if p != s.want {
				t.Errorf("%s: waited with priority %d, want %d (all: %v)", s.name, p, s.want, got)
			}
		}
	}
}

// When Coolify's throttle answers 429 anyway (another tool spends the same user's budget;
// here the window is filled first), the pacer the clients share holds every call until
// the answer's Retry-After: the other client's calls wait for the window to end instead of
// each meeting a 429 of its own, and all of them go through after it.
func TestThrottleHoldsTheSharedPacer(t *testing.T) {
	const limit = 10
	e := setup(t, []coolifytest.Option{coolifytest.WithRateLimit(limit, time.Second)})
	pool, err := pacing.NewLocalPool(pacing.Budget{Limit: 100 * limit, Window: time.Second}, pacing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pacer := pool.For(e.srv.URL, e.srv.Token)
	noRetry := fastRetry
	noRetry.MaxRetries = 0
	a := newClient(t, e.srv, e.srv.Token, coolify.WithLimiter(pacer), coolify.WithRetry(noRetry))
	b := newClient(t, e.srv, e.srv.Token, coolify.WithLimiter(pacer))
	for range limit { // the window, spent
		if _, err := a.GetApplication(t.Context(), e.app.UUID); err != nil {
			t.Fatal(err)
		}
	}
	_, err = a.GetApplication(t.Context(), e.app.UUID)
	wantErr(t, err, coolify.ErrRateLimited)
	for i := range 3 {
		if _, err := b.GetApplication(t.Context(), e.app.UUID); err != nil {
			t.Fatalf("b's call %d: %v", i+1, err)
		}
	}
	if n := e.srv.Throttled(); n != 1 {
		t.Errorf("the throttle answered 429 %d times, want once: the first 429 holds the shared pacer", n)
	}
}
