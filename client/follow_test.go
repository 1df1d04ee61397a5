package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/client"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// When the daemon refuses the event stream (503: too many streams), Follow follows the run
// by polling it instead of failing while the run goes on.
func TestFollowFallsBackToPollingWhenStreamRefused(t *testing.T) {
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/runs/r-1/events":
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"too_many_streams","message":"too many event streams are open"}}`))
		case "/v1/runs/r-1":
			st := runs.StatusPhase1
			if gets.Add(1) >= 3 {
				st = runs.StatusSucceeded
			}
			_ = json.NewEncoder(w).Encode(runs.Run{ID: "r-1", Status: st})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cl := client.New(srv.URL, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.Follow(ctx, "r-1", func(runs.Event) error { return nil }); err != nil {
		t.Fatalf("follow with the stream refused: %v", err)
	}
	if n := gets.Load(); n < 3 {
		t.Fatalf("the run was read %d times, want polling until it ended (3)", n)
	}
}

// Follow hands over each event once, and after a dropped stream asks for the events after
// the last one it handed over (Last-Event-ID), until the end event.
func TestFollowResumesAfterADroppedStream(t *testing.T) {
	var conns atomic.Int32
	lastIDs := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/runs/r-2/events" || r.Header.Get("Accept") != "text/event-stream" {
			http.NotFound(w, r)
			return
		}
		lastIDs <- r.Header.Get("Last-Event-ID")
		w.Header().Set("Content-Type", "text/event-stream")
		if conns.Add(1) == 1 {
			fmt.Fprint(w, "id: 1\nevent: run.queued\ndata: {\"seq\":1,\"type\":\"run.queued\"}\n\n")
			fmt.Fprint(w, "id: 2\nevent: phase.started\ndata: {\"seq\":2,\"type\":\"phase.started\"}\n\n")
			return // the connection drops before the run ends
		}
		fmt.Fprint(w, "id: 3\nevent: run.succeeded\ndata: {\"seq\":3,\"type\":\"run.succeeded\"}\n\n")
		fmt.Fprint(w, "event: end\ndata: {}\n\n")
	}))
	defer srv.Close()
	var seqs []int64
	err := client.New(srv.URL, "").Follow(t.Context(), "r-2", func(e runs.Event) error {
		seqs = append(seqs, e.Seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[1 2 3]" {
		t.Errorf("events: got %v, want [1 2 3]", seqs)
	}
	if first, second := <-lastIDs, <-lastIDs; first != "" || second != "2" {
		t.Errorf("Last-Event-ID: got %q then %q, want none then 2", first, second)
	}
}

// A refusal of the stream (404: no such run) ends Follow at once with the answer.
func TestFollowStopsOnARefusal(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conns.Add(1)
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no run r-3"}}`))
	}))
	defer srv.Close()
	err := client.New(srv.URL, "").Follow(t.Context(), "r-3", func(runs.Event) error { return nil })
	var ae *client.APIError
	if !asAPIError(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Code != "not_found" {
		t.Fatalf("got %v, want the 404", err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("connections: %d, want 1 (a refusal is not retried)", n)
	}
}
