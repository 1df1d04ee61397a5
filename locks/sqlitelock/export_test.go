package sqlitelock

import (
	"path/filepath"
	"time"
)

// OpenUnshared opens path with a hub of its own, as another process would: releases it
// makes reach other Drivers only through the file, the notifier (unless notify is false,
// as where inotify is unavailable) and the poller.
func OpenUnshared(path string, poll time.Duration, notify bool) (*Driver, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	h, err := newHub(abs, poll, notify)
	if err != nil {
		return nil, err
	}
	h.unshared = true
	return &Driver{h: h, subs: make(map[*subscription]struct{})}, nil
}
