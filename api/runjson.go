package api

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// runJSONCacheSize bounds the encoded runs kept (a few KB each).
const runJSONCacheSize = 1024

// runJSON keeps the JSON encoding of runs by ID and version. A run's encoding changes only
// with its version, and GET /v1/runs answers the same recent runs again and again; encoding
// them (their timestamps above all) was most of a list's cost.
type runJSON struct {
	mu sync.Mutex
	m  map[string]encodedRun
}

type encodedRun struct {
	version int64
	data    []byte // json.Marshal of the run; never modified once stored
}

func newRunJSON() *runJSON { return &runJSON{m: make(map[string]encodedRun)} }

// encode returns the run's JSON, from the cache when it holds this version.
func (c *runJSON) encode(r *runs.Run) ([]byte, error) {
	c.mu.Lock()
	e, ok := c.m[r.ID]
	c.mu.Unlock()
	if ok && e.version == r.Version {
		return e.data, nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= runJSONCacheSize {
		for id := range c.m { // evict any one
			delete(c.m, id)
			break
		}
	}
	c.m[r.ID] = encodedRun{version: r.Version, data: data}
	return data, nil
}

// encodeRun answers one run, as encode(w, status, run) would.
func (s *server) encodeRun(w http.ResponseWriter, status int, r *runs.Run) {
	data, err := s.runJSON.encode(r)
	if err != nil {
		encode(w, status, r) // answers the encoding error
		return
	}
	writeJSON(w, status, append(data[:len(data):len(data)], '\n'))
}

// encodePage answers a page of runs, as encode(w, status, page) would. The runs' cached
// encodings are written one after the other, not copied into one body first (a page of 50
// runs is about 100 KB: a copy per request was most of what a list allocated).
func (s *server) encodePage(w http.ResponseWriter, status int, page runs.Page) {
	parts := make([][]byte, len(page.Runs))
	for i := range page.Runs {
		data, err := s.runJSON.encode(&page.Runs[i])
		if err != nil {
			encode(w, status, page) // answers the encoding error
			return
		}
		parts[i] = data
	}
	var next []byte
	if page.Next != "" {
		var err error
		if next, err = json.Marshal(page.Next); err != nil {
			encode(w, status, page)
			return
		}
	}
	writeJSONHeader(w, status)
	_, _ = io.WriteString(w, `{"runs":[`)
	for i, data := range parts {
		if i > 0 {
			_, _ = io.WriteString(w, ",")
		}
		_, _ = w.Write(data)
	}
	_, _ = io.WriteString(w, "]")
	if next != nil {
		_, _ = io.WriteString(w, `,"next":`)
		_, _ = w.Write(next)
	}
	_, _ = io.WriteString(w, "}\n")
}
