package sqlitelock

import (
	"path/filepath"
	"time"
)

// OpenUnshared opens path with a hub of its own, as another process would: releases it
// makes reach other Drivers only through the file and the poller.
func OpenUnshared(path string, poll time.Duration) (*Driver, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	db, err := openDB(abs)
	if err != nil {
		return nil, err
	}
	h := &hub{
		path: abs, db: db, poll: poll, refs: 1,
		subs:     make(map[string]map[*subscription]struct{}),
		seen:     make(map[string]int64),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		unshared: true,
	}
	go h.poller()
	return &Driver{h: h, subs: make(map[*subscription]struct{})}, nil
}
