package runs

import (
	"context"
	"fmt"
	"time"
)

// FollowPoll is how often Follow re-reads a run's log when no signal arrives: the fallback
// for lost signals, and the only path when another process writes to the SQLite store.
const FollowPoll = 2 * time.Second

// followBatch is how many events Follow reads per call to Store.Events.
const followBatch = 256

// Follow passes fn every event of run id with Seq > afterSeq, in Seq order and each once,
// then waits for new events (woken by the store's Subscribe signal, polling every FollowPoll
// as a fallback) and passes them too, until the run has ended: it returns nil once the run's
// status is terminal and every event appended up to that write has been passed to fn. The
// engine appends a run's end event (run.succeeded, …) in the same Update that ends it.
//
// Follow starts no goroutine; it returns when the run ends, when ctx ends (the context's
// error, wrapped), when fn returns an error (that error, unwrapped), or on a store error
// (wrapped: ErrNotFound for an unknown run, ErrUnavailable).
//
// The SSE endpoint calls it with the client's Last-Event-ID as afterSeq.
func Follow(ctx context.Context, s Store, id string, afterSeq int64, fn func(Event) error) error {
	sub, err := s.Subscribe(ctx, id)
	if err != nil {
		return fmt.Errorf("follow run %q: %w", id, err)
	}
	defer sub.Close()

	poll := time.NewTimer(FollowPoll)
	defer poll.Stop()
	for {
		// Read the status before the log: if it is terminal, every event written with or
		// before it is in the log read next.
		st, err := s.Status(ctx, id)
		if err != nil {
			return fmt.Errorf("follow run %q: %w", id, err)
		}
		for {
			evs, err := s.Events(ctx, id, afterSeq, followBatch)
			if err != nil {
				return fmt.Errorf("follow run %q: %w", id, err)
			}
			for _, e := range evs {
				if err := fn(e); err != nil {
					return err
				}
				afterSeq = e.Seq
			}
			if len(evs) < followBatch {
				break
			}
		}
		if st.Terminal() {
			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("follow run %q: %w", id, ctx.Err())
		case <-sub.C():
		case <-poll.C:
		}
		poll.Reset(FollowPoll)
	}
}
