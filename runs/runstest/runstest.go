// Package runstest is the conformance suite every runs.Store backend passes: create and
// get, idempotent create under concurrency, list filters and pagination order, gap-free
// event sequences under concurrent writers, live follow, interrupted marking across a
// restart, webhook delivery de-duplication (runs.Deliveries), fenced resource marks
// (runs.MarkStore, each pipeline's mark on a resource included) and the outbox of Git host
// deployment statuses (runs.ReportStore: claims, leases, backoff, pruning) and the
// hash-chained audit log (runs.AuditLog: one chain under concurrent appends, pruning to an
// anchor), all of which
// every store must implement, and not-found errors. Run it with -race.
//
// A backend's test calls Run with a function that prepares an empty backend for one test
// and returns an Opener for it:
//
//	func TestStore(t *testing.T) {
//		runstest.Run(t, func(tb testing.TB) runstest.Opener {
//			dir := tb.TempDir()
//			return func(tb testing.TB) runs.Store { return open(tb, dir) }
//		})
//	}
package runstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Opener opens a store on one backend. Each call returns a new store on the same data, as a
// second daemon on the same backend or the same daemon after a restart would see it. The
// Opener closes the stores it opened when the test ends (closing twice must be harmless:
// tests also close stores themselves to simulate a restart).
type Opener func(tb testing.TB) runs.Store

// Run runs the suite. newBackend is called once per subtest and must return an Opener on
// a fresh, empty backend.
func Run(t *testing.T, newBackend func(tb testing.TB) Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"CreateGet", testCreateGet},
		{"CreateInvalid", testCreateInvalid},
		{"NotFound", testNotFound},
		{"Idempotency", testIdempotency},
		{"IdempotencyConcurrent", testIdempotencyConcurrent},
		{"IdempotencyKeyReused", testIdempotencyKeyReused},
		{"ListOrderAndPages", testListOrderAndPages},
		{"ListFilters", testListFilters},
		{"ListInvalid", testListInvalid},
		{"ListReadOnly", testListReadOnly},
		{"Update", testUpdate},
		{"UpdateConcurrent", testUpdateConcurrent},
		{"UpdateTwoStores", testUpdateTwoStores},
		{"StatusTwoStores", testStatusTwoStores},
		{"OwnershipEpoch", testOwnershipEpoch},
		{"UpdateStepsConcurrent", testUpdateStepsConcurrent},
		{"UpdateReshapesSteps", testUpdateReshapesSteps},
		{"UpdateEnded", testUpdateEnded},
		{"EventSeqConcurrent", testEventSeqConcurrent},
		{"EventsPaging", testEventsPaging},
		{"Subscribe", testSubscribe},
		{"Follow", testFollow},
		{"FollowEnded", testFollowEnded},
		{"FollowCanceled", testFollowCanceled},
		{"Unfinished", testUnfinished},
		{"SurvivesRestart", testSurvivesRestart},
		{"SeenDelivery", testSeenDelivery},
		{"SeenDeliveryConcurrent", testSeenDeliveryConcurrent},
		{"SeenDeliveryExpires", testSeenDeliveryExpires},
		{"Marks", testMarks},
		{"MarksConcurrent", testMarksConcurrent},
		{"Running", testRunning},
		{"PipelineMarks", testPipelineMarks},
		{"PipelineMarksRestore", testPipelineMarksRestore},
		{"PipelineMarksFenceBehind", testPipelineMarksFenceBehind},
		{"PipelineMarksConcurrent", testPipelineMarksConcurrent},
		{"Ping", testPing},
		{"Prune", testPrune},
	}
	tests = append(tests, reportTests...)
	tests = append(tests, auditTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newBackend(t))
		})
	}
}

// ctxFor returns a context that ends with the test or after 20 s, whichever is first, so a
// broken backend fails the test instead of hanging it.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// sample is a run with every field a store must keep.
func sample(pipeline string) runs.Run {
	return runs.Run{
		Pipeline: pipeline,
		Trigger: orchestrator.Trigger{
			Build: "1234", ImageTag: "v1.2.3", Commit: "abc123", AppVersion: "1.2.3",
			Params: map[string]string{"region": "eu", "канал": "beta"},
			By:     "api:ci",
		},
		Instance:  "node-a",
		HeldLocks: []string{"coolify:phase1"},
		Steps: []runs.Step{{
			Phase: runs.Phase1, Name: "api", UUID: "u-api", Status: runs.StepSynced,
			StartedAt: t0, EndedAt: t0.Add(1500 * time.Millisecond),
			LockKey: "coolify:u-api", LockWait: 250 * time.Millisecond, Fence: 42,
			Changes: runs.Changes{
				Env: []orchestrator.EnvChange{{Key: "DATABASE_URL", Action: orchestrator.EnvCreate},
					{Key: "FEATURE_X", Action: orchestrator.EnvUpdate, ValueChanged: true,
						Flags:   []orchestrator.FlagChange{{Name: "is_literal", Old: true, New: false}},
						Comment: &orchestrator.CommentChange{Old: "a", New: "b"}}},
				ImageTag: &orchestrator.TagChange{Old: "v1.2.2", New: "v1.2.3"},
			},
		}, {
			Phase: runs.PhaseMobile, Name: "version_state", Status: runs.StepPending,
			LockKey: "mobile:flagsmith:version_state",
			Changes: runs.Changes{Fields: []string{"android.min"}},
		}},
	}
}

func mustCreate(t *testing.T, s runs.Store, r runs.Run) runs.Run {
	t.Helper()
	got, created, err := s.Create(ctxFor(t), r)
	if err != nil {
		t.Fatalf("Create(%s): %v", r.Pipeline, err)
	}
	if !created {
		t.Fatalf("Create(%s): created = false for a new run", r.Pipeline)
	}
	return got
}

// sameJSON fails the test when got and want differ, showing both as JSON.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(g) != string(w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

func testCreateGet(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	in := sample("prod")
	before := time.Now().Add(-time.Second)
	r := mustCreate(t, s, in)
	if r.ID == "" {
		t.Error("Create: empty ID, want one generated")
	}
	if r.Status != runs.StatusQueued {
		t.Errorf("Create: status %q, want %q", r.Status, runs.StatusQueued)
	}
	if r.CreatedAt.Before(before) || r.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("Create: created_at %s, want about now", r.CreatedAt)
	}
	if r.Version != 1 || r.Epoch != 1 {
		t.Errorf("Create: version %d, epoch %d, want 1 and 1", r.Version, r.Epoch)
	}
	want := in.Clone()
	want.ID, want.Status, want.CreatedAt, want.Version, want.Epoch = r.ID, runs.StatusQueued, r.CreatedAt, 1, 1
	sameJSON(t, "Create result", r, want)

	got, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	sameJSON(t, "Get", got, want)

	// The store keeps no alias of the caller's maps and slices.
	in.Trigger.Params["region"] = "us"
	in.Steps[0].Changes.Env[0].Key = "CHANGED"
	in.Steps[0].Changes.Env[1].Flags[0].Name = "CHANGED"
	got, err = s.Get(ctx, r.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	sameJSON(t, "Get after the caller changed its copy", got, want)

	// A given ID and creation time are kept.
	in2 := sample("prod")
	in2.ID = "run-given-id"
	in2.CreatedAt = t0
	r2 := mustCreate(t, s, in2)
	if r2.ID != "run-given-id" || !r2.CreatedAt.Equal(t0) {
		t.Errorf("Create with ID and created_at: got %q at %s, want %q at %s", r2.ID, r2.CreatedAt, "run-given-id", t0)
	}
}

func testCreateInvalid(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	_, _, err := s.Create(ctx, runs.Run{})
	wantErr(t, "Create without pipeline", err, runs.ErrInvalid)
	_, _, err = s.Create(ctx, runs.Run{Pipeline: "p", Status: "bogus"})
	wantErr(t, "Create with unknown status", err, runs.ErrInvalid)
	_, _, err = s.Create(ctx, runs.Run{Pipeline: "p", Status: runs.StatusSucceeded})
	wantErr(t, "Create with a terminal status", err, runs.ErrInvalid)

	mustCreate(t, s, runs.Run{ID: "dup", Pipeline: "p"})
	_, _, err = s.Create(ctx, runs.Run{ID: "dup", Pipeline: "p"})
	wantErr(t, "Create with a taken ID", err, runs.ErrConflict)
}

func testNotFound(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	_, err := s.Get(ctx, "nope")
	wantErr(t, "Get", err, runs.ErrNotFound)
	_, err = s.Status(ctx, "nope")
	wantErr(t, "Status", err, runs.ErrNotFound)
	_, err = s.Owner(ctx, "nope")
	wantErr(t, "Owner", err, runs.ErrNotFound)
	_, err = s.Update(ctx, "nope", func(*runs.Run) error { return nil })
	wantErr(t, "Update", err, runs.ErrNotFound)
	_, err = s.Append(ctx, "nope", runs.Event{Type: runs.EventRunStarted})
	wantErr(t, "Append", err, runs.ErrNotFound)
	_, err = s.Events(ctx, "nope", 0, 0)
	wantErr(t, "Events", err, runs.ErrNotFound)
	err = runs.Follow(ctx, s, "nope", 0, func(runs.Event) error { return nil })
	wantErr(t, "Follow", err, runs.ErrNotFound)
}

func testIdempotency(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	in := runs.Run{Pipeline: "prod", Trigger: orchestrator.Trigger{Build: "1", By: "api:ci", IdempotencyKey: "k1"}}
	first := mustCreate(t, s, in)

	in.Trigger.Build = "2" // the same IdempotencyHash (here none) is the same request to the store
	again, created, err := s.Create(ctx, in)
	if err != nil {
		t.Fatalf("Create again: %v", err)
	}
	if created {
		t.Error("Create with a used key: created = true, want false")
	}
	sameJSON(t, "Create with a used key", again, first)

	// Keys are per pipeline.
	other := mustCreate(t, s, runs.Run{Pipeline: "staging", Trigger: orchestrator.Trigger{IdempotencyKey: "k1"}})
	if other.ID == first.ID {
		t.Error("same key on another pipeline returned the first pipeline's run")
	}
	// No key, no deduplication.
	a := mustCreate(t, s, runs.Run{Pipeline: "prod"})
	b := mustCreate(t, s, runs.Run{Pipeline: "prod"})
	if a.ID == b.ID {
		t.Error("two runs without a key got one ID")
	}
	// A key survives the run's end.
	if _, err := s.Update(ctx, first.ID, func(r *runs.Run) error { r.Status = runs.StatusSucceeded; return nil }); err != nil {
		t.Fatal(err)
	}
	again, created, err = s.Create(ctx, in)
	if err != nil || created || again.ID != first.ID {
		t.Errorf("Create with the key of an ended run: got %q created=%v err=%v, want %q created=false", again.ID, created, err, first.ID)
	}
}

// testIdempotencyKeyReused: a key used again with another request hash is refused naming
// the run it names, and writes nothing; the same hash still answers the run.
func testIdempotencyKeyReused(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	in := runs.Run{Pipeline: "prod", Trigger: orchestrator.Trigger{ImageTag: "v1", IdempotencyKey: "api:k", IdempotencyHash: "h1"}}
	first := mustCreate(t, s, in)

	other := in
	other.Trigger.ImageTag, other.Trigger.IdempotencyHash = "v2", "h2"
	_, created, err := s.Create(ctx, other)
	var kr *runs.KeyReusedError
	if !errors.As(err, &kr) || !errors.Is(err, runs.ErrKeyReused) || created {
		t.Fatalf("Create with a used key and another hash: got created=%v err=%v, want a *KeyReusedError", created, err)
	}
	if kr.RunID != first.ID || kr.Key != "api:k" || kr.Pipeline != "prod" {
		t.Errorf("KeyReusedError: got %+v, want run %s, key api:k, pipeline prod", *kr, first.ID)
	}
	page, err := s.List(ctx, runs.Filter{})
	if err != nil || len(page.Runs) != 1 {
		t.Errorf("after the refused Create: got %d runs (err %v), want 1", len(page.Runs), err)
	}
	// Without a hash is another request too (a key taken by a caller that sends none).
	none := in
	none.Trigger.IdempotencyHash = ""
	if _, _, err := s.Create(ctx, none); !errors.Is(err, runs.ErrKeyReused) {
		t.Errorf("Create with a used key and no hash: got %v, want ErrKeyReused", err)
	}
	again, created, err := s.Create(ctx, in)
	if err != nil || created || again.ID != first.ID {
		t.Errorf("Create with the same key and hash: got %q created=%v err=%v, want %q", again.ID, created, err, first.ID)
	}
}

func testIdempotencyConcurrent(t *testing.T, open Opener) {
	stores := []runs.Store{open(t), open(t)} // two daemons on one backend
	ctx := ctxFor(t)
	const n = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		created int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, c, err := stores[i%2].Create(ctx, runs.Run{Pipeline: "prod", Trigger: orchestrator.Trigger{Build: strconv.Itoa(i), IdempotencyKey: "same"}})
			if err != nil {
				t.Errorf("Create %d: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[r.ID]++
			if c {
				created++
			}
		}()
	}
	wg.Wait()
	if len(ids) != 1 || created != 1 {
		t.Errorf("%d concurrent Creates with one key: got %d distinct runs and %d created, want 1 and 1", n, len(ids), created)
	}
	page, err := stores[0].List(ctx, runs.Filter{Pipeline: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 1 {
		t.Errorf("List after concurrent Creates: %d runs, want 1", len(page.Runs))
	}
}

// seedList creates 23 runs over two pipelines and three statuses with distinct and tied
// creation times and returns them newest first.
func seedList(t *testing.T, s runs.Store) []runs.Run {
	t.Helper()
	var all []runs.Run
	for i := range 23 {
		in := runs.Run{
			Pipeline: []string{"prod", "staging"}[i%2],
			// Every third run shares its creation time with the one before it: ties are
			// broken by ID.
			CreatedAt: t0.Add(time.Duration(i-i/3) * time.Second),
			Trigger:   orchestrator.Trigger{Build: strconv.Itoa(i)},
		}
		r := mustCreate(t, s, in)
		switch i % 3 {
		case 1:
			r = mustUpdate(t, s, r.ID, func(r *runs.Run) error { r.Status = runs.StatusPhase1; return nil })
		case 2:
			r = mustUpdate(t, s, r.ID, func(r *runs.Run) error { r.Status = runs.StatusFailed; return nil })
		}
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b runs.Run) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		switch {
		case a.ID > b.ID:
			return -1
		case a.ID < b.ID:
			return 1
		}
		return 0
	})
	return all
}

func mustUpdate(t *testing.T, s runs.Store, id string, fn func(*runs.Run) error, evs ...runs.Event) runs.Run {
	t.Helper()
	r, err := s.Update(ctxFor(t), id, fn, evs...)
	if err != nil {
		t.Fatalf("Update(%s): %v", id, err)
	}
	return r
}

func names(rs []runs.Run) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Pipeline + "#" + r.Trigger.Build
	}
	return out
}

// listAll pages through f with the given page size.
func listAll(t *testing.T, s runs.Store, f runs.Filter) []runs.Run {
	t.Helper()
	var out []runs.Run
	for page := 0; ; page++ {
		p, err := s.List(ctxFor(t), f)
		if err != nil {
			t.Fatalf("List page %d: %v", page, err)
		}
		if f.Limit > 0 && len(p.Runs) > f.Limit {
			t.Fatalf("List page %d: %d runs, limit %d", page, len(p.Runs), f.Limit)
		}
		out = append(out, p.Runs...)
		if p.Next == "" {
			return out
		}
		if page > 100 {
			t.Fatal("List: more than 100 pages")
		}
		f.Cursor = p.Next
	}
}

func testListOrderAndPages(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	all := seedList(t, s)

	p, err := s.List(ctx, runs.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "List (one page)", names(p.Runs), names(all))
	if p.Next != "" {
		t.Errorf("List of everything: next cursor %q, want none", p.Next)
	}
	sameJSON(t, "List returns whole runs", p.Runs[0], all[0])

	for _, limit := range []int{1, 5, 7, 23} {
		got := listAll(t, s, runs.Filter{Limit: limit})
		sameJSON(t, fmt.Sprintf("List in pages of %d", limit), names(got), names(all))
	}

	// A run created after the first page does not shift the later pages.
	first, err := s.List(ctx, runs.Filter{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, runs.Run{Pipeline: "prod", Trigger: orchestrator.Trigger{Build: "new"}})
	rest := listAll(t, s, runs.Filter{Limit: 5, Cursor: first.Next})
	sameJSON(t, "pages after a concurrent create", names(append(first.Runs, rest...)), names(all))
}

func testListFilters(t *testing.T, open Opener) {
	s := open(t)
	all := seedList(t, s)
	filter := func(keep func(runs.Run) bool) []runs.Run {
		var out []runs.Run
		for _, r := range all {
			if keep(r) {
				out = append(out, r)
			}
		}
		return out
	}
	cases := []struct {
		name string
		f    runs.Filter
		want []runs.Run
	}{
		{"pipeline", runs.Filter{Pipeline: "prod", Limit: 4},
			filter(func(r runs.Run) bool { return r.Pipeline == "prod" })},
		{"status", runs.Filter{Status: []runs.Status{runs.StatusFailed}, Limit: 3},
			filter(func(r runs.Run) bool { return r.Status == runs.StatusFailed })},
		{"two statuses", runs.Filter{Status: []runs.Status{runs.StatusQueued, runs.StatusPhase1}, Limit: 4},
			filter(func(r runs.Run) bool { return !r.Status.Terminal() })},
		{"pipeline and status", runs.Filter{Pipeline: "staging", Status: []runs.Status{runs.StatusPhase1}, Limit: 2},
			filter(func(r runs.Run) bool { return r.Pipeline == "staging" && r.Status == runs.StatusPhase1 })},
		{"no match", runs.Filter{Pipeline: "nope"}, nil},
	}
	for _, tc := range cases {
		got := listAll(t, s, tc.f)
		sameJSON(t, "List by "+tc.name, names(got), names(tc.want))
	}

	// A status change moves the run between the status filters.
	r := all[0]
	mustUpdate(t, s, r.ID, func(r *runs.Run) error { r.Status = runs.StatusCanceled; return nil })
	got := listAll(t, s, runs.Filter{Status: []runs.Status{runs.StatusCanceled}})
	sameJSON(t, "List by status after an update", names(got), names([]runs.Run{r}))
	got = listAll(t, s, runs.Filter{Status: []runs.Status{r.Status}})
	if slices.ContainsFunc(got, func(x runs.Run) bool { return x.ID == r.ID }) {
		t.Errorf("List by status %s still holds run %s after it changed to canceled", r.Status, r.ID)
	}
}

func testListInvalid(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	_, err := s.List(ctx, runs.Filter{Cursor: "!!not-a-cursor"})
	wantErr(t, "List with a bad cursor", err, runs.ErrInvalid)
	_, err = s.List(ctx, runs.Filter{Cursor: "Zm9v"}) // valid base64, not a cursor
	wantErr(t, "List with a forged cursor", err, runs.ErrInvalid)
	_, err = s.List(ctx, runs.Filter{Limit: -1})
	wantErr(t, "List with a negative limit", err, runs.ErrInvalid)
	_, err = s.List(ctx, runs.Filter{Status: []runs.Status{"bogus"}})
	wantErr(t, "List with an unknown status", err, runs.ErrInvalid)
	p, err := s.List(ctx, runs.Filter{})
	if err != nil || len(p.Runs) != 0 || p.Next != "" {
		t.Errorf("List of an empty store: got %d runs, next %q, err %v; want none", len(p.Runs), p.Next, err)
	}
}

// testListReadOnly checks that a ReadOnly list answers what a plain one does, also for runs
// this store has cached and another store has changed since (a stale cached copy must not
// be answered), and that a plain list's runs stay the caller's own after a ReadOnly one.
func testListReadOnly(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := ctxFor(t)
	var ids []string
	for range 3 {
		ids = append(ids, mustCreate(t, a, sample("prod")).ID)
	}
	check := func(when string) {
		t.Helper()
		// ReadOnly first: a plain list would refresh a stale cached copy before it.
		shared, err := a.List(ctx, runs.Filter{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(shared) // before the caller changes anything
		if err != nil {
			t.Fatal(err)
		}
		plain, err := a.List(ctx, runs.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "ReadOnly list "+when, json.RawMessage(want), plain)
		// The plain list's runs are the caller's: changing them changes no later read.
		plain.Runs[0].Steps[0].Name = "changed by the caller"
		again, err := a.List(ctx, runs.Filter{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "ReadOnly list after the caller changed a plain list's run "+when, again, json.RawMessage(want))
	}
	check("of new runs")
	mustUpdate(t, a, ids[1], func(x *runs.Run) error { x.Steps[0].Error = "by this store"; return nil })
	check("after an update through this store")
	mustUpdate(t, b, ids[2], func(x *runs.Run) error { x.Steps[1].Status = runs.StepSkipped; return nil })
	check("after an update through another store")
	page, err := a.List(ctx, runs.Filter{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Runs {
		if r.ID == ids[2] && (r.Version != 2 || r.Steps[1].Status != runs.StepSkipped) {
			t.Errorf("ReadOnly list after another store's update: version %d, step status %s; want 2, skipped", r.Version, r.Steps[1].Status)
		}
	}
}

func testUpdate(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	r := mustCreate(t, s, sample("prod"))

	step := runs.Step{Phase: runs.Phase2, Name: "api", UUID: "u-api", Status: runs.StepRunning, StartedAt: t0, Fence: 43}
	got := mustUpdate(t, s, r.ID, func(x *runs.Run) error {
		x.Status = runs.StatusPhase2
		x.StartedAt = t0
		x.SetStep(step)
		// Attempts to change what cannot change are undone by the store.
		x.ID, x.Pipeline, x.Version = "other", "other", 99
		x.Trigger.Build = "forged"
		x.CreatedAt = t0
		return nil
	}, runs.Event{Type: runs.EventDeployStarted, Phase: runs.Phase2, Service: "api", Fence: 43})

	want := r.Clone()
	want.Status, want.StartedAt, want.Version = runs.StatusPhase2, t0, 2
	want.SetStep(step)
	sameJSON(t, "Update result", got, want)
	stored, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "Get after Update", stored, want)
	// Get's run is the caller's own: changing it changes neither the store nor the run the
	// next Update starts from.
	stored.Steps[0].Changes.Env[0].Key = "CHANGED"
	stored.Steps[1].Status = runs.StepFailed
	stored.HeldLocks[0] = "changed"
	if again, err := s.Get(ctx, r.ID); err != nil {
		t.Fatal(err)
	} else {
		sameJSON(t, "Get after the caller changed its copy", again, want)
	}
	evs, err := s.Events(ctx, r.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Seq != 1 || evs[0].Type != runs.EventDeployStarted || evs[0].RunID != r.ID || evs[0].At.IsZero() {
		t.Errorf("events after Update: got %+v, want one deploy.started with seq 1, run ID and time", evs)
	}

	// An error from fn writes nothing, neither run nor events.
	boom := errors.New("boom")
	_, err = s.Update(ctx, r.ID, func(x *runs.Run) error { x.Status = runs.StatusFailed; return boom }, runs.Event{Type: runs.EventRunFailed})
	wantErr(t, "Update with failing fn", err, boom)
	_, err = s.Update(ctx, r.ID, func(x *runs.Run) error { x.Status = "bogus"; return nil }, runs.Event{Type: runs.EventRunFailed})
	wantErr(t, "Update to an unknown status", err, runs.ErrInvalid)
	_, err = s.Update(ctx, r.ID, func(x *runs.Run) error { return nil }, runs.Event{})
	wantErr(t, "Update with an event without type", err, runs.ErrInvalid)
	stored, err = s.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "Get after failed Updates", stored, want)
	if evs, _ := s.Events(ctx, r.ID, 0, 0); len(evs) != 1 {
		t.Errorf("failed Updates appended events: %d events, want 1", len(evs))
	}
}

func testUpdateConcurrent(t *testing.T, open Opener) {
	stores := []runs.Store{open(t), open(t)}
	ctx := ctxFor(t)
	r := mustCreate(t, stores[0], runs.Run{Pipeline: "prod"})
	const n = 12
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("svc-%02d", i)
			_, err := stores[i%2].Update(ctx, r.ID, func(x *runs.Run) error {
				x.SetStep(runs.Step{Phase: runs.Phase1, Name: name, Status: runs.StepSynced})
				return nil
			}, runs.Event{Type: runs.EventServiceSynced, Service: name})
			if err != nil {
				t.Errorf("Update %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	got, err := stores[0].Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Steps) != n || got.Version != 1+n {
		t.Errorf("after %d concurrent step updates: %d steps at version %d, want %d steps at version %d (lost update)", n, len(got.Steps), got.Version, n, 1+n)
	}
	evs, err := stores[1].Events(ctx, r.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n {
		t.Errorf("after %d concurrent updates: %d events, want %d", n, len(evs), n)
	}
}

// testUpdateTwoStores alternates writers on two stores, so a store that remembers what it
// wrote last must notice the other's writes.
// testStatusTwoStores: Status reads the stored status, not a copy the store holds: a run
// another store moves on reads moved on here.
func testStatusTwoStores(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := ctxFor(t)
	r := mustCreate(t, a, runs.Run{Pipeline: "prod"})
	for _, want := range []runs.Status{runs.StatusPhase1, runs.StatusPhase2, runs.StatusSucceeded} {
		mustUpdate(t, a, r.ID, func(x *runs.Run) error { x.Status = want; return nil })
		if _, err := b.Get(ctx, r.ID); err != nil { // b holds the run decoded at this version
			t.Fatal(err)
		}
		for _, s := range []runs.Store{a, b} {
			if got, err := s.Status(ctx, r.ID); err != nil || got != want {
				t.Errorf("Status = %q, %v; want %q", got, err, want)
			}
		}
	}
}

// testOwnershipEpoch: a run is created at epoch 1; a takeover through another store (another
// daemon) advances it, and the first store's Owner sees that at once, though it holds the
// run decoded; no Update lowers it; Owner says when the run ended and who took it over.
func testOwnershipEpoch(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := ctxFor(t)
	r := mustCreate(t, a, runs.Run{Pipeline: "prod", Instance: "node-a"})
	if r.Epoch != 1 {
		t.Errorf("Create: epoch %d, want 1", r.Epoch)
	}
	want := runs.Ownership{Status: runs.StatusQueued, Instance: "node-a", Epoch: 1}
	if got, err := a.Owner(ctx, r.ID); err != nil || got != want {
		t.Errorf("Owner after Create = %+v, %v; want %+v", got, err, want)
	}
	mustUpdate(t, a, r.ID, func(x *runs.Run) error { x.Status = runs.StatusPhase1; return nil })
	if _, err := a.Owner(ctx, r.ID); err != nil { // a holds the run decoded at this version
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	mustUpdate(t, b, r.ID, func(x *runs.Run) error {
		x.Epoch, x.TakenOverBy, x.TakenOverAt = x.Epoch+1, "node-b", at
		return nil
	})
	want = runs.Ownership{Status: runs.StatusPhase1, Instance: "node-a", Epoch: 2, TakenOverBy: "node-b", TakenOverAt: at}
	for name, s := range map[string]runs.Store{"the first store": a, "the taker's store": b} {
		if got, err := s.Owner(ctx, r.ID); err != nil || got != want {
			t.Errorf("Owner through %s after the takeover = %+v, %v; want %+v", name, got, err, want)
		}
	}
	// A late writer that lowers the epoch (it read the run before the takeover) changes it
	// not: the epoch only grows.
	got := mustUpdate(t, a, r.ID, func(x *runs.Run) error { x.Epoch = 1; x.Reason = "late"; return nil })
	if got.Epoch != 2 || got.Reason != "late" {
		t.Errorf("Update lowering the epoch: epoch %d, reason %q; want 2, %q", got.Epoch, got.Reason, "late")
	}
	mustUpdate(t, b, r.ID, func(x *runs.Run) error { x.Status = runs.StatusInterrupted; return nil })
	if got, err := a.Owner(ctx, r.ID); err != nil || got.Status != runs.StatusInterrupted || got.Epoch != 2 {
		t.Errorf("Owner after the end = %+v, %v; want interrupted at epoch 2", got, err)
	}
}

func testUpdateTwoStores(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := ctxFor(t)
	r := mustCreate(t, a, runs.Run{Pipeline: "prod"})
	set := func(s runs.Store, name string) runs.Run {
		t.Helper()
		return mustUpdate(t, s, r.ID, func(x *runs.Run) error {
			x.SetStep(runs.Step{Phase: runs.Phase1, Name: name, Status: runs.StepSynced})
			return nil
		})
	}
	set(a, "one")
	set(b, "two")
	set(a, "three")
	got := set(b, "four")
	var steps []string
	for _, st := range got.Steps {
		steps = append(steps, st.Name)
	}
	if !slices.Equal(steps, []string{"one", "two", "three", "four"}) || got.Version != 5 {
		t.Errorf("alternating updates from two stores: steps %v at version %d, want [one two three four] at 5", steps, got.Version)
	}
	// A run ended through one store cannot be updated through the other.
	mustUpdate(t, a, r.ID, func(x *runs.Run) error { x.Status = runs.StatusFailed; return nil })
	_, err := b.Update(ctx, r.ID, func(x *runs.Run) error { x.Status = runs.StatusPhase2; return nil })
	wantErr(t, "Update through the other store after the run ended", err, runs.ErrEnded)
	// Nor revived after being marked interrupted by another instance.
	r2 := mustCreate(t, a, runs.Run{Pipeline: "prod", Instance: "node-x"})
	set2 := func(s runs.Store) error {
		_, err := s.Update(ctx, r2.ID, func(x *runs.Run) error { x.Status = runs.StatusPhase1; return nil })
		return err
	}
	if err := set2(a); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Update(ctx, r2.ID, func(x *runs.Run) error { x.Status = runs.StatusInterrupted; return nil }); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Update after another store marked the run interrupted", set2(a), runs.ErrEnded)
}

// testUpdateStepsConcurrent has writers on two stores each move their own step of one run
// through several states at once. Stores that write only the steps an Update changed must
// still lose nobody's write: every step ends in its writer's last state, read by a third
// store that has cached nothing.
func testUpdateStepsConcurrent(t *testing.T, open Opener) {
	stores := []runs.Store{open(t), open(t)}
	ctx := ctxFor(t)
	const services, rounds = 8, 5
	in := runs.Run{Pipeline: "prod"}
	for i := range services {
		in.SetStep(runs.Step{Phase: runs.Phase1, Name: fmt.Sprintf("svc-%02d", i), Status: runs.StepPending})
	}
	r := mustCreate(t, stores[0], in)
	var wg sync.WaitGroup
	for i := range services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("svc-%02d", i)
			for round := 1; round <= rounds; round++ {
				_, err := stores[(i+round)%2].Update(ctx, r.ID, func(x *runs.Run) error {
					st := x.Step(runs.Phase1, name)
					st.Status, st.Fence = runs.StepRunning, int64(round)
					st.Changes.Fields = append(st.Changes.Fields, strconv.Itoa(round))
					return nil
				})
				if err != nil {
					t.Errorf("Update %s round %d: %v", name, round, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got, err := open(t).Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 1+services*rounds {
		t.Errorf("version %d after %d updates, want %d", got.Version, services*rounds, 1+services*rounds)
	}
	if len(got.Steps) != services {
		t.Fatalf("%d steps, want %d", len(got.Steps), services)
	}
	for i, st := range got.Steps {
		want := runs.Step{Phase: runs.Phase1, Name: fmt.Sprintf("svc-%02d", i), Status: runs.StepRunning, Fence: rounds,
			Changes: runs.Changes{Fields: []string{"1", "2", "3", "4", "5"}}}
		sameJSON(t, "step "+want.Name+" after concurrent updates", st, want)
	}
}

// testUpdateReshapesSteps: fn may add, change, reorder and remove steps, and the store keeps
// exactly the steps fn left, as another store reads them.
func testUpdateReshapesSteps(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	step := func(name string) runs.Step {
		return runs.Step{Phase: runs.Phase1, Name: name, Status: runs.StepPending}
	}
	r := mustCreate(t, s, runs.Run{Pipeline: "prod", Steps: []runs.Step{step("a"), step("b"), step("c")}})
	check := func(what string, fn func(x *runs.Run), want ...string) {
		t.Helper()
		got := mustUpdate(t, s, r.ID, func(x *runs.Run) error { fn(x); return nil })
		stored, err := open(t).Get(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, what+": Get from another store", stored, got)
		var names []string
		for _, st := range stored.Steps {
			names = append(names, st.Name+"="+string(st.Status))
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s: steps %v, want %v", what, names, want)
		}
	}
	check("grow", func(x *runs.Run) { x.SetStep(step("d")) },
		"a=pending", "b=pending", "c=pending", "d=pending")
	check("swap", func(x *runs.Run) { x.Steps[0], x.Steps[3] = x.Steps[3], x.Steps[0] },
		"d=pending", "b=pending", "c=pending", "a=pending")
	check("shrink", func(x *runs.Run) { x.Steps = x.Steps[1:3]; x.Steps[1].Status = runs.StepSynced },
		"b=pending", "c=synced")
	check("empty", func(x *runs.Run) { x.Steps = nil })
	check("regrow", func(x *runs.Run) { x.Steps = []runs.Step{step("e")} }, "e=pending")
}

func testUpdateEnded(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	r := mustCreate(t, s, runs.Run{Pipeline: "prod"})
	mustUpdate(t, s, r.ID, func(x *runs.Run) error {
		x.Status = runs.StatusCanceled
		x.Reason = "canceled by api:ops"
		return nil
	}, runs.Event{Type: runs.EventRunCanceled})

	called := false
	_, err := s.Update(ctx, r.ID, func(x *runs.Run) error { called = true; x.Status = runs.StatusPhase1; return nil })
	wantErr(t, "Update of an ended run", err, runs.ErrEnded)
	if called {
		t.Error("Update of an ended run called fn")
	}
	// Appending to an ended run is allowed (late lock.released events).
	evs, err := s.Append(ctx, r.ID, runs.Event{Type: runs.EventLockReleased, LockKey: "coolify:phase1"})
	if err != nil || len(evs) != 1 || evs[0].Seq != 2 {
		t.Errorf("Append to an ended run: got %+v, %v; want one event with seq 2", evs, err)
	}
}

func testEventSeqConcurrent(t *testing.T, open Opener) {
	stores := []runs.Store{open(t), open(t)}
	ctx := ctxFor(t)
	r := mustCreate(t, stores[0], runs.Run{Pipeline: "prod"})
	const writers, perWriter = 6, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%2]
			for i := 0; i < perWriter; {
				batch := 1 + (i+w)%3
				if i+batch > perWriter {
					batch = perWriter - i
				}
				evs := make([]runs.Event, batch)
				for j := range evs {
					evs[j] = runs.Event{
						Type: runs.EventLockWaiting, Service: "w" + strconv.Itoa(w),
						Data: map[string]string{"i": strconv.Itoa(i + j)},
					}
				}
				var err error
				if w%2 == 0 {
					var got []runs.Event
					got, err = s.Append(ctx, r.ID, evs...)
					if err == nil && len(got) == batch {
						for j := 1; j < batch; j++ {
							if got[j].Seq != got[j-1].Seq+1 {
								t.Errorf("Append returned seqs %d, %d for one batch; want consecutive", got[j-1].Seq, got[j].Seq)
							}
						}
					}
				} else {
					_, err = s.Update(ctx, r.ID, func(*runs.Run) error { return nil }, evs...)
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				i += batch
			}
		}()
	}
	wg.Wait()

	evs, err := stores[0].Events(ctx, r.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != writers*perWriter {
		t.Fatalf("got %d events, want %d", len(evs), writers*perWriter)
	}
	next := map[string]int{}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d, want %d (gap or duplicate)", i, e.Seq, i+1)
		}
		if got := e.Data["i"]; got != strconv.Itoa(next[e.Service]) {
			t.Fatalf("writer %s: event %s at seq %d, want %d (order within a writer lost)", e.Service, got, e.Seq, next[e.Service])
		}
		next[e.Service]++
	}
}

func testEventsPaging(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	r := mustCreate(t, s, runs.Run{Pipeline: "prod"})
	if evs, err := s.Events(ctx, r.ID, 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("Events of a new run: %d events, err %v; want none", len(evs), err)
	}
	at := t0.Add(time.Minute)
	var in []runs.Event
	for i := range 10 {
		in = append(in, runs.Event{
			Type: runs.EventLockAcquired, At: at, Phase: runs.Phase1, Service: "api",
			LockKey: "coolify:u-api", Fence: int64(100 + i), Message: "acquired",
			Data: map[string]string{"waited_ms": strconv.Itoa(i)},
		})
	}
	got, err := s.Append(ctx, r.ID, in...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i].Seq, in[i].RunID = int64(i+1), r.ID
	}
	sameJSON(t, "Append result", got, in)
	all, err := s.Events(ctx, r.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "Events", all, in)
	page, err := s.Events(ctx, r.ID, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "Events after 3, limit 4", page, in[3:7])
	tail, err := s.Events(ctx, r.ID, 10, 0)
	if err != nil || len(tail) != 0 {
		t.Errorf("Events after the last: %d events, err %v; want none", len(tail), err)
	}
	_, err = s.Append(ctx, r.ID)
	if err != nil {
		t.Errorf("Append of nothing: %v", err)
	}
	_, err = s.Append(ctx, r.ID, runs.Event{Type: runs.EventLockReleased}, runs.Event{})
	wantErr(t, "Append with an event without type", err, runs.ErrInvalid)
	if all, _ := s.Events(ctx, r.ID, 0, 0); len(all) != 10 {
		t.Errorf("a refused batch appended events: %d, want 10", len(all))
	}
}

func testSubscribe(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	r := mustCreate(t, s, runs.Run{Pipeline: "prod"})
	other := mustCreate(t, s, runs.Run{Pipeline: "prod"})
	sub, err := s.Subscribe(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	if _, err := s.Append(ctx, other.ID, runs.Event{Type: runs.EventRunStarted}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, r.ID, runs.Event{Type: runs.EventRunStarted}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C():
	case <-ctx.Done():
		t.Fatal("no signal after Append")
	}
	mustUpdate(t, s, r.ID, func(*runs.Run) error { return nil }, runs.Event{Type: runs.EventPhaseStarted})
	select {
	case <-sub.C():
	case <-ctx.Done():
		t.Fatal("no signal after Update with events")
	}
	if err := sub.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func testFollow(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	r := mustCreate(t, s, runs.Run{Pipeline: "prod"})
	if _, err := s.Append(ctx, r.ID, runs.Event{Type: runs.EventRunQueued}, runs.Event{Type: runs.EventRunStarted}); err != nil {
		t.Fatal(err)
	}

	got := make(chan runs.Event)
	done := make(chan error, 1)
	go func() {
		// afterSeq 1: the client has seen run.queued already (SSE Last-Event-ID).
		done <- runs.Follow(ctx, s, r.ID, 1, func(e runs.Event) error {
			select {
			case got <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	next := func(want int64, typ runs.EventType) {
		t.Helper()
		select {
		case e := <-got:
			if e.Seq != want || e.Type != typ {
				t.Fatalf("Follow passed seq %d %s, want seq %d %s", e.Seq, e.Type, want, typ)
			}
		case err := <-done:
			t.Fatalf("Follow returned early: %v", err)
		case <-ctx.Done():
			t.Fatalf("Follow did not pass seq %d %s", want, typ)
		}
	}
	next(2, runs.EventRunStarted)

	// Live: each event is written only after the previous one was passed on, so it can only
	// arrive through the live path.
	if _, err := s.Append(ctx, r.ID, runs.Event{Type: runs.EventLockWaiting, LockKey: "coolify:phase1"}); err != nil {
		t.Fatal(err)
	}
	next(3, runs.EventLockWaiting)
	mustUpdate(t, s, r.ID, func(x *runs.Run) error { x.Status = runs.StatusPhase1; return nil },
		runs.Event{Type: runs.EventLockAcquired}, runs.Event{Type: runs.EventPhaseStarted})
	next(4, runs.EventLockAcquired)
	next(5, runs.EventPhaseStarted)
	mustUpdate(t, s, r.ID, func(x *runs.Run) error { x.Status = runs.StatusSucceeded; return nil },
		runs.Event{Type: runs.EventRunSucceeded})
	next(6, runs.EventRunSucceeded)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Follow after the run ended: %v, want nil", err)
		}
	case e := <-got:
		t.Errorf("Follow passed %+v after the end", e)
	case <-ctx.Done():
		t.Error("Follow did not return after the run ended")
	}
}

func testFollowEnded(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	r := mustCreate(t, s, runs.Run{Pipeline: "prod"})
	mustUpdate(t, s, r.ID, func(x *runs.Run) error { x.Status = runs.StatusFailed; return nil },
		runs.Event{Type: runs.EventRunStarted}, runs.Event{Type: runs.EventRunFailed, Message: "lock lost"})
	var seqs []int64
	err := runs.Follow(ctx, s, r.ID, 0, func(e runs.Event) error { seqs = append(seqs, e.Seq); return nil })
	if err != nil || !slices.Equal(seqs, []int64{1, 2}) {
		t.Errorf("Follow of an ended run: passed %v, err %v; want [1 2], nil", seqs, err)
	}
	// An error from fn stops Follow and comes back as is.
	stop := errors.New("client went away")
	err = runs.Follow(ctx, s, r.ID, 0, func(runs.Event) error { return stop })
	if err != stop {
		t.Errorf("Follow with failing fn: %v, want %v", err, stop)
	}
}

func testFollowCanceled(t *testing.T, open Opener) {
	s := open(t)
	r := mustCreate(t, s, runs.Run{Pipeline: "prod"})
	ctx, cancel := context.WithCancel(ctxFor(t))
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- runs.Follow(ctx, s, r.ID, 0, func(runs.Event) error { close(started); return nil })
	}()
	if _, err := s.Append(ctx, r.ID, runs.Event{Type: runs.EventRunQueued}); err != nil {
		t.Fatal(err)
	}
	<-started // Follow is waiting for more
	cancel()
	select {
	case err := <-done:
		wantErr(t, "Follow after cancel", err, context.Canceled)
	case <-ctxFor(t).Done():
		t.Fatal("Follow did not return after its context was canceled")
	}
}

func testUnfinished(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxFor(t)
	mk := func(owner string, status runs.Status, at time.Time) runs.Run {
		r := mustCreate(t, s, runs.Run{Pipeline: "prod", CreatedAt: at, Instance: owner})
		return mustUpdate(t, s, r.ID, func(x *runs.Run) error { x.Status = status; return nil })
	}
	a1 := mk("node-a", runs.StatusPhase2, t0.Add(2*time.Second))
	a0 := mk("node-a", runs.StatusQueued, t0.Add(time.Second))
	mk("node-a", runs.StatusSucceeded, t0)
	b := mk("node-b", runs.StatusPhase1, t0)
	mk("node-b", runs.StatusInterrupted, t0.Add(time.Second))
	ids := func(rs []runs.Run, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	if got, want := ids(s.Unfinished(ctx, "node-a")), []string{a0.ID, a1.ID}; !slices.Equal(got, want) {
		t.Errorf("Unfinished(node-a) = %v, want %v (oldest first)", got, want)
	}
	if got, want := ids(s.Unfinished(ctx, "")), []string{b.ID, a0.ID, a1.ID}; !slices.Equal(got, want) {
		t.Errorf("Unfinished(every owner) = %v, want %v (oldest first)", got, want)
	}
	if got := ids(s.Unfinished(ctx, "node-c")); len(got) != 0 {
		t.Errorf("Unfinished(node-c) = %v, want none", got)
	}
	mustUpdate(t, s, a1.ID, func(x *runs.Run) error { x.Status = runs.StatusInterrupted; return nil })
	if got, want := ids(s.Unfinished(ctx, "node-a")), []string{a0.ID}; !slices.Equal(got, want) {
		t.Errorf("Unfinished(node-a) after one ended = %v, want %v", got, want)
	}
}

func testSurvivesRestart(t *testing.T, open Opener) {
	s1 := open(t)
	ctx := ctxFor(t)
	r := mustCreate(t, s1, runs.Run{Pipeline: "prod", Instance: "node-a", Trigger: orchestrator.Trigger{IdempotencyKey: "k"}})
	r = mustUpdate(t, s1, r.ID, func(x *runs.Run) error {
		x.Status, x.HeldLocks = runs.StatusPhase1, []string{"coolify:phase1"}
		return nil
	}, runs.Event{Type: runs.EventLockAcquired, LockKey: "coolify:phase1", Fence: 7})
	if _, err := deliveries(t, s1).SeenDelivery(ctx, "github:d1", time.Hour); err != nil {
		t.Fatal(err)
	}
	mark := runs.Mark{UUID: "u-api", RunID: r.ID, Fence: 7, Phase: runs.Phase1, At: t0}
	if _, err := markStore(t, s1).PutMark(ctx, mark); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s2 := open(t)
	got, err := s2.Get(ctx, r.ID)
	if err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	sameJSON(t, "run after restart", got, r)
	again, created, err := s2.Create(ctx, runs.Run{Pipeline: "prod", Trigger: orchestrator.Trigger{IdempotencyKey: "k"}})
	if err != nil || created || again.ID != r.ID {
		t.Errorf("idempotent Create after restart: got %q created=%v err=%v, want %q", again.ID, created, err, r.ID)
	}
	if seen, err := deliveries(t, s2).SeenDelivery(ctx, "github:d1", time.Hour); err != nil || !seen {
		t.Errorf("SeenDelivery after restart: %v, %v; want true", seen, err)
	}
	if got, err := markStore(t, s2).GetMark(ctx, "u-api"); err != nil || got != mark {
		t.Errorf("GetMark after restart: %+v, %v; want %+v", got, err, mark)
	}
	unfinished, err := s2.Unfinished(ctx, "node-a")
	if err != nil || len(unfinished) != 1 || unfinished[0].ID != r.ID {
		t.Fatalf("Unfinished after restart: %d runs, err %v; want run %s", len(unfinished), err, r.ID)
	}
	if _, err := s2.Update(ctx, r.ID, func(x *runs.Run) error { x.Status = runs.StatusInterrupted; return nil },
		runs.Event{Type: runs.EventRunInterrupted}); err != nil {
		t.Fatal(err)
	}
	evs, err := s2.Events(ctx, r.ID, 0, 0)
	if err != nil || len(evs) != 2 || evs[1].Seq != 2 || evs[1].Type != runs.EventRunInterrupted {
		t.Errorf("events after restart: %+v, %v; want lock.acquired then run.interrupted", evs, err)
	}
}

// implements returns s as the contract T every store must implement besides runs.Store
// (runs.MarkStore, runs.Pruner, runs.Deliveries), failing the test if it does not.
func implements[T any](t *testing.T, s runs.Store) T {
	t.Helper()
	x, ok := s.(T)
	if !ok {
		t.Fatalf("%T does not implement %T", s, (*T)(nil))
	}
	return x
}

func deliveries(t *testing.T, s runs.Store) runs.Deliveries {
	t.Helper()
	return implements[runs.Deliveries](t, s)
}

func testSeenDelivery(t *testing.T, open Opener) {
	s := deliveries(t, open(t))
	ctx := ctxFor(t)
	for i, want := range []bool{false, true, true} {
		seen, err := s.SeenDelivery(ctx, "github:abc", time.Hour)
		if err != nil || seen != want {
			t.Errorf("SeenDelivery call %d: %v, %v; want %v", i+1, seen, err, want)
		}
	}
	if seen, err := s.SeenDelivery(ctx, "gitlab:abc", time.Hour); err != nil || seen {
		t.Errorf("SeenDelivery of another ID: %v, %v; want false", seen, err)
	}
	_, err := s.SeenDelivery(ctx, "", time.Hour)
	wantErr(t, "SeenDelivery without ID", err, runs.ErrInvalid)
	_, err = s.SeenDelivery(ctx, "x", 0)
	wantErr(t, "SeenDelivery without TTL", err, runs.ErrInvalid)
}

func testSeenDeliveryConcurrent(t *testing.T, open Opener) {
	stores := []runs.Deliveries{deliveries(t, open(t)), deliveries(t, open(t))}
	ctx := ctxFor(t)
	const n = 16
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fresh int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen, err := stores[i%2].SeenDelivery(ctx, "github:same", time.Hour)
			if err != nil {
				t.Errorf("SeenDelivery: %v", err)
				return
			}
			if !seen {
				mu.Lock()
				fresh++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if fresh != 1 {
		t.Errorf("%d concurrent SeenDelivery calls with one ID: %d said new, want 1", n, fresh)
	}
}

func testSeenDeliveryExpires(t *testing.T, open Opener) {
	s := deliveries(t, open(t))
	ctx := ctxFor(t)
	const ttl = 50 * time.Millisecond
	if seen, err := s.SeenDelivery(ctx, "github:short", ttl); err != nil || seen {
		t.Fatalf("first SeenDelivery: %v, %v; want false", seen, err)
	}
	// Expiry is the behaviour under test, so time has to pass; nothing races here.
	time.Sleep(3 * ttl)
	if seen, err := s.SeenDelivery(ctx, "github:short", time.Hour); err != nil || seen {
		t.Errorf("SeenDelivery after the TTL: %v, %v; want false (expired)", seen, err)
	}
	if seen, err := s.SeenDelivery(ctx, "github:short", time.Hour); err != nil || !seen {
		t.Errorf("SeenDelivery right after re-recording: %v, %v; want true", seen, err)
	}
}

func testPing(t *testing.T, open Opener) {
	s := open(t)
	if err := s.Ping(ctxFor(t)); err != nil {
		t.Errorf("Ping: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Ping(ctxFor(t)); err == nil {
		t.Error("Ping after Close: nil, want an error")
	}
}

func markStore(t *testing.T, s runs.Store) runs.MarkStore {
	t.Helper()
	return implements[runs.MarkStore](t, s)
}

func testMarks(t *testing.T, open Opener) {
	ms := markStore(t, open(t))
	ctx := ctxFor(t)
	_, err := ms.GetMark(ctx, "u-api")
	wantErr(t, "GetMark of an unmarked resource", err, runs.ErrNotFound)
	_, err = ms.PutMark(ctx, runs.Mark{RunID: "r1", Fence: 1})
	wantErr(t, "PutMark without uuid", err, runs.ErrInvalid)

	m1 := runs.Mark{UUID: "u-api", RunID: "r1", Fence: 10, Phase: runs.Phase1, At: t0}
	got, err := ms.PutMark(ctx, m1)
	if err != nil {
		t.Fatalf("PutMark: %v", err)
	}
	sameJSON(t, "PutMark result", got, m1)
	// The same fence again (Phase 2 of the same lease, or a retry) is written.
	m1b := m1
	m1b.Phase, m1b.At = runs.Phase2, t0.Add(time.Second)
	if _, err := ms.PutMark(ctx, m1b); err != nil {
		t.Errorf("PutMark with an equal fence: %v", err)
	}
	// A newer run under a newer fence takes over; its build, pipeline, creation time and
	// rollback flag are kept for the stale-build guard.
	m2 := runs.Mark{UUID: "u-api", RunID: "r2", Fence: 11, Phase: runs.Phase1, At: t0.Add(2 * time.Second),
		Pipeline: "prod", Build: "42", RunCreated: t0, Rollback: true}
	if _, err := ms.PutMark(ctx, m2); err != nil {
		t.Fatalf("PutMark with a higher fence: %v", err)
	}
	// A late writer with an older fence is refused and told who is there.
	cur, err := ms.PutMark(ctx, m1)
	wantErr(t, "PutMark with a lower fence", err, runs.ErrFenceBehind)
	sameJSON(t, "current mark returned with ErrFenceBehind", cur, m2)
	got, err = ms.GetMark(ctx, "u-api")
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "GetMark", got, m2)
	if _, err := ms.GetMark(ctx, "u-web"); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("GetMark of another resource: %v, want ErrNotFound", err)
	}
}

func testMarksConcurrent(t *testing.T, open Opener) {
	stores := []runs.MarkStore{markStore(t, open(t)), markStore(t, open(t))}
	ctx := ctxFor(t)
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := stores[i%2].PutMark(ctx, runs.Mark{UUID: "u-api", RunID: "r" + strconv.Itoa(i), Fence: int64(i + 1)})
			if err != nil && !errors.Is(err, runs.ErrFenceBehind) {
				t.Errorf("PutMark %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	got, err := stores[0].GetMark(ctx, "u-api")
	if err != nil {
		t.Fatal(err)
	}
	if got.Fence != n || got.RunID != "r"+strconv.Itoa(n-1) {
		t.Errorf("after %d concurrent PutMarks: mark of %s at fence %d, want r%d at fence %d", n, got.RunID, got.Fence, n-1, n)
	}
}

// pipelineMark is the mark run id of pipeline p records on u-api at fence f for build b.
func pipelineMark(p, id, b string, f int64) runs.Mark {
	return runs.Mark{UUID: "u-api", RunID: id, Fence: f, Phase: runs.Phase1, At: t0.Add(time.Duration(f) * time.Second),
		Pipeline: p, Build: b, RunCreated: t0.Add(time.Duration(f) * time.Minute)}
}

// wantPipelineMarks checks what ms says of u-api: its mark, and each pipeline's mark
// (PipelineMark of each pipeline of want, and of one that has none; PipelineMarks).
func wantPipelineMarks(t *testing.T, what string, ms runs.MarkStore, mark runs.Mark, want ...runs.Mark) {
	t.Helper()
	ctx := ctxFor(t)
	got, err := ms.GetMark(ctx, "u-api")
	if err != nil {
		t.Fatalf("%s: GetMark: %v", what, err)
	}
	sameJSON(t, what+": GetMark", got, mark)
	for _, w := range want {
		got, err := ms.PipelineMark(ctx, "u-api", w.Pipeline)
		if err != nil {
			t.Errorf("%s: PipelineMark(%s): %v, want build %s of run %s", what, w.Pipeline, err, w.Build, w.RunID)
			continue
		}
		sameJSON(t, what+": PipelineMark("+w.Pipeline+")", got, w)
	}
	_, err = ms.PipelineMark(ctx, "u-api", "never")
	wantErr(t, what+": PipelineMark of a pipeline that never wrote", err, runs.ErrNotFound)
	all, err := ms.PipelineMarks(ctx, "u-api")
	if err != nil {
		t.Fatalf("%s: PipelineMarks: %v", what, err)
	}
	sameJSON(t, what+": PipelineMarks", all, want)
}

// Each pipeline that writes a resource keeps its own mark there, whatever other pipelines
// write after it: the stale-build guard compares a run with its own pipeline's mark.
func testPipelineMarks(t *testing.T, open Opener) {
	ms, other := markStore(t, open(t)), markStore(t, open(t))
	ctx := ctxFor(t)
	if all, err := ms.PipelineMarks(ctx, "u-api"); err != nil || len(all) != 0 {
		t.Errorf("PipelineMarks of an unmarked resource: %+v, %v; want none", all, err)
	}
	_, err := ms.PipelineMark(ctx, "u-api", "late")
	wantErr(t, "PipelineMark of an unmarked resource", err, runs.ErrNotFound)

	late43 := pipelineMark("late", "r43", "43", 10)
	if _, err := ms.PutMark(ctx, late43); err != nil {
		t.Fatal(err)
	}
	wantPipelineMarks(t, "after late's build 43", other, late43, late43)
	ops7 := pipelineMark("ops", "r7", "7", 11)
	if _, err := other.PutMark(ctx, ops7); err != nil {
		t.Fatal(err)
	}
	wantPipelineMarks(t, "after ops' build 7", ms, ops7, late43, ops7)
	// Phase 2 of the same run, at its own fence: the pipeline's mark follows.
	ops7d := ops7
	ops7d.Fence, ops7d.Phase = 12, runs.Phase2
	if _, err := ms.PutMark(ctx, ops7d); err != nil {
		t.Fatal(err)
	}
	wantPipelineMarks(t, "after ops' deploy of build 7", other, ops7d, late43, ops7d)
	// A mark naming no pipeline (a stand-in, a test) keeps nobody's mark but the resource's.
	anon := runs.Mark{UUID: "u-api", RunID: "intruder", Fence: 13, Phase: runs.Phase2, At: t0}
	if _, err := ms.PutMark(ctx, anon); err != nil {
		t.Fatal(err)
	}
	wantPipelineMarks(t, "after a mark of no pipeline", other, anon, late43, ops7d)
	if all, err := ms.PipelineMarks(ctx, "u-web"); err != nil || len(all) != 0 {
		t.Errorf("PipelineMarks of another resource: %+v, %v; want none", all, err)
	}
}

// RestoreMark puts the restoring pipeline's mark back as it was before the run (or removes
// it), records the resource's mark under the restoring run's name, and leaves the other
// pipelines' marks alone.
func testPipelineMarksRestore(t *testing.T, open Opener) {
	ms := markStore(t, open(t))
	ctx := ctxFor(t)
	_, err := ms.RestoreMark(ctx, runs.Mark{UUID: "u-api", RunID: "r1", Fence: 1}, "", nil)
	wantErr(t, "RestoreMark without pipeline", err, runs.ErrInvalid)

	late43 := pipelineMark("late", "r43", "43", 10)
	ops7 := pipelineMark("ops", "r7", "7", 11)
	late44 := pipelineMark("late", "r44", "44", 12)
	for _, m := range []runs.Mark{late43, ops7, late44} {
		if _, err := ms.PutMark(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// Build 44 fails and restores: the service carries ops' build 7 again, under run r44's
	// name (its restore wrote last); late's own mark is build 43 of run r43 again.
	back := ops7
	back.RunID, back.Fence, back.At = "r44", 13, t0.Add(time.Hour)
	got, err := ms.RestoreMark(ctx, back, "late", &late43)
	if err != nil {
		t.Fatalf("RestoreMark: %v", err)
	}
	sameJSON(t, "RestoreMark result", got, back)
	wantPipelineMarks(t, "after late's build 44 restored", ms, back, late43, ops7)

	// web's first build on the resource fails and restores: web has no mark there again,
	// and the service carries ops' build 7, now under run r1's name.
	web1 := pipelineMark("web", "r1", "1", 14)
	if _, err := ms.PutMark(ctx, web1); err != nil {
		t.Fatal(err)
	}
	wantPipelineMarks(t, "after web's build 1", ms, web1, late43, ops7, web1)
	back.RunID, back.Fence, back.At = "r1", 15, t0.Add(2*time.Hour)
	if _, err := ms.RestoreMark(ctx, back, "web", nil); err != nil {
		t.Fatalf("RestoreMark to none: %v", err)
	}
	wantPipelineMarks(t, "after web's build 1 restored to none", ms, back, late43, ops7)
}

// A write refused for its fence writes no pipeline's mark either, nor does a refused
// restore put one back or remove one.
func testPipelineMarksFenceBehind(t *testing.T, open Opener) {
	ms := markStore(t, open(t))
	ctx := ctxFor(t)
	late43 := pipelineMark("late", "r43", "43", 10)
	ops7 := pipelineMark("ops", "r7", "7", 20)
	for _, m := range []runs.Mark{late43, ops7} {
		if _, err := ms.PutMark(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := ms.PutMark(ctx, pipelineMark("late", "r44", "44", 15))
	wantErr(t, "PutMark of a pipeline with a lower fence", err, runs.ErrFenceBehind)
	sameJSON(t, "current mark returned with ErrFenceBehind", cur, ops7)
	_, err = ms.PutMark(ctx, pipelineMark("new", "r1", "1", 15))
	wantErr(t, "PutMark of a new pipeline with a lower fence", err, runs.ErrFenceBehind)
	back := late43
	back.RunID, back.Fence = "r45", 19
	_, err = ms.RestoreMark(ctx, back, "ops", nil)
	wantErr(t, "RestoreMark to none with a lower fence", err, runs.ErrFenceBehind)
	_, err = ms.RestoreMark(ctx, back, "late", &ops7)
	wantErr(t, "RestoreMark with a lower fence", err, runs.ErrFenceBehind)
	wantPipelineMarks(t, "after the refused writes", ms, ops7, late43, ops7)
}

// Writes of two pipelines through two stores at once: each pipeline's mark is its accepted
// write with the highest fence, and a refused write changed nothing.
func testPipelineMarksConcurrent(t *testing.T, open Opener) {
	stores := []runs.MarkStore{markStore(t, open(t)), markStore(t, open(t))}
	ctx := ctxFor(t)
	const n = 24
	pipelines := []string{"late", "ops", "web"}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted = map[string]int64{}
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := pipelines[i%len(pipelines)]
			_, err := stores[i%2].PutMark(ctx, pipelineMark(p, "r"+strconv.Itoa(i), strconv.Itoa(i), int64(i+1)))
			switch {
			case err == nil:
				mu.Lock()
				accepted[p] = max(accepted[p], int64(i+1))
				mu.Unlock()
			case !errors.Is(err, runs.ErrFenceBehind):
				t.Errorf("PutMark %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	for _, p := range pipelines {
		got, err := stores[1].PipelineMark(ctx, "u-api", p)
		switch {
		case accepted[p] == 0:
			wantErr(t, "PipelineMark of "+p+", none of whose writes was accepted", err, runs.ErrNotFound)
		case err != nil:
			t.Errorf("PipelineMark(%s): %v", p, err)
		case got.Fence != accepted[p]:
			t.Errorf("after %d concurrent PutMarks: %s's mark of %s at fence %d, want fence %d (its accepted write with the highest fence)",
				n, p, got.RunID, got.Fence, accepted[p])
		}
	}
	if got, err := stores[0].GetMark(ctx, "u-api"); err != nil || got.Fence != n {
		t.Errorf("after %d concurrent PutMarks: mark at fence %d (%v), want %d", n, got.Fence, err, n)
	}
}

// LegacyMark is a mark of pipeline "late" on resource u-legacy as builds before pipeline
// marks stored it: a backend's upgrade test stores it in the old form, by hand (the
// resource's mark alone), and then calls CheckLegacyMark.
func LegacyMark() runs.Mark {
	return runs.Mark{UUID: "u-legacy", RunID: "r43", Fence: 10, Phase: runs.Phase2, At: t0, Pipeline: "late", Build: "43", RunCreated: t0}
}

// CheckLegacyMark checks that LegacyMark, stored in a backend's old form, stands for its
// pipeline's mark, and that after another pipeline's mark (which replaces it as the
// resource's mark) and a restore of a third pipeline's, its pipeline still has it: an upgrade
// loses no pipeline's history.
func CheckLegacyMark(t *testing.T, ms runs.MarkStore) {
	t.Helper()
	ctx := ctxFor(t)
	old := LegacyMark()
	got, err := ms.PipelineMark(ctx, old.UUID, "late")
	if err != nil {
		t.Fatalf("PipelineMark of a mark in the old form: %v", err)
	}
	sameJSON(t, "PipelineMark of a mark in the old form", got, old)
	_, err = ms.PipelineMark(ctx, old.UUID, "ops")
	wantErr(t, "PipelineMark of another pipeline than the old mark's", err, runs.ErrNotFound)
	all, err := ms.PipelineMarks(ctx, old.UUID)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "PipelineMarks of a mark in the old form", all, []runs.Mark{old})

	ops7 := runs.Mark{UUID: old.UUID, RunID: "r7", Fence: 11, Phase: runs.Phase1, At: t0, Pipeline: "ops", Build: "7"}
	if _, err := ms.PutMark(ctx, ops7); err != nil {
		t.Fatal(err)
	}
	got, err = ms.PipelineMark(ctx, old.UUID, "late")
	if err != nil {
		t.Fatalf("PipelineMark of the old mark's pipeline after another pipeline's mark: %v", err)
	}
	sameJSON(t, "PipelineMark of the old mark's pipeline after another pipeline's mark", got, old)
	web1 := runs.Mark{UUID: old.UUID, RunID: "r1", Fence: 12, Phase: runs.Phase1, At: t0, Pipeline: "web", Build: "1"}
	if _, err := ms.PutMark(ctx, web1); err != nil {
		t.Fatal(err)
	}
	back := ops7
	back.RunID, back.Fence = "r1", 13
	if _, err := ms.RestoreMark(ctx, back, "web", nil); err != nil {
		t.Fatal(err)
	}
	all, err = ms.PipelineMarks(ctx, old.UUID)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "PipelineMarks after other pipelines wrote", all, []runs.Mark{old, ops7})
}

// LegacyRun is a run as an older build would have stored it whole (version 3, two steps,
// owned by node-a): a backend's migration test stores it in the old layout, by hand, and
// then calls CheckLegacyRun.
func LegacyRun() runs.Run {
	r := sample("legacy")
	r.ID = "01KJMMA2G0LEGACYRUN0000000"
	r.CreatedAt = t0
	r.Status = runs.StatusPhase1
	r.Version = 3
	return r
}

// CheckLegacyRun checks that LegacyRun, stored in a backend's old layout, reads the same
// through Get, List and Unfinished, and that Updates of it (which move it to the new layout)
// keep every step, as a store that has cached nothing reads it.
func CheckLegacyRun(t *testing.T, open Opener) {
	t.Helper()
	ctx := ctxFor(t)
	want := LegacyRun()
	s := open(t)
	got, err := s.Get(ctx, want.ID)
	if err != nil {
		t.Fatalf("Get of a run in the old layout: %v", err)
	}
	sameJSON(t, "Get of a run in the old layout", got, want)
	page, err := open(t).List(ctx, runs.Filter{Pipeline: want.Pipeline})
	if err != nil || len(page.Runs) != 1 {
		t.Fatalf("List of a run in the old layout: %d runs, %v; want 1", len(page.Runs), err)
	}
	sameJSON(t, "List of a run in the old layout", page.Runs[0], want)
	unfinished, err := open(t).Unfinished(ctx, want.Instance)
	if err != nil || len(unfinished) != 1 {
		t.Fatalf("Unfinished of a run in the old layout: %d runs, %v; want 1", len(unfinished), err)
	}
	sameJSON(t, "Unfinished of a run in the old layout", unfinished[0], want)

	for i, st := range []runs.StepStatus{runs.StepFailed, runs.StepSkipped} {
		i := len(want.Steps) - 1 - i // the last step first: the other must survive the rewrite
		mustUpdate(t, s, want.ID, func(x *runs.Run) error { x.Steps[i].Status = st; return nil },
			runs.Event{Type: runs.EventServiceFailed, Service: want.Steps[i].Name})
		want.Steps[i].Status = st
		want.Version++
		got, err := open(t).Get(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, fmt.Sprintf("Get after update %d of a run in the old layout", i), got, want)
	}
}

// testRunning: what a resource runs is recorded and read back whole, the last write wins,
// and it is kept apart from the resource's marks.
func testRunning(t *testing.T, open Opener) {
	ms := markStore(t, open(t))
	ctx := ctxFor(t)
	_, err := ms.GetRunning(ctx, "u-api")
	wantErr(t, "GetRunning of a resource nothing was recorded for", err, runs.ErrNotFound)
	wantErr(t, "PutRunning without uuid", ms.PutRunning(ctx, runs.Running{RunID: "r1"}), runs.ErrInvalid)
	v2 := runs.Running{UUID: "u-api", ImageTag: "v2", Commit: "abc123", AppVersion: "2.0.0", Deployment: "dep-2",
		RunID: "r2", Pipeline: "prod", Build: "2", Since: t0}
	if err := ms.PutRunning(ctx, v2); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.PutMark(ctx, runs.Mark{UUID: "u-api", RunID: "r3", Fence: 9, Phase: runs.Phase1, Pipeline: "prod", Build: "3"}); err != nil {
		t.Fatal(err)
	}
	got, err := ms.GetRunning(ctx, "u-api")
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "GetRunning after a mark of another run", got, v2)
	back := v2
	back.Since, back.Deployment, back.Restored, back.RestoredBy = t0.Add(time.Minute), "dep-4", true, "r4"
	if err := ms.PutRunning(ctx, back); err != nil {
		t.Fatal(err)
	}
	got, err = ms.GetRunning(ctx, "u-api")
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "GetRunning after it was put back", got, back)
	if _, err := ms.GetRunning(ctx, "u-web"); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("GetRunning of another resource: %v, want ErrNotFound", err)
	}
}
