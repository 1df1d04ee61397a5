package storekit

import (
	"sync"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Hub fans "new events" signals out to the subscriptions of one process, by run ID.
// The zero value is not usable; use NewHub.
type Hub struct {
	mu   sync.Mutex
	subs map[string]map[*sub]struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{subs: make(map[string]map[*sub]struct{})} }

// Subscribe registers a subscription for run id. It is active when Subscribe returns.
func (h *Hub) Subscribe(id string) runs.Subscription {
	s := &sub{hub: h, id: id, c: make(chan struct{}, 1)}
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
func (h *Hub) Notify(id string) {
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
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.subs)
}

// Len is the number of live subscriptions (for tests).
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.subs {
		n += len(m)
	}
	return n
}

type sub struct {
	hub *Hub
	id  string
	c   chan struct{}
}

func (s *sub) C() <-chan struct{} { return s.c }

func (s *sub) Close() error {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	if m := s.hub.subs[s.id]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(s.hub.subs, s.id)
		}
	}
	return nil
}
