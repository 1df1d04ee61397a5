package storekit

import (
	"errors"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

func TestCursorRoundTrip(t *testing.T) {
	r := runs.Run{ID: "01KJMMA2G0XYZ", CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 123, time.UTC)}
	q, err := ParseFilter(runs.Filter{Cursor: Cursor(r)})
	if err != nil {
		t.Fatal(err)
	}
	if q.After != SortKey(r) {
		t.Errorf("cursor decodes to %q, want %q", q.After, SortKey(r))
	}
	ns, id, err := SplitSortKey(q.After)
	if err != nil || ns != r.CreatedAt.UnixNano() || id != r.ID {
		t.Errorf("SplitSortKey = %d, %q, %v; want %d, %q", ns, id, err, r.CreatedAt.UnixNano(), r.ID)
	}
	// Byte order of sort keys is (created, id) order, across a change in digit count.
	early := runs.Run{ID: "B", CreatedAt: time.Unix(9, 0)}
	late := runs.Run{ID: "A", CreatedAt: time.Unix(10, 0)}
	if SortKey(early) >= SortKey(late) {
		t.Errorf("SortKey(%s) >= SortKey(%s)", SortKey(early), SortKey(late))
	}
}

func TestParseFilterLimits(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{0, runs.DefaultLimit}, {7, 7}, {runs.MaxLimit + 1, runs.MaxLimit}} {
		q, err := ParseFilter(runs.Filter{Limit: tc.in})
		if err != nil || q.Limit != tc.want {
			t.Errorf("limit %d: got %d, %v; want %d", tc.in, q.Limit, err, tc.want)
		}
	}
	q, err := ParseFilter(runs.Filter{Status: []runs.Status{runs.StatusFailed, runs.StatusFailed}})
	if err != nil || len(q.Status) != 1 {
		t.Errorf("duplicate statuses: %v, %v; want one", q.Status, err)
	}
}

func TestApplyUpdate(t *testing.T) {
	stored := runs.Run{ID: "r", Pipeline: "p", Status: runs.StatusPhase1, Version: 3,
		Steps: []runs.Step{{Phase: runs.Phase1, Name: "api"}}}
	next, err := ApplyUpdate(stored, func(r *runs.Run) error {
		r.Steps[0].Status = runs.StepSynced
		r.ID = "x"
		return nil
	})
	if err != nil || next.ID != "r" || next.Version != 4 || next.Steps[0].Status != runs.StepSynced {
		t.Errorf("ApplyUpdate = %+v, %v", next, err)
	}
	if stored.Steps[0].Status != "" {
		t.Error("ApplyUpdate changed the stored run it was given (fn must work on a copy)")
	}
	stored.Status = runs.StatusFailed
	called := false
	_, err = ApplyUpdate(stored, func(*runs.Run) error { called = true; return nil })
	if !errors.Is(err, runs.ErrEnded) || called {
		t.Errorf("ApplyUpdate of an ended run: %v, fn called %v; want ErrEnded, not called", err, called)
	}
}

func TestCache(t *testing.T) {
	c := NewCache(2)
	r := runs.Run{ID: "a", Status: runs.StatusPhase1, Version: 2, Steps: []runs.Step{{Name: "api"}}}
	c.Put(r)
	r.Steps[0].Name = "changed"
	got, ok := c.Get("a")
	if !ok || got.Steps[0].Name != "api" {
		t.Errorf("Get(a) = %+v, %v; want the copy put", got, ok)
	}
	if _, ok := c.Lookup("a", 1, false); ok {
		t.Error("Lookup with another version hit")
	}
	cp, ok := c.Lookup("a", 2, false)
	if !ok {
		t.Fatal("Lookup with the cached version missed")
	}
	cp.Steps[0].Name = "mine"
	if got, _ := c.Get("a"); got.Steps[0].Name != "api" {
		t.Error("changing Lookup's result changed the cache")
	}
	c.Put(runs.Run{ID: "a", Version: 1})
	if got, _ := c.Get("a"); got.Version != 2 {
		t.Errorf("an older copy replaced a newer one: version %d", got.Version)
	}

	c.Put(runs.Run{ID: "b"})
	c.Get("a") // a is now the most recently used
	c.Put(runs.Run{ID: "c"})
	if _, ok := c.Get("b"); ok {
		t.Error("the least recently used run was not evicted")
	}
	if _, ok := c.Get("a"); !ok {
		t.Error("a recently used run was evicted")
	}
	c.Drop("a")
	if _, ok := c.Get("a"); ok {
		t.Error("Drop kept the run")
	}
}

func TestHub(t *testing.T) {
	h := NewHub()
	a := h.Subscribe("r1")
	b := h.Subscribe("r1")
	other := h.Subscribe("r2")
	h.Notify("r1")
	h.Notify("r1") // coalesced into the pending signal, never blocks
	for _, s := range []interface{ C() <-chan struct{} }{a, b} {
		select {
		case <-s.C():
		default:
			t.Error("subscriber of r1 got no signal")
		}
	}
	select {
	case <-other.C():
		t.Error("subscriber of r2 got r1's signal")
	default:
	}
	a.Close()
	a.Close()
	if h.Len() != 2 {
		t.Errorf("after one Close: %d subscriptions, want 2", h.Len())
	}
	h.Close()
	if h.Len() != 0 {
		t.Errorf("after hub Close: %d subscriptions, want 0", h.Len())
	}
}
