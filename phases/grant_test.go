package phases_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A service step's lock grant is written while its first reads are made, and is in the
// store before its first change to Coolify: when the Phase-1 env write and the Phase-2 deploy
// arrive, the run record shows the step running under its fence with the lock held. The
// store writes grants slowly (slowGrants), so an engine that did not wait for that write
// would reach Coolify first.
func TestGrantIsStoredBeforeTheFirstChange(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			h := newHarnessOn(t, backend)
			type arrival struct {
				phase runs.Phase
				seen  chan struct{}
			}
			arrivals := make(chan arrival)
			target, err := url.Parse(h.coolify.URL)
			if err != nil {
				t.Fatal(err)
			}
			proxy := httputil.NewSingleHostReverseProxy(target)
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var phase runs.Phase
				switch {
				case r.Method == http.MethodPatch && r.URL.Path == "/api/v1/applications/"+uuidAPI+"/envs/bulk":
					phase = runs.Phase1
				case r.Method == http.MethodPost && r.URL.Path == "/api/v1/deploy":
					phase = runs.Phase2
				}
				if phase != "" {
					a := arrival{phase, make(chan struct{})}
					arrivals <- a
					<-a.seen
				}
				proxy.ServeHTTP(w, r)
			}))
			t.Cleanup(front.Close)
			h.coolifyURL = front.URL
			h.store = slowGrants{h.store}
			h.start(h.pipelineYAML("prod", []string{"api"}, ""))
			id := h.submit("prod", orchestrator.Trigger{Build: "7", ImageTag: "v7"})
			for range 2 {
				a := <-arrivals
				r, err := h.store.Get(context.Background(), id)
				close(a.seen)
				if err != nil {
					t.Fatal(err)
				}
				key := orchestrator.ServiceLockKey(uuidAPI)
				step := r.Step(a.phase, "api")
				if step == nil || step.Status != runs.StepRunning || step.Fence == 0 || !slices.Contains(r.HeldLocks, key) {
					t.Errorf("%s: at its first change the run shows step %+v, held locks %v; want the step running under a fence, %s held",
						a.phase, step, r.HeldLocks, key)
				}
			}
			if r := h.wait(id); r.Status != runs.StatusSucceeded {
				t.Fatalf("status = %s (%s)", r.Status, r.Reason)
			}
		})
	}
}

// slowGrants is a run store whose writes of a lock grant (an Update that gives a step its
// fence) take grantDelay longer, as on a loaded store: time enough for the engine's Coolify
// reads, so a change sent without waiting for the grant would arrive before it is stored.
type slowGrants struct{ store }

const grantDelay = 300 * time.Millisecond

func (s slowGrants) Update(ctx context.Context, id string, fn func(*runs.Run) error, evs ...runs.Event) (runs.Run, error) {
	cur, err := s.store.Get(ctx, id)
	if err != nil {
		return runs.Run{}, err
	}
	probe := cur.Clone()
	if fn(&probe) == nil && grants(cur, probe) {
		select {
		case <-time.After(grantDelay):
		case <-ctx.Done():
			return runs.Run{}, ctx.Err()
		}
	}
	return s.store.Update(ctx, id, fn, evs...)
}

// grants reports whether next gives a step of cur a fence it did not have.
func grants(cur, next runs.Run) bool {
	for i := range next.Steps {
		if next.Steps[i].Fence != 0 && (i >= len(cur.Steps) || cur.Steps[i].Fence == 0) {
			return true
		}
	}
	return false
}
