package runstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

func pruner(t *testing.T, s runs.Store) runs.Pruner {
	t.Helper()
	return implements[runs.Pruner](t, s)
}

func endRun(t *testing.T, s runs.Store, id string) {
	t.Helper()
	_, err := s.Update(ctxFor(t), id, func(r *runs.Run) error { r.Status = runs.StatusSucceeded; return nil },
		runs.Event{Type: runs.EventRunSucceeded})
	if err != nil {
		t.Fatalf("end run %s: %v", id, err)
	}
}

// testPrune: the count and the age limit each delete the ended runs beyond them with their
// events and idempotency keys, and never a run that has not ended.
func testPrune(t *testing.T, open Opener) {
	s := open(t)
	p := pruner(t, s)
	ctx := ctxFor(t)
	now := time.Now().UTC()
	// Twelve runs an hour apart, oldest first; #0 and #5 never end; #1 has a key.
	var all []runs.Run
	for i := range 12 {
		in := runs.Run{Pipeline: "prod", Instance: "node-a", CreatedAt: now.Add(-time.Duration(12-i) * time.Hour)}
		if i == 1 {
			in.Trigger.IdempotencyKey, in.Trigger.IdempotencyHash = "api:old", "h"
		}
		r := mustCreate(t, s, in)
		if _, err := s.Append(ctx, r.ID, runs.Event{Type: runs.EventRunQueued}); err != nil {
			t.Fatal(err)
		}
		if i != 0 && i != 5 {
			endRun(t, s, r.ID)
		}
		all = append(all, r)
	}
	ids := func(is ...int) []string {
		var out []string
		for _, i := range is {
			out = append(out, all[i].ID)
		}
		return out
	}
	left := func() []string {
		t.Helper()
		page, err := s.List(ctx, runs.Filter{Limit: runs.MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range page.Runs {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}

	if n, err := p.Prune(ctx, runs.Retention{}); err != nil || n != 0 {
		t.Fatalf("Prune with no limits: deleted %d (err %v), want 0", n, err)
	}
	if _, err := p.Prune(ctx, runs.Retention{MaxRuns: -1}); !errors.Is(err, runs.ErrInvalid) {
		t.Errorf("Prune with a negative count: got %v, want ErrInvalid", err)
	}

	// Count: the 4 newest stay, and of the older ones the two that have not ended.
	n, err := p.Prune(ctx, runs.Retention{MaxRuns: 4})
	if err != nil || n != 6 {
		t.Fatalf("Prune(MaxRuns 4): deleted %d (err %v), want 6", n, err)
	}
	if got, want := left(), ids(0, 5, 8, 9, 10, 11); !slices.Equal(got, want) {
		t.Errorf("after Prune(MaxRuns 4): got runs %v, want %v", got, want)
	}
	gone := all[1].ID
	if _, err := s.Get(ctx, gone); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("Get of a pruned run: got %v, want ErrNotFound", err)
	}
	if _, err := s.Events(ctx, gone, 0, 0); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("Events of a pruned run: got %v, want ErrNotFound", err)
	}
	if un, err := s.Unfinished(ctx, "node-a"); err != nil || len(un) != 2 {
		t.Errorf("Unfinished after Prune: got %d runs (err %v), want the 2 that have not ended", len(un), err)
	}
	// The pruned run's key is free again.
	r, created, err := s.Create(ctx, runs.Run{Pipeline: "prod", Trigger: orchestrator.Trigger{IdempotencyKey: "api:old", IdempotencyHash: "h2"}})
	if err != nil || !created || r.ID == gone {
		t.Errorf("Create with a pruned run's key: got %q created=%v err=%v, want a new run", r.ID, created, err)
	}

	// Age: ended runs created more than 150 minutes ago go (#8 and #9); #0 and #5 stay.
	n, err = p.Prune(ctx, runs.Retention{MaxAge: 150 * time.Minute})
	if err != nil || n != 2 {
		t.Fatalf("Prune(MaxAge 150m): deleted %d (err %v), want 2", n, err)
	}
	want := append(ids(0, 5, 10, 11), r.ID)
	slices.Sort(want)
	if got := left(); !slices.Equal(got, want) {
		t.Errorf("after Prune(MaxAge 150m): got runs %v, want %v", got, want)
	}
	if n, err := p.Prune(ctx, runs.Retention{MaxRuns: 4, MaxAge: 150 * time.Minute}); err != nil || n != 0 {
		t.Errorf("Prune again: deleted %d (err %v), want 0", n, err)
	}
}

// PruneBounded shows a store bounded by retention: it creates total runs in ten rounds (each
// run with two events, an idempotency key, ended), prunes with Retention{MaxRuns: keep}
// (keep at most a round's worth) after every round, and checks after each prune that the store lists at most keep runs and that
// footprint, the backend's own measure of its size (pages, keys, bytes), after the last round
// is within 10% of what it was after the second (the first with a full history).
func PruneBounded(t *testing.T, s runs.Store, total, keep int, footprint func() int64) {
	p := pruner(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute) // -race on a busy machine
	defer cancel()
	const rounds = 10
	var base int64
	for round := range rounds {
		var wg sync.WaitGroup
		const workers = 4
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < total/rounds; i += workers {
					r, _, err := s.Create(ctx, runs.Run{Pipeline: "prod", Trigger: orchestrator.Trigger{
						IdempotencyKey: fmt.Sprintf("api:%d-%d", round, i), IdempotencyHash: "h"}})
					if err != nil {
						t.Errorf("Create: %v", err)
						return
					}
					if _, err := s.Update(ctx, r.ID, func(r *runs.Run) error { r.Status = runs.StatusSucceeded; return nil },
						runs.Event{Type: runs.EventRunQueued}, runs.Event{Type: runs.EventRunSucceeded}); err != nil {
						t.Errorf("Update: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if _, err := p.Prune(ctx, runs.Retention{MaxRuns: keep}); err != nil {
			t.Fatalf("round %d: Prune: %v", round, err)
		}
		page, err := s.List(ctx, runs.Filter{Limit: runs.MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(page.Runs); got > keep || page.Next != "" {
			t.Fatalf("round %d: %d runs listed (more: %v) after Prune(MaxRuns %d)", round, got, page.Next != "", keep)
		}
		size := footprint()
		t.Logf("round %d: %d runs created, footprint %d", round, (round+1)*(total/rounds), size)
		switch {
		case round == 1:
			base = size
		case round > 1 && size > base+base/10:
			t.Fatalf("round %d: footprint %d after %d runs, more than 10%% over %d after %d: the store grows", round,
				size, (round+1)*(total/rounds), base, 2*(total/rounds))
		}
	}
}
