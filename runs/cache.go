package runs

import (
	"container/list"
	"sync"
)

// defaultCacheSize bounds a Cache: a few pages of List plus the runs in progress.
const defaultCacheSize = 512

// cache keeps decoded runs, least recently used first out, so that the hot paths do not
// decode JSON again for a run that has not changed: Update starts from the copy this
// process wrote last, and List and Get reuse a decoded run whose version is the stored one.
//
// Every entry is checked against the stored version before use, so a write by another
// process or host can make an entry stale but never makes a caller see a wrong run.
type cache struct {
	mu  sync.Mutex
	ll  *list.List // of Run, most recently used at the front
	m   map[string]*list.Element
	max int
}

// newCache returns a cache of at most size runs (defaultCacheSize when size <= 0).
func newCache(size int) *cache {
	if size <= 0 {
		size = defaultCacheSize
	}
	return &cache{ll: list.New(), m: make(map[string]*list.Element), max: size}
}

// Get returns the cached run. It is shared: callers must not change it (applyUpdate works
// on a clone) and must check its Version against the stored one before trusting it.
func (c *cache) Get(id string) (Run, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok {
		return Run{}, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(Run), true
}

// Version returns the version of the cached run id, 0 when none is cached. It neither
// copies the run nor counts as a use.
func (c *cache) Version(id string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[id]; ok {
		return e.Value.(Run).Version
	}
	return 0
}

// Lookup returns a copy of the cached run if its version is version; with shared (the
// caller only reads it: Filter.ReadOnly), the cached run itself, which no one changes
// (an entry is never changed once put), saving the copy.
func (c *cache) Lookup(id string, version int64, shared bool) (Run, bool) {
	r, ok := c.Get(id)
	if !ok || r.Version != version {
		return Run{}, false
	}
	if shared {
		return r, true
	}
	return r.Clone(), true
}

// Put keeps r, as just written or read. r is shared from then on: neither the cache nor
// the caller may change it (callers put a run they own and then only read it).
func (c *cache) Put(r Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[r.ID]; ok {
		if e.Value.(Run).Version > r.Version {
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
		delete(c.m, old.Value.(Run).ID)
	}
}

// Drop forgets run id.
func (c *cache) Drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[id]; ok {
		c.ll.Remove(e)
		delete(c.m, id)
	}
}
