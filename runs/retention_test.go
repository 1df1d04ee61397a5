package runs_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
)

// TestPruneEvery: the first prune happens at once, a later one on the interval picks up
// runs that ended meanwhile, and PruneEvery returns when its context ends.
func TestPruneEvery(t *testing.T) {
	ctx := t.Context()
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), sqlitestore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	end := func(n int) {
		for range n {
			r, _, err := s.Create(ctx, runs.Run{Pipeline: "prod"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Update(ctx, r.ID, func(r *runs.Run) error { r.Status = runs.StatusFailed; return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	end(5)

	type outcome struct {
		n   int
		err error
	}
	reports := make(chan outcome)
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runs.PruneEvery(pctx, s, runs.Retention{MaxRuns: 1}, time.Millisecond, func(n int, err error) {
			select {
			case reports <- outcome{n, err}:
			case <-pctx.Done():
			}
		})
	}()
	if o := <-reports; o.n != 4 || o.err != nil {
		t.Fatalf("first prune: got %d deleted (err %v), want 4", o.n, o.err)
	}
	end(3) // the prunes on the interval delete the three older than the newest, in any split
	for total := 0; total < 3; {
		o := <-reports
		if o.err != nil {
			t.Fatal(o.err)
		}
		total += o.n
	}
	cancel()
	<-done
}
