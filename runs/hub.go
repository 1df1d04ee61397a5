package runs

import (
	"sync"
)

// hub fans "new events" signals out to the subscriptions of one process, by run ID.
// The zero value is not usable; use newHub.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[*sub]struct{}
}

// newHub returns an empty hub.
func newHub() *hub { return &hub{subs: make(map[string]map[*sub]struct{})} }

// Subscribe registers a subscription for run id. It is active when Subscribe returns.
func (h *hub) Subscribe(id string) Subscription {
	s := &sub{h: h, id: id, c: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.subs[id]
	if m == nil {
		m = make(map[*sub]struct{})
		h.subs[id] = m
	}
	m[s] = struct{}{}
	return s
}

// Notify signals every subscription of run id without blocking: a subscription whose
// buffer already holds a signal keeps that one.
func (h *hub) Notify(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[id] {
		select {
		case s.c <- struct{}{}:
		default:
		}
	}
}

// Close drops every subscription; their channels receive nothing more.
func (h *hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.subs)
}

// Len is the number of live subscriptions (for tests).
func (h *hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.subs {
		n += len(m)
	}
	return n
}

type sub struct {
	h  *hub
	id string
	c  chan struct{}
}

func (s *sub) C() <-chan struct{} { return s.c }

func (s *sub) Close() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if m := s.h.subs[s.id]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(s.h.subs, s.id)
		}
	}
	return nil
}
