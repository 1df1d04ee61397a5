package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// frame is one SSE frame: an event (id, event, data) or a comment.
type frame struct {
	id, event, data, comment string
}

// stream opens the run's event stream and returns its frames as they arrive. The reader
// goroutine ends when the body is closed (at the test's end) or the server ends the stream.
func stream(t *testing.T, srv *httptest.Server, runID, lastEventID string) (<-chan frame, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/runs/"+runID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+readToken)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: got %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	frames := make(chan frame, 64)
	go func() {
		defer close(frames)
		sc := bufio.NewScanner(resp.Body)
		var f frame
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				frames <- f
				f = frame{}
			case strings.HasPrefix(line, ": "):
				f.comment = strings.TrimPrefix(line, ": ")
			case strings.HasPrefix(line, "id: "):
				f.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				f.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				f.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return frames, resp
}

// nextEvent returns the next frame that is not a comment.
func nextEvent(t *testing.T, frames <-chan frame) frame {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatal("the stream ended early")
			}
			if f.comment == "" {
				return f
			}
		case <-timeout:
			t.Fatal("no event within 10s")
		}
	}
}

func eventOf(t *testing.T, f frame) runs.Event {
	t.Helper()
	var e runs.Event
	if err := json.Unmarshal([]byte(f.data), &e); err != nil {
		t.Fatalf("event data %q: %v", f.data, err)
	}
	if f.id != strconv.FormatInt(e.Seq, 10) {
		t.Errorf("SSE id %q does not match seq %d", f.id, e.Seq)
	}
	return e
}

func TestEventsStreamLiveUntilTheRunEnds(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close) // registered before the streams, so it runs after they are closed
	r := f.trigger("demo", map[string]string{})

	frames, _ := stream(t, srv, r.ID, "")
	if e := eventOf(t, nextEvent(t, frames)); e.Type != runs.EventRunQueued || e.Seq != 1 {
		t.Fatalf("first event: got %s seq %d, want run.queued seq 1", e.Type, e.Seq)
	}

	// Heartbeats keep the idle stream open (Deps.Heartbeat is 50ms in the fixture).
	timeout := time.After(10 * time.Second)
	for beat := false; !beat; {
		select {
		case fr := <-frames:
			beat = fr.comment == "heartbeat"
			if fr.comment == "" {
				t.Fatalf("unexpected event while idle: %+v", fr)
			}
		case <-timeout:
			t.Fatal("no heartbeat within 10s")
		}
	}

	f.setStep(r.ID, runs.Phase1, "api", runs.StepSynced, 7)
	e := eventOf(t, nextEvent(t, frames))
	if e.Type != runs.EventServiceSynced || e.Service != "api" || e.Fence != 7 || e.Seq != 2 {
		t.Fatalf("live event: got %+v, want service.synced for api at fence 7, seq 2", e)
	}
	f.finish(r.ID)
	if e := eventOf(t, nextEvent(t, frames)); e.Type != runs.EventRunSucceeded {
		t.Fatalf("got %s, want run.succeeded", e.Type)
	}
	end := nextEvent(t, frames)
	if end.event != "end" || !strings.Contains(end.data, `"status":"succeeded"`) {
		t.Fatalf("final frame: got %+v, want event end with the status", end)
	}
	closed := time.After(10 * time.Second)
	for {
		select {
		case fr, ok := <-frames:
			if !ok {
				return
			}
			if fr.comment == "" {
				t.Fatalf("frame after the end event: %+v", fr)
			}
		case <-closed:
			t.Fatal("the stream did not close after the run ended")
		}
	}
}

func TestEventsResumeFromLastEventID(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close) // registered before the streams, so it runs after they are closed
	r := f.trigger("demo", map[string]string{})
	f.setStep(r.ID, runs.Phase1, "api", runs.StepSynced, 3)
	f.setStep(r.ID, runs.Phase1, "worker", runs.StepSynced, 4)
	f.finish(r.ID)

	frames, resp := stream(t, srv, r.ID, "2")
	var seqs []int64
	for {
		fr := nextEvent(t, frames)
		if fr.event == "end" {
			break
		}
		seqs = append(seqs, eventOf(t, fr).Seq)
	}
	if len(seqs) != 2 || seqs[0] != 3 || seqs[1] != 4 {
		t.Fatalf("resumed after 2: got seqs %v, want [3 4]", seqs)
	}
	if rest, _ := io.ReadAll(resp.Body); len(strings.TrimSpace(string(rest))) != 0 {
		t.Fatalf("data after the end event: %q", rest)
	}
}

func TestEventsStreamsAreCapped(t *testing.T) {
	f := newFixture(t)
	h := api.NewServer(api.Deps{Config: f.cfg, Engine: f.engine, Runs: f.store, Locks: f.locker, MaxStreams: 1})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // registered before the streams, so it runs after they are closed
	r := f.trigger("demo", map[string]string{})
	frames, _ := stream(t, srv, r.ID, "")
	nextEvent(t, frames) // the first stream is open

	req, _ := http.NewRequest("GET", srv.URL+"/v1/runs/"+r.ID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+readToken)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second stream: got %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
