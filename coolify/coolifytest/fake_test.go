package coolifytest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/coolify/internal/spec"
	"github.com/deploy-orchestrator/orchestrator/internal/openapicheck"
)

// harness sends raw requests to a fake through the spec validator, so every answer the fake
// gives is checked against Coolify's OpenAPI spec (with the documented exceptions).
type harness struct {
	t     *testing.T
	srv   *coolifytest.Server
	hc    *http.Client
	token string
}

func newHarness(t *testing.T, opts ...coolifytest.Option) *harness {
	srv := coolifytest.NewServer(t, opts...)
	return &harness{t: t, srv: srv, token: srv.Token,
		hc: &http.Client{Transport: spec.Load(t).Transport(t, nil), Timeout: 10 * time.Second}}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %s", a.status, a.body)
	}
	return m
}

func (a answer) list(t *testing.T) []map[string]any {
	t.Helper()
	var l []map[string]any
	if err := json.Unmarshal(a.body, &l); err != nil {
		t.Fatalf("answer %d is not a JSON array: %s", a.status, a.body)
	}
	return l
}

func (h *harness) send(ctx context.Context, method, path string, body any, contentType string) answer {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.srv.URL+"/api/v1"+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: data}
}

func (h *harness) do(method, path string, body any) answer {
	h.t.Helper()
	ct := ""
	if body != nil {
		ct = "application/json"
	}
	return h.send(context.Background(), method, path, body, ct)
}

// omitValue marks requests that leave out an env PATCH's value, which the spec requires: the
// point of the test is what the real server does with them (it wipes the value).
var omitValue = openapicheck.ExpectInvalidRequest(context.Background(), "env PATCH without value, to show it wipes the value")

func wantStatus(t *testing.T, a answer, status int) {
	t.Helper()
	if a.status != status {
		t.Fatalf("got %d %s, want %d", a.status, a.body, status)
	}
}

func TestAppEnvPatchWipesOmittedValueAndResetsFlags(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api"})
	h.srv.SetEnv(app.UUID, coolifytest.Env{Key: "K", Value: coolifytest.Str("v"), IsRuntime: false, IsBuildtime: true,
		IsLiteral: true, IsMultiline: coolifytest.Bool(true), IsShownOnce: coolifytest.Bool(false), Comment: coolifytest.Str("c")})

	a := h.send(omitValue, "PATCH", "/applications/"+app.UUID+"/envs", map[string]any{"key": "K", "is_runtime": true}, "application/json")
	wantStatus(t, a, http.StatusCreated) // 201, not 200
	got := a.json(t)
	if got["value"] != nil || got["is_literal"] != false || got["is_multiline"] != nil || got["is_shown_once"] != nil {
		t.Errorf("got %v, want value null, is_literal false, is_multiline/is_shown_once null", got)
	}
	if got["is_runtime"] != true || got["is_buildtime"] != true || got["comment"] != "c" {
		t.Errorf("got %v, want is_runtime set, is_buildtime and comment kept (only changed when sent)", got)
	}
	// The preview twin is a separate row and was not touched.
	if v, _ := h.srv.EnvValue(app.UUID, "K", true); v != "v" {
		t.Errorf("twin value %q, want v", v)
	}
	// No upsert: an unknown key is a 404.
	wantStatus(t, h.do("PATCH", "/applications/"+app.UUID+"/envs", map[string]any{"key": "NEW", "value": "x"}), http.StatusNotFound)
	// The scope is chosen by is_preview.
	a = h.do("PATCH", "/applications/"+app.UUID+"/envs", map[string]any{"key": "K", "value": "pv", "is_preview": true})
	wantStatus(t, a, http.StatusCreated)
	if v, _ := h.srv.EnvValue(app.UUID, "K", true); v != "pv" {
		t.Errorf("twin value %q, want pv", v)
	}
}

func TestServiceEnvPatchChangesFlagsOnlyWhenSent(t *testing.T) {
	h := newHarness(t)
	svc := h.srv.AddService(coolifytest.Service{Name: "s"})
	h.srv.SetEnv(svc.UUID, coolifytest.Env{Key: "K", Value: coolifytest.Str("v"), IsLiteral: true, IsMultiline: coolifytest.Bool(true)})
	a := h.do("PATCH", "/services/"+svc.UUID+"/envs", map[string]any{"key": "K", "value": "w"})
	wantStatus(t, a, http.StatusCreated)
	if got := a.json(t); got["value"] != "w" || got["is_literal"] != true || got["is_multiline"] != true {
		t.Errorf("got %v, want value w and flags kept", got)
	}
	// The value is still always assigned.
	wantStatus(t, h.send(omitValue, "PATCH", "/services/"+svc.UUID+"/envs", map[string]any{"key": "K", "is_literal": false}, "application/json"), http.StatusCreated)
	if v, ok := h.srv.EnvValue(svc.UUID, "K", false); !ok || v != "" {
		t.Errorf("value %q, want wiped", v)
	}
}

func TestEnvCreate(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api"})
	svc := h.srv.AddService(coolifytest.Service{Name: "s"})
	a := h.do("POST", "/applications/"+app.UUID+"/envs", map[string]any{"key": "K", "value": "v", "comment": "why"})
	wantStatus(t, a, http.StatusCreated)
	if got := a.json(t); len(got) != 1 || got["uuid"] == "" {
		t.Errorf("got %v, want only a uuid", got)
	}
	rows := h.srv.Envs(app.UUID)
	if len(rows) != 2 || rows[0].IsPreview || !rows[1].IsPreview || *rows[1].Value != "v" || !rows[0].IsRuntime || !rows[0].IsBuildtime {
		t.Fatalf("got %+v, want the row (runtime+buildtime by default) and its preview twin", rows)
	}
	a = h.do("POST", "/applications/"+app.UUID+"/envs", map[string]any{"key": "K", "value": "again"})
	wantStatus(t, a, http.StatusConflict)
	if !strings.Contains(a.json(t)["message"].(string), "already exists") {
		t.Errorf("got %s", a.body)
	}
	// The twin already exists in the preview scope too.
	wantStatus(t, h.do("POST", "/applications/"+app.UUID+"/envs", map[string]any{"key": "K", "is_preview": true}), http.StatusConflict)
	wantStatus(t, h.do("POST", "/applications/"+app.UUID+"/envs", map[string]any{"key": "9bad"}), http.StatusUnprocessableEntity)
	wantStatus(t, h.do("POST", "/applications/nope/envs", map[string]any{"key": "K"}), http.StatusNotFound)

	// Services: the whole row comes back (spec differs), no twin, unknown keys ignored.
	a = h.do("POST", "/services/"+svc.UUID+"/envs", map[string]any{"key": "S", "value": "v", "is_preview": true})
	wantStatus(t, a, http.StatusCreated)
	if got := a.json(t); got["key"] != "S" || got["value"] != "v" || got["is_preview"] != false {
		t.Errorf("got %v, want the full non-preview row", got)
	}
	if n := len(h.srv.Envs(svc.UUID)); n != 1 {
		t.Errorf("got %d rows, want 1 (no twins for services)", n)
	}
	wantStatus(t, h.do("POST", "/services/"+svc.UUID+"/envs", map[string]any{"key": "S"}), http.StatusConflict)
}

func TestUnknownFieldsAndBadValuesAre422(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api"})
	h.srv.SetEnv(app.UUID, coolifytest.Env{Key: "K", Value: coolifytest.Str("v")})
	errorsOf := func(a answer) map[string]any {
		t.Helper()
		wantStatus(t, a, http.StatusUnprocessableEntity)
		m := a.json(t)
		if m["message"] != "Validation failed." {
			t.Errorf("message %v", m["message"])
		}
		errs, _ := m["errors"].(map[string]any)
		return errs
	}
	// The spec lists project_uuid; the code rejects it.
	if e := errorsOf(h.do("PATCH", "/applications/"+app.UUID, map[string]any{"project_uuid": "p", "name": "x"})); fmt.Sprint(e["project_uuid"]) != "[This field is not allowed.]" {
		t.Errorf("got %v", e)
	}
	if e := errorsOf(h.do("PATCH", "/applications/"+app.UUID, map[string]any{"docker_registry_image_tag": "-bad"})); e["docker_registry_image_tag"] == nil {
		t.Errorf("got %v", e)
	}
	// Some branches answer with plain strings rather than arrays.
	if e := errorsOf(h.do("PATCH", "/applications/"+app.UUID, map[string]any{"git_commit_sha": "-x"})); e["git_commit_sha"] != "The git commit sha format is invalid." {
		t.Errorf("got %v, want a plain string", e)
	}
	// The old field name is a 422 on single writes...
	errorsOf(h.do("POST", "/applications/"+app.UUID+"/envs", map[string]any{"key": "B", "is_build_time": true}))
	errorsOf(h.do("PATCH", "/applications/"+app.UUID+"/envs", map[string]any{"key": "K", "value": "v", "is_build_time": true}))
	// ...and silently dropped in bulk.
	a := h.do("PATCH", "/applications/"+app.UUID+"/envs/bulk", map[string]any{"data": []any{map[string]any{"key": "B", "value": "1", "is_build_time": false}}})
	wantStatus(t, a, http.StatusCreated)
	if got := a.list(t); len(got) != 1 || got[0]["is_buildtime"] != true {
		t.Errorf("got %v, want B created with the default is_buildtime", got)
	}
	if a, _ := h.srv.App(app.UUID); a.Name != "api" {
		t.Errorf("a rejected PATCH changed the name to %q", a.Name)
	}
	// Good PATCH: tag, name, domains; echoed on GET.
	wantStatus(t, h.do("PATCH", "/applications/"+app.UUID, map[string]any{"docker_registry_image_tag": "v2", "name": "api2",
		"domains": "https://a.example.com", "limits_memory": "512m"}), http.StatusOK)
	got := h.do("GET", "/applications/"+app.UUID, nil).json(t)
	if got["docker_registry_image_tag"] != "v2" || got["name"] != "api2" || got["fqdn"] != "https://a.example.com" {
		t.Errorf("got %v", got)
	}
	if a, _ := h.srv.App(app.UUID); a.Extra["limits_memory"] != "512m" {
		t.Errorf("extra fields %v", a.Extra)
	}
}

func TestPatchBodiesMustBeJSON(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api"})
	ctx := openapicheck.ExpectInvalidRequest(context.Background(), "testing the server's answer to malformed bodies")
	for _, tc := range []struct {
		body, ct, want string
	}{
		{`{"name":"x"}`, "text/plain", "Content-Type must be application/json."},
		{`{"name":`, "application/json", "Invalid JSON."},
		{`{}`, "application/json", "Empty JSON."},
		{``, "application/json", "Empty JSON."},
	} {
		for _, path := range []string{"/applications/" + app.UUID, "/applications/" + app.UUID + "/envs", "/applications/" + app.UUID + "/envs/bulk"} {
			a := h.send(ctx, "PATCH", path, tc.body, tc.ct)
			wantStatus(t, a, http.StatusBadRequest)
			if m := a.json(t); m["message"] != "Invalid request." || m["error"] != tc.want {
				t.Errorf("PATCH %s %q: got %v, want error %q", path, tc.body, m, tc.want)
			}
		}
	}
	a := h.do("PATCH", "/applications/"+app.UUID+"/envs/bulk", map[string]any{"data": []any{}})
	wantStatus(t, a, http.StatusBadRequest)
	if m := a.json(t); m["message"] != "Bulk data is required." {
		t.Errorf("got %v", m)
	}
}

func TestBulkUpsertsAndStopsAtTheFirstInvalidItem(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api"})
	h.srv.SetEnv(app.UUID, coolifytest.Env{Key: "A", Value: coolifytest.Str("old"), IsLiteral: true})
	a := h.do("PATCH", "/applications/"+app.UUID+"/envs/bulk", map[string]any{"data": []any{
		map[string]any{"key": "A", "value": "new", "is_literal": true},
		map[string]any{"key": "B", "value": "b"},
		map[string]any{"key": "bad key!", "value": "x"},
		map[string]any{"key": "C", "value": "c"},
	}})
	wantStatus(t, a, http.StatusUnprocessableEntity)
	if v, _ := h.srv.EnvValue(app.UUID, "A", false); v != "new" {
		t.Errorf("A = %q, want the earlier item saved", v)
	}
	if _, ok := h.srv.EnvValue(app.UUID, "B", false); !ok {
		t.Error("B not saved")
	}
	if _, ok := h.srv.EnvValue(app.UUID, "C", false); ok {
		t.Error("C saved after the invalid item")
	}
}

func TestListEnvsOrderAndHiddenValues(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api"})
	for _, k := range []string{"A", "B"} {
		h.srv.SetEnv(app.UUID, coolifytest.Env{Key: k, Value: coolifytest.Str(k + "v")})
	}
	var keys []string
	for _, row := range h.do("GET", "/applications/"+app.UUID+"/envs", nil).list(t) {
		keys = append(keys, fmt.Sprintf("%s/%v/%v", row["key"], row["is_preview"], row["value"]))
	}
	if got := strings.Join(keys, " "); got != "A/false/Av B/false/Bv A/true/Av B/true/Bv" {
		t.Errorf("got %s, want non-preview rows by id, then preview rows", got)
	}
	h.srv.AddToken("2|plain", coolifytest.AbilityRead)
	h.token = "2|plain"
	for _, row := range h.do("GET", "/applications/"+app.UUID+"/envs", nil).list(t) {
		if _, ok := row["value"]; ok {
			t.Errorf("value present without read:sensitive: %v", row)
		}
		if _, ok := row["real_value"]; ok {
			t.Errorf("real_value present without read:sensitive: %v", row)
		}
	}
	h.token = h.srv.Token
	if d := h.do("DELETE", "/applications/"+app.UUID+"/envs/"+h.srv.Envs(app.UUID)[0].UUID, nil); d.status != 200 {
		t.Errorf("delete: %d %s", d.status, d.body)
	}
	wantStatus(t, h.do("DELETE", "/applications/"+app.UUID+"/envs/nope", nil), http.StatusNotFound)
}

// Laravel's global middleware trims every string of a request and turns an empty one into
// null, so a value is stored trimmed, and an empty value is listed as null (with
// read:sensitive) — not absent, as a hidden one is.
func TestEnvValuesAreTrimmedAndEmptyIsNull(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api"})
	pem := "-----BEGIN KEY-----\nabc\n-----END KEY-----\n"
	a := h.do("PATCH", "/applications/"+app.UUID+"/envs/bulk", map[string]any{"data": []any{
		map[string]any{"key": "PEM", "value": pem, "comment": "  the key  "},
		map[string]any{"key": "EMPTY", "value": ""},
		map[string]any{"key": "BLANK", "value": " \t\u00a0\ufeff"},
	}})
	wantStatus(t, a, http.StatusCreated)
	got := map[string]map[string]any{}
	for _, row := range h.do("GET", "/applications/"+app.UUID+"/envs", nil).list(t) {
		if row["is_preview"] == false {
			got[row["key"].(string)] = row
		}
	}
	if v := got["PEM"]["value"]; v != strings.TrimSpace(pem) {
		t.Errorf("PEM stored as %q, want it trimmed", v)
	}
	if c := got["PEM"]["comment"]; c != "the key" {
		t.Errorf("comment stored as %q, want it trimmed", c)
	}
	for _, k := range []string{"EMPTY", "BLANK"} {
		if v, ok := got[k]["value"]; !ok || v != nil {
			t.Errorf("%s listed as %v (present %v), want null", k, v, ok)
		}
	}
}

// The controllers hide the database ids (removeSensitiveData), and authentication runs
// before the API-enabled check.
func TestAnswersHideIDsAndAuthComesFirst(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api"})
	svc := h.srv.AddService(coolifytest.Service{Name: "s"})
	h.srv.SetEnv(app.UUID, coolifytest.Env{Key: "A", Value: coolifytest.Str("v")})
	objects := []map[string]any{h.do("GET", "/applications/"+app.UUID, nil).json(t), h.do("GET", "/services/"+svc.UUID, nil).json(t)}
	objects = append(objects, h.do("GET", "/applications/"+app.UUID+"/envs", nil).list(t)...)
	for _, o := range objects {
		for _, hidden := range []string{"id", "resourceable_id", "resourceable_type"} {
			if _, ok := o[hidden]; ok {
				t.Errorf("%s present in %v", hidden, o)
			}
		}
	}
	h.srv.SetAPIEnabled(false)
	wantStatus(t, h.do("GET", "/applications/"+app.UUID, nil), http.StatusForbidden)
	h.token = "9|unknown"
	wantStatus(t, h.do("GET", "/applications/"+app.UUID, nil), http.StatusUnauthorized)
}

func TestDeploymentQueue(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t, coolifytest.WithClock(clock), coolifytest.WithConcurrentBuilds(2),
		coolifytest.WithTiming(coolifytest.Timing{Queued: time.Second, RunMin: 10 * time.Second, RunMax: 10 * time.Second}))
	app := h.srv.AddApplication(coolifytest.Application{Name: "api", ImageName: "acme/api", ImageTag: "v1", NotRunning: true})
	h.srv.SetEnv(app.UUID, coolifytest.Env{Key: "K", Value: coolifytest.Str("1")})
	deploy := func(q string) map[string]any {
		t.Helper()
		a := h.do("POST", "/deploy?uuid="+app.UUID+q, nil)
		wantStatus(t, a, http.StatusOK)
		return a.json(t)["deployments"].([]any)[0].(map[string]any)
	}
	status := func(id string) string {
		t.Helper()
		return h.do("GET", "/deployments/"+id, nil).json(t)["status"].(string)
	}
	appStatus := func() string {
		t.Helper()
		return h.do("GET", "/applications/"+app.UUID, nil).json(t)["status"].(string)
	}
	first := deploy("")["deployment_uuid"].(string)
	if s := status(first); s != "queued" || appStatus() != "exited" {
		t.Fatalf("got %s/%s, want queued/exited", s, appStatus())
	}
	// Changes made while queued are picked up: the job reads them when it starts.
	wantStatus(t, h.do("PATCH", "/applications/"+app.UUID, map[string]any{"docker_registry_image_tag": "v2"}), 200)
	clock.Advance(time.Second)
	if s := status(first); s != "in_progress" || appStatus() != "starting:unknown" {
		t.Fatalf("got %s/%s, want in_progress/starting:unknown", s, appStatus())
	}
	// Changes made while in progress are not.
	wantStatus(t, h.do("PATCH", "/applications/"+app.UUID, map[string]any{"docker_registry_image_tag": "v3"}), 200)
	h.srv.SetEnv(app.UUID, coolifytest.Env{Key: "K", Value: coolifytest.Str("2")})
	// A second deploy is dropped while one is active; force queues it behind (one in_progress per app).
	dropped := deploy("")
	if dropped["message"] != "Deployment already queued for this commit." {
		t.Errorf("got %v", dropped)
	}
	wantStatus(t, h.do("GET", "/deployments/"+dropped["deployment_uuid"].(string), nil), http.StatusNotFound)
	second := deploy("&force=true")["deployment_uuid"].(string)
	clock.Advance(5 * time.Second)
	if s := status(second); s != "queued" {
		t.Errorf("second is %s, want queued behind the first", s)
	}
	clock.Advance(5 * time.Second)
	if s1, s2 := status(first), status(second); s1 != "finished" || s2 != "in_progress" {
		t.Fatalf("got %s/%s, want finished/in_progress", s1, s2)
	}
	a, _ := h.srv.App(app.UUID)
	if a.Status != "running:unknown" || a.DeployedImageTag != "v2" || a.DeployedEnv["K"] != "1" {
		t.Errorf("after the first: %+v, want running:unknown with v2 and K=1", a)
	}
	clock.Advance(10 * time.Second)
	if a, _ := h.srv.App(app.UUID); a.DeployedImageTag != "v3" || a.DeployedEnv["K"] != "2" {
		t.Errorf("after the second: tag %q env %v, want v3 and K=2", a.DeployedImageTag, a.DeployedEnv)
	}
	// Listing: newest first with a count; /deployments lists only active rows.
	l := h.do("GET", "/deployments/applications/"+app.UUID+"?skip=0&take=1", nil).json(t)
	if l["count"] != float64(2) || len(l["deployments"].([]any)) != 1 || l["deployments"].([]any)[0].(map[string]any)["deployment_uuid"] != second {
		t.Errorf("got %v", l)
	}
	if got := h.do("GET", "/deployments", nil).list(t); len(got) != 0 {
		t.Errorf("got %v, want no active deployments", got)
	}
	wantStatus(t, h.do("GET", "/deployments/applications/nope", nil), http.StatusNotFound)
}

// GET /deployments is an array while the rows' database order is their id order, and an
// object keyed by database position once a row was written after a newer one was created, as
// Laravel encodes the key-preserving sort of the real controller.
func TestActiveDeploymentsKeepTheirDatabaseKeys(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t, coolifytest.WithClock(clock), coolifytest.WithConcurrentBuilds(1),
		coolifytest.WithTiming(coolifytest.Timing{RunMin: 10 * time.Second, RunMax: 10 * time.Second}))
	deploy := func(name string) string {
		app := h.srv.AddApplication(coolifytest.Application{Name: name})
		return h.do("POST", "/deploy?uuid="+app.UUID, nil).json(t)["deployments"].([]any)[0].(map[string]any)["deployment_uuid"].(string)
	}
	a := deploy("a")
	clock.Advance(time.Millisecond) // a starts
	b := deploy("b")                // queued behind a (one build at a time)
	clock.Advance(time.Second)
	c := deploy("c")
	var rows []string
	for _, d := range h.do("GET", "/deployments", nil).list(t) {
		rows = append(rows, d["deployment_uuid"].(string))
	}
	if fmt.Sprint(rows) != fmt.Sprint([]string{a, b, c}) {
		t.Fatalf("before b starts: got %v, want the array [a b c]", rows)
	}

	clock.Advance(10 * time.Second) // a ends, b starts: b's row is now written after c's
	ans := h.do("GET", "/deployments", nil)
	byPos := ans.json(t)
	if len(byPos) != 2 || byPos["1"].(map[string]any)["deployment_uuid"] != b || byPos["0"].(map[string]any)["deployment_uuid"] != c {
		t.Fatalf("after b starts: got %s, want {\"1\": b, \"0\": c}", ans.body)
	}
	if bytes.Index(ans.body, []byte(b)) > bytes.Index(ans.body, []byte(c)) {
		t.Errorf("got %s, want the rows in id order (b first)", ans.body)
	}
}

func TestConcurrentBuildsAndQueueLimit(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t, coolifytest.WithClock(clock), coolifytest.WithConcurrentBuilds(1), coolifytest.WithQueueLimit(2, 60*time.Second),
		coolifytest.WithTiming(coolifytest.Timing{RunMin: 10 * time.Second, RunMax: 10 * time.Second}))
	var apps []string
	for i := range 4 {
		apps = append(apps, h.srv.AddApplication(coolifytest.Application{Name: fmt.Sprint("app", i)}).UUID)
	}
	for _, u := range apps[:3] {
		wantStatus(t, h.do("POST", "/deploy?uuid="+u, nil), http.StatusOK)
	}
	clock.Advance(time.Millisecond)
	// One build at a time: one in progress, two queued, and the queue is now full.
	var active []string
	for _, d := range h.do("GET", "/deployments", nil).list(t) {
		active = append(active, d["status"].(string))
	}
	if fmt.Sprint(active) != "[in_progress queued queued]" {
		t.Fatalf("got %v", active)
	}
	a := h.do("POST", "/deploy?uuid="+apps[3], nil)
	wantStatus(t, a, http.StatusTooManyRequests)
	if a.header.Get("Retry-After") != "60" {
		t.Errorf("Retry-After %q, want 60", a.header.Get("Retry-After"))
	}
	// /start does not check the limit and answers a uuid that is never stored.
	a = h.do("POST", "/applications/"+apps[3]+"/start", nil)
	wantStatus(t, a, http.StatusOK)
	wantStatus(t, h.do("GET", "/deployments/"+a.json(t)["deployment_uuid"].(string), nil), http.StatusNotFound)
	// Cancelling the running one lets the next start.
	running := h.srv.Deployments(apps[0])[0].UUID
	a = h.do("POST", "/deployments/"+running+"/cancel", nil)
	wantStatus(t, a, http.StatusOK)
	if m := a.json(t); m["status"] != "cancelled-by-user" || m["deployment_uuid"] != running {
		t.Errorf("got %v", m)
	}
	if d := h.srv.Deployments(apps[1])[0]; d.Status != "in_progress" {
		t.Errorf("next is %s, want in_progress", d.Status)
	}
	a = h.do("POST", "/deployments/"+running+"/cancel", nil)
	wantStatus(t, a, http.StatusBadRequest)
	if m := a.json(t); m["message"] != "Deployment cannot be cancelled. Current status: cancelled-by-user" {
		t.Errorf("got %v", m)
	}
	wantStatus(t, h.do("POST", "/deployments/nope/cancel", nil), http.StatusNotFound)
}

func TestDeployParameters(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api", Tags: []string{"prod"}})
	svc := h.srv.AddService(coolifytest.Service{Name: "s"})
	wantStatus(t, h.do("POST", "/deploy", nil), http.StatusBadRequest)
	wantStatus(t, h.do("POST", "/deploy?uuid=x&tag=y", nil), http.StatusBadRequest)
	wantStatus(t, h.do("POST", "/deploy?uuid=nope", nil), http.StatusNotFound)
	// JSON body, unknown uuids skipped when others exist, services give no deployment uuid.
	a := h.do("POST", "/deploy", map[string]any{"uuid": "nope," + app.UUID + "," + svc.UUID})
	wantStatus(t, a, http.StatusOK)
	items := a.json(t)["deployments"].([]any)
	if len(items) != 2 || items[0].(map[string]any)["deployment_uuid"] == nil || items[1].(map[string]any)["deployment_uuid"] != nil {
		t.Fatalf("got %v", items)
	}
	if m := items[1].(map[string]any)["message"].(string); !strings.Contains(m, "It could take a while") {
		t.Errorf("service message %q", m)
	}
	// Tag mode answers a different shape.
	a = h.do("POST", "/deploy?tag=prod&force=true", nil)
	wantStatus(t, a, http.StatusOK)
	if m := a.json(t); m["message"] == nil || m["details"] == nil || m["deployments"] != nil {
		t.Errorf("got %v", m)
	}
	// GET on action routes is gone since v4.2.0.
	for _, p := range []string{"/deploy?uuid=" + app.UUID, "/applications/" + app.UUID + "/restart", "/applications/" + app.UUID + "/start"} {
		a := h.do("GET", p, nil)
		wantStatus(t, a, http.StatusMethodNotAllowed)
		if a.header.Get("Allow") != "POST" || a.json(t)["message"] != "This endpoint has changed to a POST request." {
			t.Errorf("GET %s: %v %s", p, a.header, a.body)
		}
	}
}

// A service's start or restart is a queued job, as in Coolify: the status reads as before
// until the job runs, "starting:unhealthy" while it runs, "exited" until the status refresh
// (WithStatusLag) sees the containers, then running.
func TestServiceActions(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t, coolifytest.WithClock(clock), coolifytest.WithStatusLag(3*time.Second),
		coolifytest.WithTiming(coolifytest.Timing{Queued: time.Second, RunMin: 2 * time.Second, RunMax: 2 * time.Second}))
	svc := h.srv.AddService(coolifytest.Service{Name: "s"})
	status := func(want string) {
		t.Helper()
		if s, _ := h.srv.ServiceState(svc.UUID); s.Status != want {
			t.Errorf("at %s: status %q, want %q", clock.Now().Format(time.TimeOnly), s.Status, want)
		}
		if got := h.do("GET", "/services/"+svc.UUID, nil).json(t)["status"]; got != want {
			t.Errorf("at %s: GET answers status %q, want %q", clock.Now().Format(time.TimeOnly), got, want)
		}
	}
	wantStatus(t, h.do("POST", "/services/"+svc.UUID+"/start", nil), http.StatusBadRequest) // already running
	wantStatus(t, h.do("POST", "/services/"+svc.UUID+"/stop", nil), http.StatusOK)
	status("exited")
	wantStatus(t, h.do("POST", "/services/"+svc.UUID+"/stop", nil), http.StatusBadRequest)
	wantStatus(t, h.do("POST", "/services/"+svc.UUID+"/start", nil), http.StatusOK)
	status("exited") // the job is queued
	clock.Advance(time.Second)
	status("starting:unhealthy")
	clock.Advance(2 * time.Second)
	status("exited") // the job ended; the status check has not seen the containers yet
	clock.Advance(3 * time.Second)
	status("running:healthy")
	h.srv.SetServiceHealthy(svc.UUID, false)
	status("running:unhealthy")
	wantStatus(t, h.do("POST", "/services/"+svc.UUID+"/restart", nil), http.StatusOK)
	status("running:unhealthy") // the stored status, until the job runs
	clock.Advance(time.Second)
	status("starting:unhealthy")
	wantStatus(t, h.do("POST", "/services/nope/restart", nil), http.StatusNotFound)
}

func TestAuthAbilitiesAndRateLimit(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t, coolifytest.WithClock(clock), coolifytest.WithRateLimit(2, time.Minute))
	app := h.srv.AddApplication(coolifytest.Application{Name: "api"})
	h.token = "9|unknown"
	a := h.do("GET", "/applications/"+app.UUID, nil)
	wantStatus(t, a, http.StatusUnauthorized)
	if a.json(t)["message"] != "Unauthenticated." {
		t.Errorf("got %s", a.body)
	}
	h.token = ""
	wantStatus(t, h.send(openapicheck.ExpectInvalidRequest(context.Background(), "no token on purpose"), "GET", "/applications", nil, ""), http.StatusUnauthorized)
	wantStatus(t, h.do("GET", "/health", nil), http.StatusOK) // no auth needed

	h.srv.AddToken("2|deployer", coolifytest.AbilityDeploy)
	h.token = "2|deployer"
	a = h.do("GET", "/applications/"+app.UUID, nil)
	wantStatus(t, a, http.StatusForbidden)
	if a.json(t)["message"] != "Missing required permissions: read" {
		t.Errorf("got %s", a.body)
	}
	wantStatus(t, h.do("POST", "/deploy?uuid="+app.UUID, nil), http.StatusOK)
	a = h.do("POST", "/deploy?uuid="+app.UUID, nil) // third request in the window
	wantStatus(t, a, http.StatusTooManyRequests)
	if a.header.Get("Retry-After") != "60" {
		t.Errorf("Retry-After %q", a.header.Get("Retry-After"))
	}
	clock.Advance(61 * time.Second)
	wantStatus(t, h.do("POST", "/deployments/nope/cancel", nil), http.StatusNotFound)
	h.srv.RemoveToken("2|deployer")
	wantStatus(t, h.do("POST", "/deployments/nope/cancel", nil), http.StatusUnauthorized)
}

func TestFaultKnobs(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api", ImageTag: "v1"})
	// Route and method select; n counts; others pass.
	h.srv.FailNext(2, coolifytest.Fault{Method: "PATCH", Route: "/applications/{uuid}", Status: 503, RetryAfter: 1500 * time.Millisecond})
	wantStatus(t, h.do("GET", "/applications/"+app.UUID, nil), 200)
	a := h.do("PATCH", "/applications/"+app.UUID, map[string]any{"docker_registry_image_tag": "v2"})
	wantStatus(t, a, 503)
	if a.header.Get("Retry-After") != "2" {
		t.Errorf("Retry-After %q, want 2 (rounded up)", a.header.Get("Retry-After"))
	}
	wantStatus(t, h.do("PATCH", "/applications/"+app.UUID, map[string]any{"docker_registry_image_tag": "v2"}), 503)
	if a, _ := h.srv.App(app.UUID); a.ImageTag != "v1" {
		t.Errorf("a fault before the handler changed the tag to %q", a.ImageTag)
	}
	wantStatus(t, h.do("PATCH", "/applications/"+app.UUID, map[string]any{"docker_registry_image_tag": "v2"}), 200)
	// UUID narrows to one resource, on the path or in /deploy's query.
	other := h.srv.AddApplication(coolifytest.Application{Name: "other"})
	h.srv.FailNext(1, coolifytest.Fault{UUID: other.UUID, Status: 502})
	h.srv.FailNext(1, coolifytest.Fault{Route: "/deploy", UUID: app.UUID, Status: 504})
	wantStatus(t, h.do("GET", "/applications/"+app.UUID, nil), 200)
	wantStatus(t, h.do("POST", "/deploy?uuid="+other.UUID, nil), 502)
	wantStatus(t, h.do("POST", "/deploy?uuid="+other.UUID, nil), 200)
	wantStatus(t, h.do("POST", "/deploy?uuid="+app.UUID, nil), 504)
	// AfterEffect: the change is made, the caller hears an error.
	h.srv.FailNext(1, coolifytest.Fault{Route: "/applications/{uuid}", Status: 500, AfterEffect: true})
	wantStatus(t, h.do("PATCH", "/applications/"+app.UUID, map[string]any{"docker_registry_image_tag": "v3"}), 500)
	if a, _ := h.srv.App(app.UUID); a.ImageTag != "v3" {
		t.Errorf("tag %q, want v3 (the change happened)", a.ImageTag)
	}
	// A dropped connection is a transport error for the caller and status 0 in the log. (A fresh
	// connection: Go's transport itself retries an idempotent request whose reused one drops.)
	h.srv.FailNext(1, coolifytest.Fault{Status: coolifytest.DropConnection})
	req, _ := http.NewRequest("GET", h.srv.URL+"/api/v1/applications/"+app.UUID, nil)
	req.Header.Set("Authorization", "Bearer "+h.srv.Token)
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := fresh.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("got an answer, want a dropped connection")
	}
	reqs := h.srv.Requests()
	last := reqs[len(reqs)-1]
	if last.Status != 0 || last.Fault != "connection dropped" {
		t.Errorf("logged %+v", last)
	}
	// Latency, and a client that gives up during it.
	h.srv.SetRouteLatency("GET", "/applications/{uuid}", time.Minute, time.Minute)
	// The client gives up once the fake holds its request (not on a timer, which could fire
	// before the request is even sent, nor on the client's WroteRequest trace, which fires
	// before the transport flushes its buffer).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/api/v1/applications/"+app.UUID, nil)
	req.Header.Set("Authorization", "Bearer "+h.srv.Token)
	done := make(chan error, 1)
	go func() {
		resp, err := h.hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, func() bool { return h.srv.InFlight() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the cancellation", err)
	}
	waitFor(t, func() bool {
		r := h.srv.Requests()
		return len(r) == len(reqs)+1 && r[len(r)-1].Fault == "client went away during latency" && r[len(r)-1].Status == 0
	})
	h.srv.SetRouteLatency("GET", "/applications/{uuid}", 20*time.Millisecond, 20*time.Millisecond)
	start := time.Now()
	wantStatus(t, h.do("GET", "/applications/"+app.UUID, nil), 200)
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("answered in %s, want at least the 20ms latency", d)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRequestLogUnderConcurrency(t *testing.T) {
	h := newHarness(t)
	app := h.srv.AddApplication(coolifytest.Application{Name: "api"})
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("PATCH", h.srv.URL+"/api/v1/applications/"+app.UUID+"/envs/bulk",
				strings.NewReader(fmt.Sprintf(`{"data":[{"key":"K%d","value":"v"}]}`, i)))
			req.Header.Set("Authorization", "Bearer "+h.srv.Token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Orchestrator-Run", fmt.Sprint("run-", i))
			req.Header.Set("X-Orchestrator-Fence", fmt.Sprint(i))
			resp, err := h.hc.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		}()
	}
	wg.Wait()
	reqs := h.srv.RequestsTo("PATCH /applications/{uuid}/envs/bulk")
	if len(reqs) != n {
		t.Fatalf("got %d logged, want %d", len(reqs), n)
	}
	seen := map[string]bool{}
	for i, r := range reqs {
		if i > 0 && r.Seq <= reqs[i-1].Seq {
			t.Errorf("seq %d after %d", r.Seq, reqs[i-1].Seq)
		}
		if r.Status != 201 || r.End.Before(r.Start) || r.TokenID != "1" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("got %+v", r)
		}
		if r.Header.Get("Authorization") != "" || bytes.Contains([]byte(fmt.Sprint(r.Header)), []byte("coolifytest-default-token")) {
			t.Error("the token was kept in the log")
		}
		if r.RunID != "run-"+r.Fence || !bytes.Contains(r.Body, []byte(`"K`+r.Fence+`"`)) {
			t.Errorf("run %q fence %q body %s do not belong together", r.RunID, r.Fence, r.Body)
		}
		seen[r.RunID] = true
	}
	if len(seen) != n || len(h.srv.Envs(app.UUID)) != 2*n {
		t.Errorf("got %d runs and %d rows, want %d and %d", len(seen), len(h.srv.Envs(app.UUID)), n, 2*n)
	}
}

// New works without a *testing.T, as the demo uses it: a plain handler on any server.
func TestNewIsAPlainHandler(t *testing.T) {
	f := coolifytest.New(coolifytest.WithTiming(coolifytest.DemoTiming), coolifytest.WithSeed(7))
	app := f.AddApplication(coolifytest.Application{Name: "api", HealthCheckEnabled: true})
	hs := httptest.NewServer(f)
	defer hs.Close()
	validated := &http.Client{Transport: spec.Load(t).Transport(t, nil)}
	for path, want := range map[string]int{
		"/api/health":                         200,
		"/api/v1/health":                      200,
		"/_fake/apps/" + app.UUID + "/health": 200,
		"/_fake/apps/nope/health":             404,
		"/api/v1/applications/" + app.UUID:    401,
		"/not/a/route":                        404,
	} {
		hc := validated
		ctx := openapicheck.ExpectInvalidRequest(context.Background(), "no token on purpose")
		if !strings.HasPrefix(path, "/api/") {
			hc = http.DefaultClient // not Coolify routes: nothing in the spec to check against
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: got %d, want %d", path, resp.StatusCode, want)
		}
	}
	f.SetAppHealthy(app.UUID, false)
	resp, err := http.Get(hs.URL + "/_fake/apps/" + app.UUID + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("unhealthy app health: got %d, want 503", resp.StatusCode)
	}
	if a, _ := f.App(app.UUID); a.Status != "running:unhealthy" {
		t.Errorf("status %q", a.Status)
	}
}

func TestSeedingPanicsOnUnknownResource(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("SetEnv on an unknown resource did not panic")
		}
	}()
	coolifytest.New().SetEnv("nope", coolifytest.Env{Key: "K"})
}

func TestStatusLagsTheRealState(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t, coolifytest.WithClock(clock), coolifytest.WithStatusLag(5*time.Second),
		coolifytest.WithTiming(coolifytest.Timing{RunMin: time.Second, RunMax: time.Second}))
	app := h.srv.AddApplication(coolifytest.Application{Name: "api", NotRunning: true})
	reported := func() string {
		t.Helper()
		return h.do("GET", "/applications/"+app.UUID, nil).json(t)["status"].(string)
	}
	if s := reported(); s != "exited" {
		t.Fatalf("seeded status %q, want exited at once", s)
	}
	wantStatus(t, h.do("POST", "/deploy?uuid="+app.UUID, nil), http.StatusOK)
	clock.Advance(2 * time.Second) // started at 0, finished at 1s
	if d := h.srv.Deployments(app.UUID)[0]; d.Status != "finished" {
		t.Fatalf("deployment %s, want finished", d.Status)
	}
	for _, step := range []struct {
		advance time.Duration
		want    string
	}{{0, "exited"}, {3500 * time.Millisecond, "starting:unknown"}, {time.Second, "running:unknown"}} {
		clock.Advance(step.advance)
		if s := reported(); s != step.want {
			t.Errorf("at +%s: reported %q, want %q", step.advance, s, step.want)
		}
	}
	if a, _ := h.srv.App(app.UUID); a.Status != "running:unknown" {
		t.Errorf("inspector sees %q, want the real status", a.Status)
	}
}

func TestCancelBugStallsTheQueue(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t, coolifytest.WithClock(clock), coolifytest.WithCancelBug(), coolifytest.WithConcurrentBuilds(1),
		coolifytest.WithTiming(coolifytest.Timing{RunMin: time.Second, RunMax: time.Second}))
	a := h.srv.AddApplication(coolifytest.Application{Name: "a"})
	b := h.srv.AddApplication(coolifytest.Application{Name: "b"})
	wantStatus(t, h.do("POST", "/deploy?uuid="+a.UUID, nil), http.StatusOK)
	wantStatus(t, h.do("POST", "/deploy?uuid="+b.UUID, nil), http.StatusOK)
	first := h.srv.Deployments(a.UUID)[0].UUID
	r := h.do("POST", "/deployments/"+first+"/cancel", nil)
	wantStatus(t, r, http.StatusInternalServerError)
	if m := r.json(t)["message"].(string); !strings.HasPrefix(m, "Failed to cancel deployment:") {
		t.Errorf("got %q", m)
	}
	clock.Advance(time.Hour)
	if d := h.srv.Deployments(b.UUID)[0]; d.Status != "queued" {
		t.Errorf("next deployment is %s, want stuck in queued", d.Status)
	}
}

// TestHistory: the history says which application each request acted on and when, which run's
// deployment was in progress then, which run's config each deployment ran, and what each
// application carries and runs at the end.
func TestHistory(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t, coolifytest.WithClock(clock),
		coolifytest.WithTiming(coolifytest.Timing{Queued: time.Second, RunMin: 10 * time.Second, RunMax: 10 * time.Second}))
	app := h.srv.AddApplication(coolifytest.Application{Name: "api", ImageName: "acme/api", ImageTag: "v1"})
	h.srv.SetEnv(app.UUID, coolifytest.Env{Key: "K", Value: coolifytest.Str("0")})
	other := h.srv.AddApplication(coolifytest.Application{Name: "web", ImageName: "acme/web", ImageTag: "w1"})
	send := func(run, method, path string, body any) answer {
		t.Helper()
		js, _ := json.Marshal(body)
		req, err := http.NewRequest(method, h.srv.URL+"/api/v1"+path, bytes.NewReader(js))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+h.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Orchestrator-Run", run)
		req.Header.Set("X-Orchestrator-Fence", "7")
		resp, err := h.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return answer{status: resp.StatusCode, body: data}
	}
	if a := h.srv.History().Apps[app.UUID]; a.Running.ImageTag != "v1" || a.Running.Env["K"] != "0" || !a.Running.Equal(a.Current) {
		t.Fatalf("seeded app: %+v, want running and carrying v1 with K=0", a)
	}

	wantStatus(t, send("run-a", "PATCH", "/applications/"+app.UUID, map[string]any{"docker_registry_image_tag": "v2"}), 200)
	wantStatus(t, send("run-a", "POST", "/deploy?uuid="+app.UUID+","+other.UUID, nil), 200)
	clock.Advance(2 * time.Second) // run-a's deployment of api is in progress
	wantStatus(t, send("run-b", "PATCH", "/applications/"+app.UUID+"/envs", map[string]any{"key": "K", "value": "1"}), 201)
	wantStatus(t, send("run-b", "POST", "/deploy?uuid="+app.UUID+"&force=true", nil), 200)
	h.srv.FailNext(1, coolifytest.Fault{Method: "PATCH", Route: "/applications/{uuid}", Status: 502, AfterEffect: true})
	wantStatus(t, send("run-b", "PATCH", "/applications/"+app.UUID, map[string]any{"docker_registry_image_tag": "v3"}), 502)
	clock.Advance(30 * time.Second)

	hist := h.srv.History()
	var spans []coolifytest.Span
	for _, s := range hist.Spans {
		if s.App == app.UUID {
			spans = append(spans, s)
		}
	}
	if len(spans) != 2 {
		t.Fatalf("spans of api: %+v, want run-a's and run-b's", spans)
	}
	a, b := spans[0], spans[1]
	if a.Run != "run-a" || a.ConfigBy != "run-a" || a.Config.ImageTag != "v2" || a.Config.Env["K"] != "0" || a.Status != "finished" {
		t.Errorf("run-a's deployment: %+v, want run-a's v2 with K=0, finished", a)
	}
	if b.Run != "run-b" || b.ConfigBy != "run-b" || b.Config.ImageTag != "v3" || b.Config.Env["K"] != "1" || !b.Start.Equal(a.End) {
		t.Errorf("run-b's deployment: %+v, want run-b's v3 with K=1, started when run-a's ended (%s)", b, a.End)
	}
	var envPatch, lost *coolifytest.Call
	for i, c := range hist.Calls {
		if c.Route == "PATCH /applications/{uuid}/envs" {
			envPatch = &hist.Calls[i]
		}
		if c.Status == 502 {
			lost = &hist.Calls[i]
		}
		if c.Route == "POST /deploy" && c.Run == "run-a" && (len(c.Apps) != 2 || c.Apps[0] != app.UUID || c.Apps[1] != other.UUID) {
			t.Errorf("run-a's deploy acted on %v, want both applications", c.Apps)
		}
	}
	if envPatch == nil || !envPatch.ConfigWrite || !envPatch.Mutating() || envPatch.Run != "run-b" || envPatch.Fence != "7" ||
		len(envPatch.Apps) != 1 || envPatch.Apps[0] != app.UUID || !a.InProgressAt(envPatch.At) || b.InProgressAt(envPatch.At) {
		t.Errorf("run-b's env PATCH: %+v; want a config write to api while run-a's deployment %+v was in progress", envPatch, a)
	}
	if lost == nil || lost.Handled != 200 || !lost.ConfigWrite {
		t.Errorf("the PATCH whose answer was lost: %+v, want handled 200 and counted as a config write", lost)
	}
	st := hist.Apps[app.UUID]
	if st.LastWriter != "run-b" || st.Current.ImageTag != "v3" || !st.Running.Equal(st.Current) {
		t.Errorf("api at the end: %+v, want run-b's v3 with K=1 carried and running", st)
	}
}

// By default the fake throttles as Coolify does: 200 requests per minute per token, the 201st
// answered 429 "Too Many Attempts." with Retry-After until the window that began with the
// first request ends; other tokens have their own window.
func TestDefaultThrottle(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t, coolifytest.WithClock(clock))
	for i := range coolifytest.DefaultRateLimit {
		if i == 1 {
			clock.Advance(20 * time.Second)
		}
		wantStatus(t, h.do("GET", "/applications", nil), http.StatusOK)
	}
	a := h.do("GET", "/applications", nil)
	wantStatus(t, a, http.StatusTooManyRequests)
	if n := h.srv.Throttled(); n != 1 {
		t.Errorf("Throttled() = %d, want 1", n)
	}
	if a.json(t)["message"] != "Too Many Attempts." || a.header.Get("Retry-After") != "40" {
		t.Errorf("429 with Retry-After %q and body %s", a.header.Get("Retry-After"), a.body)
	}
	h.srv.AddToken("3|other", coolifytest.AbilityRead)
	h.token = "3|other"
	wantStatus(t, h.do("GET", "/applications", nil), http.StatusOK)
	h.token = h.srv.Token
	clock.Advance(40 * time.Second)
	wantStatus(t, h.do("GET", "/applications", nil), http.StatusOK)

	off := newHarness(t, coolifytest.WithClock(clock), coolifytest.WithoutRateLimit())
	for range coolifytest.DefaultRateLimit + 1 {
		wantStatus(t, off.do("GET", "/applications", nil), http.StatusOK)
	}
}
