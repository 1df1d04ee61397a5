package phases

import "sync"

// readAtOnce makes two independent reads, a and b, at once and returns their errors; a nil
// read is not made (its error is nil), and a single one runs on the caller's goroutine.
// Their round trips overlap; what they read is what one after the other would, since neither
// writes. It is for reads made under a service lock (a snapshot, a read-back), where the
// time between two round trips is time the lock is held and the run waits. Neither is
// canceled when the other fails: each is a bounded read, and callers look at a's error
// first, as when a ran first. A panic in b is raised again here, once a has returned.
func readAtOnce(a, b func() error) (errA, errB error) {
	switch {
	case a == nil && b == nil:
		return nil, nil
	case b == nil:
		return a(), nil
	case a == nil:
		return nil, b()
	}
	join := inBackground(func() { errB = b() })
	errA = a()
	join()
	return errA, errB
}

// readIf returns read when do is set, else nil (for readAtOnce).
func readIf(do bool, read func() error) func() error {
	if !do {
		return nil
	}
	return read
}

// inBackground starts fn on a goroutine of its own and returns join, which waits for it to
// return and raises again a panic of fn's on the caller's goroutine (so a panic still fails
// the run; see recoverPanic). join may be called more than once: it waits and raises once.
func inBackground(fn func()) (join func()) {
	var panicked any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { panicked = recover() }()
		fn()
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			<-done
			if panicked != nil {
				panic(panicked)
			}
		})
	}
}
