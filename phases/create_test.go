package phases_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// unconfirmedCreates is the real run store, except that its first creates answer
// unavailable after writing, as the Redis store does when replicas did not confirm a
// creation within their timeout (locks.min_replicas): the run is written, the caller is told
// it may not be.
type unconfirmedCreates struct {
	store
	left atomic.Int32
}

func (s *unconfirmedCreates) Create(ctx context.Context, r runs.Run) (runs.Run, bool, error) {
	got, created, err := s.store.Create(ctx, r)
	if err == nil && s.left.Add(-1) >= 0 {
		return runs.Run{}, false, fmt.Errorf("create run: %w: not confirmed by enough replicas", runs.ErrUnavailable)
	}
	return got, created, err
}

// A creation written but not confirmed is confirmed by the engine's next try, not answered
// as an error with its run left queued under a daemon that never runs it; with an
// idempotency key too (the next try then finds the key naming its own run).
func TestUnconfirmedCreationIsConfirmedAndRun(t *testing.T) {
	for _, key := range []string{"", "ci-job-7"} {
		t.Run("key="+key, func(t *testing.T) {
			h := newHarness(t)
			wrapped := &unconfirmedCreates{store: h.store}
			wrapped.left.Store(2)
			h.store = wrapped
			h.start(h.pipelineYAML("prod", []string{"api"}, ""))
			r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2", IdempotencyKey: key}))
			if r.Status != runs.StatusSucceeded {
				t.Fatalf("status = %s (%s)", r.Status, r.Reason)
			}
			all, err := h.store.List(context.Background(), runs.Filter{Pipeline: "prod"})
			if err != nil {
				t.Fatal(err)
			}
			if len(all.Runs) != 1 {
				t.Errorf("the store holds %d runs of prod, want the one submitted: %+v", len(all.Runs), all.Runs)
			}
		})
	}
}
