// Package testutil holds the small helpers several packages' tests share, so each is written
// once: a buffer a logger and a test can share, a clock a test moves by hand, and the
// latency of a fake server a test can hang and release. It is for tests only; nothing the
// daemon runs imports it.
package testutil

import (
	"bytes"
	"sync"
	"time"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: a log handler or a running command
// writes to it from its goroutines while the test reads what was written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Clock is a clock that moves only when the test says so; safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock forward by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Latency is how long a fake server holds each answer. Changing it releases the answers
// already held, so a test can hang a host and then let it go. The zero value holds nothing.
type Latency struct {
	mu      sync.Mutex
	d       time.Duration
	changed chan struct{} // closed when d changes
}

// Set holds every later answer for d and releases those held now.
func (l *Latency) Set(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = d
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

// Wait holds an answer for the latency, until it changes or done is closed (the request's
// context ended). It reports whether the answer should still be given.
func (l *Latency) Wait(done <-chan struct{}) bool {
	l.mu.Lock()
	d, changed := l.d, l.changed
	l.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-changed:
	case <-done:
		return false
	}
	return true
}
