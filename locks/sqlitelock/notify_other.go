//go:build !linux

package sqlitelock

import "errors"

// notifier is Linux-only (inotify); elsewhere releases by other processes are found by the
// hub's poll.
type notifier struct {
	c, dead chan struct{}
}

func openNotifier(string) (*notifier, error) {
	return nil, errors.New("release notification needs inotify (Linux)")
}

func (n *notifier) signal()      {}
func (n *notifier) close() error { return nil }
