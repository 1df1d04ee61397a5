package locks

import (
	"container/heap"
	"sync"
	"time"
)

// starter starts the heartbeat of each lease of a Locker that lives long enough to need
// one, when its first renewal or its forced-release watch is due.
//
// One goroutine and one timer serve the whole Locker. A timer per lease would cost every
// acquire a wake-up of the runtime's network poller (a new earliest timer interrupts the
// thread blocked in it), measured at about 12 µs per uncontended acquire and release on a
// loaded two-core machine. Here the timer is armed for the earliest scheduled lease and
// left alone while later ones come and go, so a lease normally costs a heap push and, on
// release, a removal. A timer armed for a lease released since fires for nothing: rearming
// it on every release would cost what it saves. Once it has fired with nothing scheduled,
// the next lease arms it again.
//
// The goroutine starts with the first lease and runs until close.
type starter struct {
	mu      sync.Mutex
	due     dueHeap
	timer   *time.Timer
	armed   time.Time // when timer fires; zero when it is not armed
	running bool
	closed  bool
	stop    chan struct{} // closed by close
	done    chan struct{} // closed when the goroutine returns
}

// add schedules le's heartbeat to start at le.hbDue. It does nothing once closed.
func (s *starter) add(le *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	heap.Push(&s.due, le)
	if !s.running {
		s.running = true
		s.timer = time.NewTimer(time.Until(le.hbDue))
		s.armed = le.hbDue
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.run(s.timer.C, s.stop, s.done)
		return
	}
	if s.armed.IsZero() || le.hbDue.Before(s.armed) {
		s.armed = le.hbDue
		s.timer.Reset(time.Until(le.hbDue))
	}
}

// remove unschedules le if its heartbeat has not been started yet.
func (s *starter) remove(le *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if le.hbIndex >= 0 {
		heap.Remove(&s.due, le.hbIndex)
	}
}

// close stops the goroutine and waits for it. Leases still scheduled are not started.
func (s *starter) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	running, stop, done := s.running, s.stop, s.done
	s.mu.Unlock()
	if !running {
		return
	}
	close(stop)
	<-done
	s.timer.Stop()
}

func (s *starter) run(fired <-chan time.Time, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	var ready []*Lease
	for {
		select {
		case <-fired:
		case <-stop:
			return
		}
		s.mu.Lock()
		now := time.Now()
		s.armed = time.Time{}
		for len(s.due) > 0 && !s.due[0].hbDue.After(now) {
			ready = append(ready, heap.Pop(&s.due).(*Lease))
		}
		if len(s.due) > 0 {
			s.armed = s.due[0].hbDue
			s.timer.Reset(s.armed.Sub(now))
		}
		s.mu.Unlock()
		for i, le := range ready {
			le.startHeartbeat()
			ready[i] = nil
		}
		ready = ready[:0]
	}
}

// dueHeap orders leases by hbDue; each lease keeps its index in hbIndex (-1 when out).
type dueHeap []*Lease

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].hbDue.Before(h[j].hbDue) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hbIndex, h[j].hbIndex = i, j
}

func (h *dueHeap) Push(x any) {
	le := x.(*Lease)
	le.hbIndex = len(*h)
	*h = append(*h, le)
}

func (h *dueHeap) Pop() any {
	old := *h
	le := old[len(old)-1]
	old[len(old)-1] = nil
	le.hbIndex = -1
	*h = old[:len(old)-1]
	return le
}
