package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// handleEvents serves GET /v1/runs/{id}/events as Server-Sent Events: every event of the run
// after Last-Event-ID (header, or the last_event_id query parameter), then new ones live
// until the run ends. Each run event is one message whose id is its Seq and whose data is
// the event as JSON (the type is inside, so EventSource's onmessage sees every one). When the
// run has ended and everything was sent, a final "end" event carries the run's status and
// reason, and the stream closes. A comment line every Heartbeat keeps idle streams open. At
// most Deps.MaxStreams streams are open at once, and Deps.MaxStreamsPerClient per client (a
// client is its address and the name of its token, so a viewer's streams never count
// against CI's token, even from one address).
func (s *server) handleEvents() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := validRunID(chi.URLParam(r, "id"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		last := r.Header.Get("Last-Event-ID")
		if last == "" {
			last = r.URL.Query().Get("last_event_id")
		}
		after, err := validLastEventID(last)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		// Answer 404 as JSON before the stream starts (the status alone says the run exists).
		if _, err := s.runs.Status(r.Context(), id); err != nil {
			s.writeError(w, r, err)
			return
		}

		client := streamClient(r)
		if why := s.streams.take(client); why != "" {
			s.writeError(w, r, &httpError{status: http.StatusServiceUnavailable, code: "too_many_streams",
				message: why + "; poll GET /v1/runs/{id} instead, or retry later", retryAfter: 5,
				refusal: "event stream refused"})
			return
		}
		defer s.streams.give(client)

		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Time{}) // the stream outlives the server's timeouts
		_ = rc.SetReadDeadline(time.Time{})
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)

		sw := &sseWriter{w: w, rc: rc}
		if err := sw.comment("stream of run " + id); err != nil {
			return
		}

		ctx, cancel := context.WithCancel(r.Context())
		var wg sync.WaitGroup
		s.goRequest(r, &wg, cancel, func() { // the heartbeat; stopped and waited for below
			t := time.NewTicker(s.heartbeat)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if sw.comment("heartbeat") != nil {
						cancel()
						return
					}
				}
			}
		})

		err = runs.Follow(ctx, s.runs, id, after, sw.event)
		if err == nil {
			if run, gerr := s.runs.Get(ctx, id); gerr == nil {
				err = sw.end(run)
			}
		}
		cancel()
		wg.Wait()
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, errClientGone) {
			s.log.WarnContext(r.Context(), "event stream ended with an error",
				slog.String(logkey.RequestID, requestID(r.Context())),
				slog.String(logkey.RunID, id), slog.String(logkey.Error, err.Error()))
		}
	}
}

// errClientGone: a write to the stream failed, the client went away.
var errClientGone = errors.New("event stream client gone")

// sseWriter writes SSE frames; the heartbeat goroutine and the follower share it.
type sseWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (sw *sseWriter) write(b []byte) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if _, err := sw.w.Write(b); err != nil {
		return fmt.Errorf("%w: %v", errClientGone, err)
	}
	if err := sw.rc.Flush(); err != nil {
		return fmt.Errorf("%w: %v", errClientGone, err)
	}
	return nil
}

func (sw *sseWriter) comment(text string) error {
	return sw.write([]byte(": " + text + "\n\n"))
}

// event writes one run event: "id: <seq>\ndata: <json>\n\n".
func (sw *sseWriter) event(e runs.Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode event %d: %w", e.Seq, err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "id: %d\ndata: %s\n\n", e.Seq, data)
	return sw.write(b.Bytes())
}

// endEvent is the data of the final "end" event.
type endEvent struct {
	RunID  string      `json:"run_id"`
	Status runs.Status `json:"status"`
	Reason string      `json:"reason,omitempty"`
}

func (sw *sseWriter) end(r runs.Run) error {
	data, _ := json.Marshal(endEvent{RunID: r.ID, Status: r.Status, Reason: r.Reason})
	return sw.write(fmt.Appendf(nil, "event: end\ndata: %s\n\n", data))
}

// streamSlots counts open event streams, per client and in total.
type streamSlots struct {
	max, perClient int
	mu             sync.Mutex
	total          int
	by             map[string]int
}

func newStreamSlots(max, perClient int) *streamSlots {
	return &streamSlots{max: max, perClient: perClient, by: map[string]int{}}
}

// take reserves a stream for client, or says which cap is reached.
func (s *streamSlots) take(client string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by[client] >= s.perClient {
		return fmt.Sprintf("this client already has %d event streams open", s.by[client])
	}
	if s.total >= s.max {
		return "too many event streams are open"
	}
	s.total++
	s.by[client]++
	return ""
}

func (s *streamSlots) give(client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.by[client]--; s.by[client] <= 0 {
		delete(s.by, client)
	}
}

// streamClient names the client of a stream: its address (clientKey) and its token's name.
func streamClient(r *http.Request) string {
	return clientKey(r) + " " + principalOf(r).name
}
