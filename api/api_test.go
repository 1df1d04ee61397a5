package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

func TestTriggerStartsARun(t *testing.T) {
	f := newFixture(t)
	rec := f.do("POST", "/v1/pipelines/demo/runs", triggerToken,
		map[string]any{"build": "1234", "image_tag": "v1.2.3", "commit": "abc123", "app_version": "2.4.0", "params": map[string]string{"region": "eu"}})
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status: got %d, want 202: %s", rec.Code, rec.Body)
	}
	got := decodeJSON[struct {
		Run      runs.Run
		Existing bool
	}](t, rec)
	if loc, want := rec.Header().Get("Location"), "/v1/runs/"+got.Run.ID; loc != want {
		t.Errorf("Location: got %q, want %q", loc, want)
	}
	tr := got.Run.Trigger
	if got.Run.Pipeline != "demo" || tr.Build != "1234" || tr.ImageTag != "v1.2.3" || tr.Commit != "abc123" ||
		tr.AppVersion != "2.4.0" || tr.Params["region"] != "eu" || tr.By != "api:trigger" || got.Existing {
		t.Errorf("run: got %+v existing=%v", got.Run, got.Existing)
	}
	stored, err := f.store.Get(context.Background(), got.Run.ID)
	if err != nil {
		t.Fatalf("the run is not in the store: %v", err)
	}
	if stored.Trigger.ImageTag != "v1.2.3" {
		t.Errorf("stored image tag: got %q, want v1.2.3", stored.Trigger.ImageTag)
	}
	if rec.Header().Get("X-Request-ID") == "" {
		t.Error("no X-Request-ID on the answer")
	}
}

func TestTriggerIdempotencyKey(t *testing.T) {
	f := newFixture(t)
	send := func(key string) (runs.Run, bool) {
		req := request("POST", "/v1/pipelines/demo/runs", triggerToken, map[string]string{"build": "7"})
		req.Header.Set("Idempotency-Key", key)
		rec := f.serve(req)
		if rec.Code != http.StatusAccepted {
			t.Fatalf("status: got %d, want 202: %s", rec.Code, rec.Body)
		}
		r := decodeJSON[struct {
			Run      runs.Run
			Existing bool
		}](t, rec)
		return r.Run, r.Existing
	}
	first, existing := send("ci-build-7")
	if existing {
		t.Fatal("first request: existing=true, want false")
	}
	again, existing := send("ci-build-7")
	if !existing || again.ID != first.ID {
		t.Fatalf("same key: got run %s existing=%v, want run %s existing=true", again.ID, existing, first.ID)
	}
	other, existing := send("ci-build-8")
	if existing || other.ID == first.ID {
		t.Fatalf("another key: got run %s existing=%v, want a new run", other.ID, existing)
	}
	if n := f.runCount(); n != 2 {
		t.Fatalf("runs in the store: got %d, want 2", n)
	}
}

// TestBadInput sends every route malformed, mistyped, oversize, misnamed and unauthenticated
// requests: each answers a 4xx JSON error and changes nothing in the store or the locks.
func TestBadInput(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	lease, err := f.locker.Acquire(ctx, locks.Request{Key: "coolify:uuid-api", Holder: "demo#1/api", TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	defer lease.Release(ctx)
	existing := f.trigger("demo", map[string]string{"build": "1"})
	f.finish(existing.ID)

	big := `{"build":"` + strings.Repeat("x", 70<<10) + `"}`
	cases := []struct {
		name, method, path, token string
		body                      any
		header                    map[string]string
		status                    int
		field                     string
	}{
		// trigger
		{"malformed json", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"build":`, nil, 400, ""},
		{"not json", "POST", "/v1/pipelines/demo/runs", triggerToken, `build=1`, nil, 400, ""},
		{"wrong type", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"build":true}`, nil, 400, "build"},
		{"wrong param type", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"params":{"a":1}}`, nil, 400, "params.a"},
		{"params not an object", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"params":[1]}`, nil, 400, "params"},
		{"unknown field", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"bogus":true}`, nil, 400, "bogus"},
		{"server's field by", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"by":"api:admin"}`, nil, 400, "by"},
		{"server's field by, even empty", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"by":""}`, nil, 400, "by"},
		{"server's field idempotency_hash, even empty", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"idempotency_hash":""}`, nil, 400, "idempotency_hash"},
		{"server's field idempotency_key", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"idempotency_key":"k"}`, nil, 400, "idempotency_key"},
		{"server's field idempotency_hash", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"idempotency_hash":"h"}`, nil, 400, "idempotency_hash"},
		{"two values", "POST", "/v1/pipelines/demo/runs", triggerToken, `{} {}`, nil, 400, ""},
		{"empty body", "POST", "/v1/pipelines/demo/runs", triggerToken, ``, nil, 400, ""},
		{"array body", "POST", "/v1/pipelines/demo/runs", triggerToken, `[]`, nil, 400, ""},
		{"oversize body", "POST", "/v1/pipelines/demo/runs", triggerToken, big, nil, 413, ""},
		{"bad image tag", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"image_tag":"-bad tag"}`, nil, 400, "image_tag"},
		{"control char", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"build":"a\u0000b"}`, nil, 400, "build"},
		{"bad param name", "POST", "/v1/pipelines/demo/runs", triggerToken, `{"params":{"a b":"c"}}`, nil, 400, "params.a b"},
		{"engine resolve error", "POST", "/v1/pipelines/prod/runs", triggerToken, `{"build":"1"}`, nil, 400, "image_tag"},
		{"unknown pipeline", "POST", "/v1/pipelines/nope/runs", triggerToken, `{}`, nil, 404, "name"},
		{"traversal name", "POST", "/v1/pipelines/..%2F..%2Fetc/runs", triggerToken, `{}`, nil, 400, "name"},
		{"dot-dot name", "POST", "/v1/pipelines/%2e%2e/runs", triggerToken, `{}`, nil, 400, "name"},
		{"upper-case name", "POST", "/v1/pipelines/Demo/runs", triggerToken, `{}`, nil, 400, "name"},
		{"NUL in name", "POST", "/v1/pipelines/de%00mo/runs", triggerToken, `{}`, nil, 400, "name"},
		{"raw traversal", "POST", "/v1/pipelines/../../etc/runs", triggerToken, `{}`, nil, 404, ""},
		{"text content type", "POST", "/v1/pipelines/demo/runs", triggerToken, `{}`, map[string]string{"Content-Type": "text/plain"}, 415, "Content-Type"},
		{"bad idempotency key", "POST", "/v1/pipelines/demo/runs", triggerToken, `{}`, map[string]string{"Idempotency-Key": "has space"}, 400, "Idempotency-Key"},
		{"no token", "POST", "/v1/pipelines/demo/runs", "", `{}`, nil, 401, ""},
		{"wrong token", "POST", "/v1/pipelines/demo/runs", "not-a-token-at-all", `{}`, nil, 403, ""},
		{"basic auth", "POST", "/v1/pipelines/demo/runs", "", `{}`, map[string]string{"Authorization": "Basic dXNlcjpwYXNz"}, 403, ""},
		{"read token triggers", "POST", "/v1/pipelines/demo/runs", readToken, `{}`, nil, 403, ""},
		// plan
		{"plan unknown pipeline", "GET", "/v1/pipelines/nope/plan", triggerToken, nil, nil, 404, "name"},
		{"plan bad param", "GET", "/v1/pipelines/demo/plan?param=novalue", triggerToken, nil, nil, 400, "param"},
		{"plan read token", "GET", "/v1/pipelines/demo/plan", readToken, nil, nil, 403, ""},
		// runs
		{"list bad status", "GET", "/v1/runs?status=bogus", readToken, nil, nil, 400, "status"},
		{"list bad limit", "GET", "/v1/runs?limit=-1", readToken, nil, nil, 400, "limit"},
		{"list bad cursor", "GET", "/v1/runs?cursor=garbage", readToken, nil, nil, 400, ""},
		{"list no token", "GET", "/v1/runs", "", nil, nil, 401, ""},
		{"get unknown run", "GET", "/v1/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV", readToken, nil, nil, 404, "id"},
		{"get traversal id", "GET", "/v1/runs/..%2F..%2Fetc%2Fpasswd", readToken, nil, nil, 400, "id"},
		{"events unknown run", "GET", "/v1/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV/events", readToken, nil, nil, 404, "id"},
		{"events bad last id", "GET", "/v1/runs/" + existing.ID + "/events", readToken, nil, map[string]string{"Last-Event-ID": "x"}, 400, "Last-Event-ID"},
		{"cancel ended run", "POST", "/v1/runs/" + existing.ID + "/cancel", triggerToken, nil, nil, 409, ""},
		{"cancel unknown run", "POST", "/v1/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel", triggerToken, nil, nil, 404, ""},
		{"cancel with junk body", "POST", "/v1/runs/" + existing.ID + "/cancel", triggerToken, `{"x":1}`, nil, 400, "x"},
		{"cancel read token", "POST", "/v1/runs/" + existing.ID + "/cancel", readToken, nil, nil, 403, ""},
		// locks
		{"release trigger token", "POST", "/v1/locks/coolify:uuid-api/release", triggerToken, `{"fence":1,"reason":"x"}`, nil, 403, ""},
		{"release read token", "POST", "/v1/locks/coolify:uuid-api/release", readToken, `{"fence":1,"reason":"x"}`, nil, 403, ""},
		{"release no token", "POST", "/v1/locks/coolify:uuid-api/release", "", `{"fence":1,"reason":"x"}`, nil, 401, ""},
		{"release no reason", "POST", "/v1/locks/coolify:uuid-api/release", adminToken, `{"fence":1}`, nil, 400, "reason"},
		{"release nothing seen", "POST", "/v1/locks/coolify:uuid-api/release", adminToken, `{"reason":"crashed"}`, nil, 400, "fence"},
		{"release both seen", "POST", "/v1/locks/coolify:uuid-api/release", adminToken, `{"fence":1,"holder":"h","reason":"crashed"}`, nil, 400, "holder"},
		{"release fence as string", "POST", "/v1/locks/coolify:uuid-api/release", adminToken, `{"fence":"1","reason":"crashed"}`, nil, 400, "fence"},
		{"release stale fence", "POST", "/v1/locks/coolify:uuid-api/release", adminToken, `{"fence":999,"reason":"crashed"}`, nil, 409, ""},
		{"release free key", "POST", "/v1/locks/coolify:uuid-free/release", adminToken, `{"fence":1,"reason":"crashed"}`, nil, 404, "key"},
		{"release bad namespace", "POST", "/v1/locks/etc:passwd/release", adminToken, `{"fence":1,"reason":"x"}`, nil, 400, "key"},
		{"release traversal key", "POST", "/v1/locks/coolify:..%2F..%2Fetc/release", adminToken, `{"fence":1,"reason":"x"}`, nil, 400, "key"},
		{"release oversize", "POST", "/v1/locks/coolify:uuid-api/release", adminToken, big, nil, 413, ""},
		{"freeze trigger token", "POST", "/v1/locks/coolify:phase1/freeze", triggerToken, `{"message":"m","for":"1h"}`, nil, 403, ""},
		{"freeze no message", "POST", "/v1/locks/coolify:phase1/freeze", adminToken, `{"for":"1h"}`, nil, 400, "message"},
		{"freeze bad duration", "POST", "/v1/locks/coolify:phase1/freeze", adminToken, `{"message":"m","for":"soon"}`, nil, 400, "for"},
		{"freeze in the past", "POST", "/v1/locks/coolify:phase1/freeze", adminToken, `{"message":"m","until":"2001-01-01T00:00:00Z"}`, nil, 400, "until"},
		{"freeze bad time", "POST", "/v1/locks/coolify:phase1/freeze", adminToken, `{"message":"m","until":"tomorrow"}`, nil, 400, ""},
		{"freeze held key", "POST", "/v1/locks/coolify:uuid-api/freeze", adminToken, `{"message":"m","for":"1h"}`, nil, 409, ""},
		{"unfreeze not frozen", "DELETE", "/v1/locks/coolify:phase1/freeze", adminToken, nil, nil, 404, ""},
		{"unfreeze trigger token", "DELETE", "/v1/locks/coolify:phase1/freeze", triggerToken, nil, nil, 403, ""},
		{"audit trigger token", "GET", "/v1/locks/audit", triggerToken, nil, nil, 403, ""},
		{"audit no token", "GET", "/v1/locks/audit", "", nil, nil, 401, ""},
		{"audit bad limit", "GET", "/v1/locks/audit?limit=0", adminToken, nil, nil, 400, "limit"},
		{"locks no token", "GET", "/v1/locks", "", nil, nil, 401, ""},
		{"services no token", "GET", "/v1/services", "", nil, nil, 401, ""},
		// routing
		{"unknown route", "GET", "/v1/nothing", readToken, nil, nil, 404, ""},
		{"wrong method", "PUT", "/v1/runs", readToken, nil, nil, 405, ""},
		{"unknown provider", "POST", "/v1/webhooks/bitbucket", "", `{}`, nil, 404, ""},
		// The dashboard's pages answer pages (TestDashboardPagesAnswerHTML).
		{"metrics no token", "GET", "/metrics", "", nil, nil, 401, ""},
		{"static listing", "GET", "/static/", "", nil, nil, 404, ""},
		{"static traversal", "GET", "/static/..%2flayout.html", "", nil, nil, 404, ""},
		{"static traversal 2", "GET", "/static/%2e%2e/run.html", "", nil, nil, 404, ""},
	}
	before := f.runCount()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := request(c.method, c.path, c.token, c.body)
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			wantError(t, f.serve(req), c.status, c.field)
		})
	}
	if n := f.runCount(); n != before {
		t.Errorf("runs in the store: got %d, want %d (bad input must change nothing)", n, before)
	}
	info, err := f.locker.Get(ctx, "coolify:uuid-api")
	if err != nil || info.Fence != lease.Fence() {
		t.Errorf("the lease changed: got %+v, %v; want fence %d still held", info, err, lease.Fence())
	}
	if _, err := f.locker.Get(ctx, "coolify:phase1"); err == nil {
		t.Error("coolify:phase1 is frozen or held after refused freezes")
	}
	if entries, err := runs.LockAudit(ctx, f.store, 0); err != nil || len(entries) != 0 {
		t.Errorf("lock actions in the audit log after refused requests: got %+v, %v; want none", entries, err)
	}
}

func TestListAndGetRuns(t *testing.T) {
	f := newFixture(t)
	var demo []runs.Run
	for i := range 5 {
		demo = append(demo, f.trigger("demo", map[string]string{"build": string(rune('a' + i))}))
	}
	prod := f.trigger("prod", map[string]string{"image_tag": "v1"})
	f.finish(demo[0].ID)

	type page struct {
		Runs []runs.Run
		Next string
	}
	rec := f.do("GET", "/v1/runs?pipeline=demo&limit=2", readToken, nil)
	p := decodeJSON[page](t, rec)
	var seen []string
	for {
		if len(p.Runs) > 2 {
			t.Fatalf("page size: got %d, want at most 2", len(p.Runs))
		}
		for _, r := range p.Runs {
			if r.Pipeline != "demo" {
				t.Errorf("filter pipeline=demo returned a %s run", r.Pipeline)
			}
			seen = append(seen, r.ID)
		}
		if p.Next == "" {
			break
		}
		p = decodeJSON[page](t, f.do("GET", "/v1/runs?pipeline=demo&limit=2&cursor="+p.Next, readToken, nil))
	}
	if len(seen) != 5 || seen[0] != demo[4].ID || seen[4] != demo[0].ID {
		t.Errorf("demo runs newest first: got %v, want the 5 demo runs from %s to %s", seen, demo[4].ID, demo[0].ID)
	}

	p = decodeJSON[page](t, f.do("GET", "/v1/runs?status=succeeded", readToken, nil))
	if len(p.Runs) != 1 || p.Runs[0].ID != demo[0].ID {
		t.Errorf("status=succeeded: got %d runs, want only %s", len(p.Runs), demo[0].ID)
	}
	p = decodeJSON[page](t, f.do("GET", "/v1/runs?status=queued,succeeded", readToken, nil))
	if len(p.Runs) != 6 {
		t.Errorf("status=queued,succeeded: got %d runs, want 6", len(p.Runs))
	}

	rec = f.do("GET", "/v1/runs/"+prod.ID, triggerToken, nil)
	if rec.Code != 200 {
		t.Fatalf("get run: got %d, want 200", rec.Code)
	}
	if got := decodeJSON[runs.Run](t, rec); got.ID != prod.ID || got.Pipeline != "prod" || len(got.Steps) != 6 {
		t.Errorf("get run: got %+v", got)
	}
	if rec.Header().Get("ETag") == "" {
		t.Error("get run: no ETag")
	}
	pl := decodeJSON[struct{ Pipelines []string }](t, f.do("GET", "/v1/pipelines", readToken, nil))
	if strings.Join(pl.Pipelines, ",") != "demo,prod" {
		t.Errorf("pipelines: got %v, want [demo prod]", pl.Pipelines)
	}
}

func TestCancel(t *testing.T) {
	f := newFixture(t)
	r := f.trigger("demo", map[string]string{})
	rec := f.do("POST", "/v1/runs/"+r.ID+"/cancel", triggerToken, nil)
	if rec.Code != 200 {
		t.Fatalf("cancel: got %d, want 200: %s", rec.Code, rec.Body)
	}
	if got := decodeJSON[struct{ Run runs.Run }](t, rec).Run; got.Status != runs.StatusCanceled {
		t.Errorf("canceled run status: got %s, want canceled", got.Status)
	}
	wantError(t, f.do("POST", "/v1/runs/"+r.ID+"/cancel", adminToken, nil), 409, "")
}

func TestPlan(t *testing.T) {
	f := newFixture(t)
	rec := f.do("GET", "/v1/pipelines/demo/plan?image_tag=v9&param=region=eu", triggerToken, nil)
	if rec.Code != 200 {
		t.Fatalf("plan: got %d, want 200: %s", rec.Code, rec.Body)
	}
	if !strings.Contains(rec.Body.String(), `"coolify_requests":{"by_purpose":`) {
		t.Errorf("plan JSON lacks the run's expected Coolify requests (coolify_requests): %s", rec.Body)
	}
	got := decodeJSON[struct {
		Pipeline string
		Plan     orchestrator.Plan
	}](t, rec)
	if got.Pipeline != "demo" || got.Plan.Pipeline != "demo" || len(got.Plan.Services) != 2 ||
		got.Plan.Services[0].ImageTag == nil || got.Plan.Services[0].ImageTag.New != "v9" {
		t.Errorf("plan: got %+v", got)
	}
	if f.runCount() != 0 {
		t.Error("a plan created a run")
	}
}

// GET /v1/services answers the engine's services view with the read token; a store the
// engine cannot read is a 503, and no service an empty list, not null.
func TestServices(t *testing.T) {
	f := newFixture(t)
	at := time.Date(2026, 12, 3, 5, 26, 58, 0, time.UTC)
	f.engine.services = []orchestrator.Service{{
		UUID: "uuid-api", Names: []string{"api"},
		Pipelines: []orchestrator.ServicePipeline{
			{Pipeline: "late", Service: "api", Newest: &orchestrator.ServiceMark{RunID: "r43", Fence: 10, Phase: "phase2", At: at, Pipeline: "late", Build: "43"}},
			{Pipeline: "ops", Service: "api", Newest: &orchestrator.ServiceMark{RunID: "r7", Fence: 12, Phase: "phase2", At: at, Pipeline: "ops", Build: "7"}},
		},
		Mark: &orchestrator.ServiceMark{RunID: "r7", Fence: 12, Phase: "phase2", At: at, Pipeline: "ops", Build: "7"},
	}}
	rec := f.do("GET", "/v1/services", readToken, nil)
	if rec.Code != 200 {
		t.Fatalf("services: got %d, want 200: %s", rec.Code, rec.Body)
	}
	got := decodeJSON[struct{ Services []orchestrator.Service }](t, rec)
	if !reflect.DeepEqual(got.Services, f.engine.services) {
		t.Errorf("services: got %+v, want %+v", got.Services, f.engine.services)
	}
	if b := rec.Body.String(); !strings.Contains(b, `"newest":{"run_id":"r43"`) || !strings.Contains(b, `"mark":{"run_id":"r7"`) {
		t.Errorf("services body %s, want each pipeline's newest build and the mark by their JSON names", b)
	}

	f.engine.services = nil
	if rec := f.do("GET", "/v1/services", readToken, nil); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"services":[]`) {
		t.Errorf("no services: got %d %s, want 200 with an empty list", rec.Code, rec.Body)
	}
	f.engine.servicesErr = fmt.Errorf("services: get mark of %q: %w", "uuid-api", runs.ErrUnavailable)
	wantError(t, f.do("GET", "/v1/services", readToken, nil), 503, "")
}

// A handler that panics answers 500 with a JSON error, the panic and its stack are logged
// once, and the server goes on serving.
func TestHandlerPanicFailsOnlyItsRequest(t *testing.T) {
	f := newFixture(t)
	f.engine.pipelines[panicPipeline] = []string{"api"}
	srv := httptest.NewServer(f.h)
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+triggerToken)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := get("/v1/pipelines/" + panicPipeline + "/plan?image_tag=v1")
	if status != http.StatusInternalServerError || !strings.Contains(body, `"code":"internal"`) ||
		!strings.Contains(body, "panic") {
		t.Errorf("panicking plan: got %d %s, want 500 with an internal error naming the panic", status, body)
	}
	if strings.Contains(body, "goroutine") {
		t.Errorf("the answer carries the stack: %s", body)
	}
	logs := f.logs.String()
	if n := strings.Count(logs, `"msg":"request panicked"`); n != 1 {
		t.Errorf("panic logged %d times, want once:\n%s", n, logs)
	}
	if !strings.Contains(logs, "assignment to entry in nil map") || !strings.Contains(logs, `"stack":"goroutine`) {
		t.Errorf("log lacks the panic and its stack:\n%s", logs)
	}
	if !strings.Contains(logs, `"status":500`) {
		t.Errorf("access log lacks the 500:\n%s", logs)
	}
	if status, body := get("/v1/pipelines/demo/plan?image_tag=v9"); status != http.StatusOK {
		t.Errorf("plan after the panic: got %d %s, want 200", status, body)
	}
	if status, _ := get("/healthz"); status != http.StatusOK {
		t.Errorf("healthz after the panic: got %d, want 200", status)
	}
}

func TestLocksForceReleaseFreezeAudit(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	lease, err := f.locker.Acquire(ctx, locks.Request{Key: "coolify:uuid-api", Holder: "demo#41/api", Message: "deploying", TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	token := lease.Info().Token

	rec := f.do("GET", "/v1/locks", readToken, nil)
	if rec.Code != 200 {
		t.Fatalf("list locks: got %d", rec.Code)
	}
	if token == "" || strings.Contains(rec.Body.String(), token) {
		t.Fatalf("the lock listing shows the lease token (or the lease has none): %s", rec.Body)
	}
	ls := decodeJSON[struct{ Locks []locks.Info }](t, rec).Locks
	if len(ls) != 1 || ls[0].Key != "coolify:uuid-api" || ls[0].Holder != "demo#41/api" || ls[0].Fence != lease.Fence() ||
		ls[0].Message != "deploying" || ls[0].ExpiresAt.IsZero() || ls[0].AcquiredAt.IsZero() {
		t.Fatalf("locks: got %+v", ls)
	}

	// A stale fence names the current holder.
	rec = f.do("POST", "/v1/locks/coolify:uuid-api/release", adminToken, map[string]any{"fence": lease.Fence() + 1, "reason": "crashed"})
	e := wantError(t, rec, 409, "")
	if e.Error.Code != "lock_changed" || !strings.Contains(rec.Body.String(), "demo#41/api") {
		t.Errorf("stale fence: got %s, want lock_changed naming the holder", rec.Body)
	}

	rec = f.do("POST", "/v1/locks/coolify:uuid-api/release", adminToken,
		map[string]any{"fence": lease.Fence(), "reason": "runner crashed", "by": "alice"})
	if rec.Code != 200 {
		t.Fatalf("force release: got %d: %s", rec.Code, rec.Body)
	}
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted lease did not notice it was lost")
	}

	rec = f.do("POST", "/v1/locks/coolify:phase2/freeze", adminToken, map[string]any{"message": "release freeze", "for": "1h"})
	if rec.Code != 200 {
		t.Fatalf("freeze: got %d: %s", rec.Code, rec.Body)
	}
	if info, err := f.locker.Get(ctx, "coolify:phase2"); err != nil || !info.Frozen || info.Message != "release freeze" {
		t.Fatalf("after freeze: got %+v, %v", info, err)
	}
	wantError(t, f.do("POST", "/v1/locks/coolify:phase2/freeze", adminToken, map[string]any{"message": "again", "for": "1h"}), 409, "")
	if rec := f.do("DELETE", "/v1/locks/coolify:phase2/freeze", adminToken, map[string]string{"reason": "done"}); rec.Code != 204 {
		t.Fatalf("unfreeze: got %d: %s", rec.Code, rec.Body)
	}

	for _, tok := range []string{readToken, adminToken} {
		rec = f.do("GET", "/v1/locks/audit", tok, nil)
		if rec.Code != 200 {
			t.Fatalf("audit: got %d", rec.Code)
		}
		entries := decodeJSON[struct{ Entries []runs.LockAuditEntry }](t, rec).Entries
		if len(entries) != 3 {
			t.Fatalf("audit entries: got %d, want 3: %s", len(entries), rec.Body)
		}
		last := entries[len(entries)-1]
		if last.Action != "force_release" || last.By != "api:admin (alice)" || last.Reason != "runner crashed" {
			t.Errorf("force-release audit entry: got %+v", last)
		}
		if strings.Contains(rec.Body.String(), token) {
			t.Error("the audit shows the evicted lease's token")
		}
	}
	metrics := f.do("GET", "/metrics", readToken, nil).Body.String()
	if !strings.Contains(metrics, `orchestrator_lock_forced_releases_total{namespace="coolify"} 1`) {
		t.Errorf("metrics do not count the forced release")
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	f := newFixture(t)
	if rec := f.do("GET", "/healthz", "", nil); rec.Code != 200 {
		t.Errorf("healthz: got %d", rec.Code)
	}
	rec := f.do("GET", "/readyz", "", nil)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"ready"`) {
		t.Errorf("readyz: got %d %s", rec.Code, rec.Body)
	}

	f.metrics.RunEnded("demo", runs.StatusSucceeded)
	f.metrics.PhaseDone("demo", runs.Phase1, 2*time.Second)
	f.metrics.StepDone("demo", runs.Phase2, runs.StepHealthy, time.Second)
	f.metrics.OutsideRequest("coolify", "GET", "/applications/{uuid}", 200, 30*time.Millisecond)
	f.metrics.OutsideRequest("flagsmith", "PUT", "/features", 0, time.Millisecond)
	ctx := context.Background()
	lease, err := f.locker.Acquire(ctx, locks.Request{Key: "mobile:flagsmith:version_state", Holder: "demo#1/mobile", TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	f.trigger("demo", map[string]string{})

	body := f.do("GET", "/metrics", readToken, nil).Body.String()
	for _, want := range []string{
		`orchestrator_runs_total{pipeline="demo",status="succeeded"} 1`,
		`orchestrator_phase_duration_seconds_count{phase="phase1",pipeline="demo"} 1`,
		`orchestrator_step_duration_seconds_count{phase="phase2",pipeline="demo",status="healthy"} 1`,
		`orchestrator_lock_wait_seconds_count{namespace="mobile"} 1`,
		`orchestrator_lock_hold_seconds_count{namespace="mobile"} 1`,
		`orchestrator_outside_requests_total{method="GET",route="/applications/{uuid}",status="200",system="coolify"} 1`,
		`orchestrator_outside_requests_total{method="PUT",route="/features",status="error",system="flagsmith"} 1`,
		`orchestrator_http_requests_total{code="2xx",method="POST",route="/v1/pipelines/{name}/runs"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestPublicRead(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.PublicRead = true; c.Tokens.Read = "" })
	if rec := f.do("GET", "/v1/runs", "", nil); rec.Code != 200 {
		t.Errorf("public list: got %d, want 200", rec.Code)
	}
	if rec := f.do("GET", "/", "", nil); rec.Code != 200 {
		t.Errorf("public dashboard: got %d, want 200", rec.Code)
	}
	wantError(t, f.do("POST", "/v1/pipelines/demo/runs", "", `{}`), 401, "")
	wantError(t, f.do("GET", "/v1/locks/audit", "", nil), 401, "")
	wantError(t, f.do("GET", "/v1/runs", "wrong-token-xxxxxxxx", nil), 403, "")
}

func TestEmptyTokenDisablesRole(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.Tokens.Admin = "" })
	// "Bearer " with nothing after it must not match the empty admin token.
	req := request("POST", "/v1/locks/coolify:x/freeze", "", `{"message":"m","for":"1h"}`)
	req.Header.Set("Authorization", "Bearer ")
	wantError(t, f.serve(req), 403, "")
	wantError(t, f.do("POST", "/v1/locks/coolify:x/freeze", triggerToken, `{"message":"m","for":"1h"}`), 403, "")
}

func TestRateLimit(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.RateLimits.Trigger = config.Rate{PerSecond: 0.01, Burst: 2} })
	f.trigger("demo", map[string]string{})
	f.trigger("demo", map[string]string{})
	rec := f.do("POST", "/v1/pipelines/demo/runs", triggerToken, map[string]string{})
	wantError(t, rec, 429, "")
	if ra := rec.Header().Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After: got %q, want a positive number of seconds", ra)
	}
	// The bucket is the credential's: the same token from another address shares it, and
	// another token has its own.
	req := request("POST", "/v1/pipelines/demo/runs", triggerToken, map[string]string{})
	req.RemoteAddr = "192.0.2.99:1234"
	wantError(t, f.serve(req), 429, "")
	if rec := f.do("POST", "/v1/pipelines/demo/runs", adminToken, map[string]string{}); rec.Code != 202 {
		t.Errorf("another token: got %d, want 202", rec.Code)
	}
	if n := f.runCount(); n != 3 {
		t.Errorf("runs: got %d, want 3", n)
	}
}

func TestRequestIDInLog(t *testing.T) {
	f := newFixture(t)
	req := request("GET", "/v1/runs?token=query-secret", readToken, nil)
	req.Header.Set("X-Request-ID", "trace-abc-123")
	rec := f.serve(req)
	if got := rec.Header().Get("X-Request-ID"); got != "trace-abc-123" {
		t.Errorf("X-Request-ID: got %q, want the client's", got)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %s", line)
		}
		if m["msg"] == "http request" && m["request_id"] == "trace-abc-123" && m["route"] == "/v1/runs" {
			found = true
		}
	}
	if !found {
		t.Errorf("no access-log line with the request ID: %s", f.logs.String())
	}
	if strings.Contains(f.logs.String(), "query-secret") {
		t.Error("the log holds the query string")
	}
}

func TestNewServerNeedsDeps(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewServer without dependencies did not panic")
		}
	}()
	api.NewServer(api.Deps{})
}
