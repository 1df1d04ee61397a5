package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/client"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

func asAPIError(err error, target **client.APIError) bool { return errors.As(err, target) }

// request is what the fake daemon saw of one request.
type request struct {
	method, path, auth, key, agent string
	body                           map[string]any
}

// daemon answers every request with status and answer, and reports what it saw.
func daemon(t *testing.T, status int, answer string) (*httptest.Server, <-chan request) {
	t.Helper()
	seen := make(chan request, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(data, &body)
		seen <- request{r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key"),
			r.Header.Get("User-Agent"), body}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

func TestTriggerSendsTheRunAndItsKey(t *testing.T) {
	srv, seen := daemon(t, http.StatusAccepted, `{"run":{"id":"r-1","pipeline":"prod","status":"queued"},"existing":true}`)
	cl := client.New(srv.URL+"/", "trigger-token-0123456789", client.WithUserAgent("ci-bot/1"))
	r, existing, err := cl.Trigger(context.Background(), "prod", orchestrator.Trigger{Build: "12", ImageTag: "v2"}, "key-1")
	if err != nil || r == nil || r.ID != "r-1" || !existing {
		t.Fatalf("Trigger: %+v %v %v", r, existing, err)
	}
	req := <-seen
	if req.method != "POST" || req.path != "/v1/pipelines/prod/runs" || req.auth != "Bearer trigger-token-0123456789" ||
		req.key != "key-1" || req.agent != "ci-bot/1" || req.body["build"] != "12" || req.body["image_tag"] != "v2" {
		t.Errorf("request: %+v", req)
	}
}

// Without a token of its own the client takes each route's from WithTokens.
func TestTokensByAccess(t *testing.T) {
	srv, seen := daemon(t, http.StatusOK, `{"locks":[{"key":"coolify:phase1"}],"entries":[],"frozen":{"key":"coolify:phase2"}}`)
	cl := client.New(srv.URL, "", client.WithTokens(func(a client.Access) string {
		return map[client.Access]string{client.Read: "read", client.Admin: "admin", client.Audit: "audit"}[a]
	}))
	ctx := context.Background()
	if l, err := cl.Locks(ctx, "coolify:"); err != nil || len(l) != 1 || l[0].Key != "coolify:phase1" {
		t.Fatalf("Locks: %+v %v", l, err)
	}
	if got := <-seen; got.auth != "Bearer read" || got.path != "/v1/locks?prefix=coolify%3A" {
		t.Errorf("list: %+v", got)
	}
	if _, err := cl.LockAudit(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got.auth != "Bearer audit" || got.path != "/v1/locks/audit?limit=5" {
		t.Errorf("audit: %+v", got)
	}
	if info, err := cl.Freeze(ctx, locks.FreezeRequest{Key: "coolify:phase2", Message: "freeze"}); err != nil || info.Key != "coolify:phase2" {
		t.Fatalf("Freeze: %+v %v", info, err)
	}
	if got := <-seen; got.auth != "Bearer admin" || got.method != "POST" || got.path != "/v1/locks/coolify:phase2/freeze" || got.body["message"] != "freeze" {
		t.Errorf("freeze: %+v", got)
	}
}

func TestRunsFilterIsTheQuery(t *testing.T) {
	srv, seen := daemon(t, http.StatusOK, `{"runs":[{"id":"r-9"}],"next_cursor":"c2"}`)
	p, err := client.New(srv.URL, "t").Runs(context.Background(),
		runs.Filter{Pipeline: "prod", Status: []runs.Status{runs.StatusFailed}, Limit: 3, Cursor: "c1"})
	if err != nil || len(p.Runs) != 1 || p.Runs[0].ID != "r-9" {
		t.Fatalf("Runs: %+v %v", p, err)
	}
	if got := <-seen; got.path != "/v1/runs?cursor=c1&limit=3&pipeline=prod&status=failed" {
		t.Errorf("query: %s", got.path)
	}
}

// An error answer is an *APIError with the API's code, message and field, and the route's
// access level.
func TestErrorAnswerIsAnAPIError(t *testing.T) {
	srv, _ := daemon(t, http.StatusUnprocessableEntity, `{"error":{"code":"invalid","message":"not a build number","field":"build"}}`)
	_, _, err := client.New(srv.URL, "t").Trigger(context.Background(), "prod", orchestrator.Trigger{}, "k")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.StatusCode != 422 || ae.Code != "invalid" || ae.Field != "build" || ae.Access != client.Trigger {
		t.Fatalf("got %#v", err)
	}
	if want := "POST /v1/pipelines/prod/runs: 422 Unprocessable Entity: build: not a build number"; err.Error() != want {
		t.Errorf("message:\n got %s\nwant %s", err, want)
	}
	// A body that is not the API's error is the message as it is.
	srv, _ = daemon(t, http.StatusForbidden, "forbidden by the proxy\n")
	err = client.New(srv.URL, "t").Ready(context.Background())
	if !errors.As(err, &ae) || ae.Code != "" || ae.Message != "forbidden by the proxy" {
		t.Fatalf("got %#v", err)
	}
}

func TestNoDaemonIsUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = client.New("http://"+addr, "t", client.WithRetries(0)).Run(context.Background(), "r-1")
	var ue *client.UnreachableError
	if !errors.As(err, &ue) || ue.URL != "http://"+addr+"/v1/runs/r-1" || !strings.HasPrefix(err.Error(), "GET http://"+addr+"/v1/runs/r-1: ") {
		t.Fatalf("got %#v", err)
	}
}

func TestMalformedURLAndUnreadableAnswer(t *testing.T) {
	err := client.New("http://[::1", "t").Ready(context.Background())
	var be *client.URLError
	if !errors.As(err, &be) {
		t.Fatalf("malformed URL: got %#v", err)
	}
	srv, _ := daemon(t, http.StatusOK, `<html>not JSON</html>`)
	_, err = client.New(srv.URL, "t").Run(context.Background(), "r-1")
	var re *client.UnreadableError
	if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), "GET /v1/runs/r-1: unreadable answer: ") {
		t.Fatalf("unreadable: got %#v", err)
	}
}
