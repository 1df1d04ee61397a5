package runs

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"
)

func TestCursorRoundTrip(t *testing.T) {
	r := Run{ID: "01KJMMA2G0XYZ", CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 123, time.UTC)}
	sk := SortKey(r.CreatedAt, r.ID)
	q, err := parseFilter(Filter{Cursor: base64.RawURLEncoding.EncodeToString([]byte(sk))})
	if err != nil {
		t.Fatal(err)
	}
	if q.After != sk {
		t.Errorf("cursor decodes to %q, want %q", q.After, sk)
	}
	created, id, err := SplitSortKey(q.After)
	if err != nil || !created.Equal(r.CreatedAt) || id != r.ID {
		t.Errorf("SplitSortKey = %s, %q, %v; want %s, %q", created, id, err, r.CreatedAt, r.ID)
	}
	// Byte order of sort keys is (created, id) order, across a change in digit count.
	early := Run{ID: "B", CreatedAt: time.Unix(9, 0)}
	late := Run{ID: "A", CreatedAt: time.Unix(10, 0)}
	if a, b := SortKey(early.CreatedAt, early.ID), SortKey(late.CreatedAt, late.ID); a >= b {
		t.Errorf("SortKey(early) %s >= SortKey(late) %s", a, b)
	}
}

func TestParseFilterLimits(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{0, DefaultLimit}, {7, 7}, {MaxLimit + 1, MaxLimit}} {
		q, err := parseFilter(Filter{Limit: tc.in})
		if err != nil || q.Limit != tc.want {
			t.Errorf("limit %d: got %d, %v; want %d", tc.in, q.Limit, err, tc.want)
		}
	}
	q, err := parseFilter(Filter{Status: []Status{StatusFailed, StatusFailed}})
	if err != nil || len(q.Status) != 1 {
		t.Errorf("duplicate statuses: %v, %v; want one", q.Status, err)
	}
}

func TestApplyUpdate(t *testing.T) {
	stored := Run{ID: "r", Pipeline: "p", Status: StatusPhase1, Version: 3,
		Steps: []Step{{Phase: Phase1, Name: "api"}}}
	next, err := applyUpdate(stored, func(r *Run) error {
		r.Steps[0].Status = StepSynced
		r.ID = "x"
		return nil
	})
	if err != nil || next.ID != "r" || next.Version != 4 || next.Steps[0].Status != StepSynced {
		t.Errorf("ApplyUpdate = %+v, %v", next, err)
	}
	if stored.Steps[0].Status != "" {
		t.Error("ApplyUpdate changed the stored run it was given (fn must work on a copy)")
	}
	stored.Status = StatusFailed
	called := false
	_, err = applyUpdate(stored, func(*Run) error { called = true; return nil })
	if !errors.Is(err, ErrEnded) || called {
		t.Errorf("ApplyUpdate of an ended run: %v, fn called %v; want ErrEnded, not called", err, called)
	}
}

func TestCache(t *testing.T) {
	c := newCache(2)
	r := Run{ID: "a", Status: StatusPhase1, Version: 2, Steps: []Step{{Name: "api"}}}
	c.Put(r)
	got, ok := c.Get("a")
	if !ok || got.Steps[0].Name != "api" {
		t.Errorf("Get(a) = %+v, %v; want the run put", got, ok)
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
	c.Put(Run{ID: "a", Version: 1})
	if got, _ := c.Get("a"); got.Version != 2 {
		t.Errorf("an older copy replaced a newer one: version %d", got.Version)
	}

	c.Put(Run{ID: "b"})
	c.Get("a") // a is now the most recently used
	c.Put(Run{ID: "c"})
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
	h := newHub()
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
