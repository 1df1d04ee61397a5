package storekit

import (
	"sync"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// DefaultCacheSize bounds a Cache: more runs than this are rarely in progress at once.
const DefaultCacheSize = 1024

// Cache keeps the last copy this process wrote of each run that has not ended, so that an
// Update does not have to read and decode a run that nobody else changed. An entry is only
// ever used after the backend confirms its version is still the stored one, so another
// writer (process or host) can make it stale but never wrong.
type Cache struct {
	mu  sync.Mutex
	m   map[string]cached
	max int
}

type cached struct {
	r  runs.Run
	sk string
}

// NewCache returns a cache of at most size runs (DefaultCacheSize when size <= 0).
func NewCache(size int) *Cache {
	if size <= 0 {
		size = DefaultCacheSize
	}
	return &Cache{m: make(map[string]cached), max: size}
}

// Get returns the cached run and its sort key. The run is shared: callers must not change
// it (ApplyUpdate works on a clone).
func (c *Cache) Get(id string) (runs.Run, string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	return e.r, e.sk, ok
}

// Put keeps a copy of r as just written, or drops it when r has ended.
func (c *Cache) Put(r runs.Run, sk string) {
	if r.Status.Terminal() {
		c.Drop(r.ID)
		return
	}
	r = r.Clone()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[r.ID]; !ok && len(c.m) >= c.max {
		for id := range c.m { // evict one arbitrary entry
			delete(c.m, id)
			break
		}
	}
	c.m[r.ID] = cached{r: r, sk: sk}
}

// Drop forgets run id.
func (c *Cache) Drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}
