package api_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/redislock"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
)

// lockAuditServer is a server over one backend's run store and lock service: "sqlite" (the
// embedded files) or "redis" (a real redis-server).
type lockAuditServer struct {
	h      http.Handler
	store  runs.Store
	locker *locks.Locker
}

func newLockAuditServer(t *testing.T, backend string) lockAuditServer {
	t.Helper()
	var (
		store runs.Store
		drv   locks.Driver
	)
	switch backend {
	case "sqlite":
		dir := t.TempDir()
		st, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "runs.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		d, err := sqlitelock.Open(filepath.Join(dir, "locks.db"))
		if err != nil {
			t.Fatal(err)
		}
		store, drv = st, d
	case "redis":
		url := redistest.Start(t).URL()
		client, err := redislock.NewClient(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		d, err := redislock.Open(url, redislock.Options{})
		if err != nil {
			t.Fatal(err)
		}
		store, drv = redisstore.New(client, redisstore.Options{}), d
	}
	locker := locks.New(drv, locks.Options{})
	t.Cleanup(func() { locker.Close() })
	h := api.NewServer(api.Deps{
		Config: testConfig(), Runs: store, Locks: locker, Logger: slog.New(slog.DiscardHandler),
		Engine: &testEngine{store: store, pipelines: map[string][]string{"demo": {"api"}}},
	})
	return lockAuditServer{h: h, store: store, locker: locker}
}

func (s lockAuditServer) do(t *testing.T, method, path string, body any) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, request(method, path, adminToken, body))
	if rec.Code >= 500 {
		t.Fatalf("%s %s: got %d: %s", method, path, rec.Code, rec.Body)
	}
	return rec
}

// TestLockActionsInTheAuditLog: a forced release, a freeze and its lift through the API are
// records of the audit log, on either backend, with who, what, why, how it ended and the
// evicted lease's holder and fence (never its token); GET /v1/locks/audit shows them in the
// lock trail's shape; the exported chain verifies.
func TestLockActionsInTheAuditLog(t *testing.T) {
	for _, backend := range []string{"sqlite", "redis"} {
		t.Run(backend, func(t *testing.T) {
			s := newLockAuditServer(t, backend)
			ctx := context.Background()
			const key = "coolify:uuid-api"
			lease, err := s.locker.Acquire(ctx, locks.Request{Key: key, Holder: "demo#41/api", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			token := lease.Info().Token
			fence := strconv.FormatInt(lease.Fence(), 10)
			s.do(t, "POST", "/v1/locks/"+key+"/release", map[string]any{"fence": lease.Fence() + 1, "reason": "stale look"})
			s.do(t, "POST", "/v1/locks/"+key+"/release", map[string]any{"fence": lease.Fence(), "reason": "runner crashed", "by": "alice"})
			s.do(t, "POST", "/v1/locks/coolify:phase2/freeze", map[string]any{"message": "release freeze", "for": "1h"})
			s.do(t, "DELETE", "/v1/locks/coolify:phase2/freeze", map[string]string{"reason": "done"})

			body := s.do(t, "GET", "/v1/audit?action=force_release", nil)
			recs := decodeJSON[struct{ Records []runs.AuditRecord }](t, body).Records
			if len(recs) != 2 {
				t.Fatalf("force_release records: got %d, want the refused and the done one: %s", len(recs), body.Body)
			}
			done, refused := recs[0], recs[1]
			if done.Subject != "api:admin (alice)" || done.Target != key || done.Reason != "runner crashed" || done.Outcome != runs.AuditOK ||
				done.Detail["evicted_holder"] != "demo#41/api" || done.Detail["evicted_fence"] != fence || done.At.IsZero() {
				t.Errorf("the forced release's record: got %+v", done)
			}
			if !strings.HasPrefix(refused.Outcome, runs.AuditRefused+": ") || refused.Detail["evicted_holder"] != "" {
				t.Errorf("the refused forced release's record: got %+v", refused)
			}
			var freezeFence string
			for _, a := range []string{"freeze", "unfreeze"} {
				recs := decodeJSON[struct{ Records []runs.AuditRecord }](t, s.do(t, "GET", "/v1/audit?action="+a, nil)).Records
				if len(recs) != 1 || recs[0].Target != "coolify:phase2" || recs[0].Subject != "api:admin" || recs[0].Outcome != runs.AuditOK {
					t.Fatalf("%s records: got %+v", a, recs)
				}
				switch d := recs[0].Detail; a {
				case "freeze":
					freezeFence = d["fence"]
					if d["until"] == "" || d["fence"] == "" {
						t.Errorf("the freeze's record names no end or fence: %+v", recs[0])
					}
				case "unfreeze": // the freeze it lifted
					if d["evicted_holder"] != "operator:api:admin" || d["evicted_fence"] != freezeFence {
						t.Errorf("the unfreeze's record: got %+v, want the freeze lifted (fence %s)", recs[0], freezeFence)
					}
				}
			}

			body = s.do(t, "GET", "/v1/locks/audit", nil)
			entries := decodeJSON[struct{ Entries []runs.LockAuditEntry }](t, body).Entries
			var got []string
			for _, e := range entries {
				got = append(got, e.Action+" "+e.Key+" by "+e.By)
			}
			want := []string{"unfreeze coolify:phase2 by api:admin", "freeze coolify:phase2 by api:admin", "force_release " + key + " by api:admin (alice)"}
			if strings.Join(got, "; ") != strings.Join(want, "; ") {
				t.Fatalf("GET /v1/locks/audit: got %q, want %q", got, want)
			}
			if ev := entries[2].Evicted; ev == nil || ev.Holder != "demo#41/api" || ev.Fence != lease.Fence() || entries[2].Reason != "runner crashed" {
				t.Errorf("the forced release in the lock view: got %+v (evicted %+v)", entries[2], ev)
			}

			export := s.do(t, "GET", "/v1/audit/export", nil)
			span, all, err := runs.ReadAuditExport(bytes.NewReader(export.Body.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			if err := runs.VerifyAudit(span.Anchor, span.Head, all); err != nil || len(all) != 4 {
				t.Errorf("audit verify of the export: %v (%d records, want 4)", err, len(all))
			}
			for _, b := range []*httptest.ResponseRecorder{export, body, s.do(t, "GET", "/v1/audit", nil)} {
				if token == "" || strings.Contains(b.Body.String(), token) {
					t.Errorf("an audit answer holds the evicted lease's token (or it has none): %s", b.Body)
				}
			}
		})
	}
}
