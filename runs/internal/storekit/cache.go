package storekit

import (
	"container/list"
	"sync"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// DefaultCacheSize bounds a Cache: a few pages of List plus the runs in progress.
const DefaultCacheSize = 512

// Cache keeps decoded runs, least recently used first out, so that the hot paths do not
// decode JSON again for a run that has not changed: Update starts from the copy this
// process wrote last, and List and Get reuse a decoded run whose version is the stored one.
//
// Every entry is checked against the stored version before use, so a write by another
// process or host can make an entry stale but never makes a caller see a wrong run.
type Cache struct {
	mu  sync.Mutex
	ll  *list.List // of runs.Run, most recently used at the front
	m   map[string]*list.Element
	max int
}

// NewCache returns a cache of at most size runs (DefaultCacheSize when size <= 0).
func NewCache(size int) *Cache {
	if size <= 0 {
		size = DefaultCacheSize
	}
	return &Cache{ll: list.New(), m: make(map[string]*list.Element), max: size}
}

// Get returns the cached run. It is shared: callers must not change it (ApplyUpdate works
// on a clone) and must check its Version against the stored one before trusting it.
func (c *Cache) Get(id string) (runs.Run, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok {
		return runs.Run{}, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(runs.Run), true
}

// Lookup returns a copy of the cached run if its version is version; with shared (the
// caller only reads it: runs.Filter.ReadOnly), the cached run itself, which no one changes
// (Put stores a copy and never changes an entry), saving the copy.
func (c *Cache) Lookup(id string, version int64, shared bool) (runs.Run, bool) {
	r, ok := c.Get(id)
	if !ok || r.Version != version {
		return runs.Run{}, false
	}
	if shared {
		return r, true
	}
	return r.Clone(), true
}

// Put keeps a copy of r, as just written or read.
func (c *Cache) Put(r runs.Run) {
	r = r.Clone()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[r.ID]; ok {
		if e.Value.(runs.Run).Version > r.Version {
			return // a concurrent reader must not replace a newer copy with an older one
		}
		e.Value = r
		c.ll.MoveToFront(e)
		return
	}
	c.m[r.ID] = c.ll.PushFront(r)
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.m, old.Value.(runs.Run).ID)
	}
}

// Drop forgets run id.
func (c *Cache) Drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[id]; ok {
		c.ll.Remove(e)
		delete(c.m, id)
	}
}
