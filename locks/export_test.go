package locks

// HeartbeatStarted reports whether le's heartbeat goroutine was ever started.
func HeartbeatStarted(le *Lease) bool {
	le.hbMu.Lock()
	defer le.hbMu.Unlock()
	return le.hbCancel != nil
}

// WatchAfter is how old a lease gets before its heartbeat starts at the latest.
const WatchAfter = watchAfter
