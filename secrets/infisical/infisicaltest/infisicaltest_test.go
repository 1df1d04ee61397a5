package infisicaltest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/secrets/infisical/infisicaltest"
)

var (
	root   = infisicaltest.Folder{ProjectID: "p1", Environment: "prod"}
	api    = infisicaltest.Folder{ProjectID: "p1", Environment: "prod", Path: "/api"}
	shared = infisicaltest.Folder{ProjectID: "p1", Environment: "prod", Path: "/shared"}
)

func newHandler(extra ...infisicaltest.Option) *infisicaltest.Handler {
	return infisicaltest.NewHandler(append([]infisicaltest.Option{
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "id1", ClientSecret: "sec1"}),
		infisicaltest.WithSecrets(root, map[string]string{"HOST": "db.internal", "WHICH": "NAME"}),
		infisicaltest.WithSecrets(api, map[string]string{
			"USER":    "app",
			"URL":     "postgres://${USER}@${prod.HOST}/${staging.nested.deep.NAME}",
			"LOOP":    "a${LOOP2}",
			"LOOP2":   "b${LOOP}",
			"GHOST":   "x${NOPE}y",
			"ENVLESS": "${nowhere.KEY}",
			"SHELL":   "echo ${HOME:-/root} ${not a ref} $PATH",
			"NESTED":  "${staging.nested.deep.${prod.WHICH}}",
		}),
		infisicaltest.WithSecrets(infisicaltest.Folder{ProjectID: "p1", Environment: "staging", Path: "/nested/deep"},
			map[string]string{"NAME": "stage_db"}),
		infisicaltest.WithSecrets(shared, map[string]string{"SHARED": "s"}),
		infisicaltest.WithImport(api, shared),
	}, extra...)...)
}

// call serves one request through the handler, with no network, and decodes the JSON answer.
func call(t *testing.T, h http.Handler, method, target, token, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %q", method, target, rec.Body.String())
	}
	return rec.Code, out
}

func login(t *testing.T, h http.Handler) string {
	t.Helper()
	code, out := call(t, h, "POST", "/api/v1/auth/universal-auth/login", "", `{"clientId":"id1","clientSecret":"sec1"}`)
	if code != 200 {
		t.Fatalf("login: %d %v", code, out)
	}
	if out["tokenType"] != "Bearer" || out["expiresIn"].(float64) != infisicaltest.DefaultTokenTTL.Seconds() {
		t.Errorf("login answer = %v", out)
	}
	return out["accessToken"].(string)
}

// values maps secretKey → secretValue of a list answer's "secrets" (or of one import).
func values(list any) map[string]string {
	out := map[string]string{}
	for _, s := range list.([]any) {
		m := s.(map[string]any)
		out[m["secretKey"].(string)] = m["secretValue"].(string)
	}
	return out
}

func listURL(q url.Values) string { return "/api/v3/secrets/raw?" + q.Encode() }

func TestReferencesExpandedOnlyWhenAsked(t *testing.T) {
	h := newHandler()
	tok := login(t, h)
	q := url.Values{"workspaceId": {"p1"}, "environment": {"prod"}, "secretPath": {"/api"}}

	_, out := call(t, h, "GET", listURL(q), tok, "")
	if got := values(out["secrets"])["URL"]; got != "postgres://${USER}@${prod.HOST}/${staging.nested.deep.NAME}" {
		t.Errorf("unexpanded URL = %q, want the raw reference (the list routes default to false)", got)
	}

	q.Set("expandSecretReferences", "true")
	_, out = call(t, h, "GET", listURL(q), tok, "")
	v := values(out["secrets"])
	for k, want := range map[string]string{
		"URL": "postgres://app@db.internal/stage_db", // local, root of an env, nested folder of another env
		// An unresolvable reference stays as written, as in Infisical.
		"GHOST":   "x${NOPE}y",
		"ENVLESS": "${nowhere.KEY}",
		// A cycle puts the raw value of the secret met twice in place of its reference.
		"LOOP": "aba${LOOP2}",
		// Text outside the reference syntax (${[a-zA-Z0-9-_.@]+}) is not touched.
		"SHELL": "echo ${HOME:-/root} ${not a ref} $PATH",
		// A reference formed by expanding another is expanded in a further pass.
		"NESTED": "stage_db",
	} {
		if v[k] != want {
			t.Errorf("%s = %q, want %q", k, v[k], want)
		}
	}
}

// A listed secret that references one whose value the identity may not read makes the whole
// list a 403, as in Infisical (ForbiddenRequestError "Failed to expand one or more secret
// references"); the hidden value must not come back expanded inside the readable one.
func TestReferenceToUnreadableSecretIsForbidden(t *testing.T) {
	h := newHandler(infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "id1", ClientSecret: "sec1", HiddenKeys: []string{"HOST"}}))
	tok := login(t, h)
	q := url.Values{"workspaceId": {"p1"}, "environment": {"prod"}, "secretPath": {"/api"}, "expandSecretReferences": {"true"}}
	req := httptest.NewRequest("GET", listURL(q), nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if strings.Contains(rec.Body.String(), "db.internal") {
		t.Errorf("the answer holds the value the identity may not read: %s", rec.Body)
	}
	var out struct {
		ReqID      string   `json:"reqId"`
		StatusCode int      `json:"statusCode"`
		Message    string   `json:"message"`
		Error      string   `json:"error"`
		Details    []string `json:"details"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	if rec.Code != 403 || out.StatusCode != 403 || out.Error != "ForbiddenError" || out.ReqID == "" ||
		out.Message != "Failed to expand one or more secret references" {
		t.Fatalf("got %d %s, want 403 ForbiddenError \"Failed to expand one or more secret references\"", rec.Code, rec.Body)
	}
	want := "You do not have permission to read secret 'HOST' in environment 'prod' at path '/', " +
		"which is referenced by secret 'URL' in environment 'prod' at path '/api'."
	if len(out.Details) != 1 || out.Details[0] != want {
		t.Errorf("details = %q, want [%q]", out.Details, want)
	}

	// Without expansion nothing is read through the reference: 200, the reference as written.
	q.Del("expandSecretReferences")
	code, body := call(t, h, "GET", listURL(q), tok, "")
	if code != 200 || values(body["secrets"])["URL"] != "postgres://${USER}@${prod.HOST}/${staging.nested.deep.NAME}" {
		t.Errorf("unexpanded list: %d %v", code, body)
	}
}

// An imported secret whose expansion is refused keeps its raw value: the server expands
// imports with Promise.allSettled and drops the failure, so the list is still a 200.
func TestImportReferencingUnreadableSecretStaysUnexpanded(t *testing.T) {
	svc := infisicaltest.Folder{ProjectID: "p1", Environment: "prod", Path: "/svc"}
	lib := infisicaltest.Folder{ProjectID: "p1", Environment: "prod", Path: "/lib"}
	h := newHandler(
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "id1", ClientSecret: "sec1", HiddenKeys: []string{"HOST"}}),
		infisicaltest.WithSecrets(svc, map[string]string{"OWN": "o"}),
		infisicaltest.WithSecrets(lib, map[string]string{"LIBURL": "x${prod.WHICH}y${prod.HOST}", "LIBOK": "${prod.WHICH}"}),
		infisicaltest.WithImport(svc, lib))
	tok := login(t, h)
	q := url.Values{"workspaceId": {"p1"}, "environment": {"prod"}, "secretPath": {"/svc"},
		"expandSecretReferences": {"true"}, "include_imports": {"true"}}
	code, out := call(t, h, "GET", listURL(q), tok, "")
	if code != 200 {
		t.Fatalf("list: %d %v", code, out)
	}
	imp := values(out["imports"].([]any)[0].(map[string]any)["secrets"])
	if imp["LIBURL"] != "x${prod.WHICH}y${prod.HOST}" || imp["LIBOK"] != "NAME" {
		t.Errorf("imported = %v, want LIBURL raw and LIBOK expanded", imp)
	}
}

func TestImportsOnlyWithSnakeCaseFlag(t *testing.T) {
	h := newHandler()
	tok := login(t, h)
	q := url.Values{"workspaceId": {"p1"}, "environment": {"prod"}, "secretPath": {"/api"}, "includeImports": {"true"}}
	_, out := call(t, h, "GET", listURL(q), tok, "")
	if _, ok := out["imports"]; ok {
		t.Errorf("includeImports (camelCase) returned imports; the real server ignores it")
	}
	q.Set("include_imports", "true")
	_, out = call(t, h, "GET", listURL(q), tok, "")
	imps, _ := out["imports"].([]any)
	if len(imps) != 1 {
		t.Fatalf("imports = %v, want one", out["imports"])
	}
	imp := imps[0].(map[string]any)
	if imp["secretPath"] != "/shared" || imp["environment"] != "prod" || imp["folderId"] == "" {
		t.Errorf("import = %v", imp)
	}
	if values(imp["secrets"])["SHARED"] != "s" {
		t.Errorf("imported secrets = %v", imp["secrets"])
	}
}

func TestV4RouteAndSecretShape(t *testing.T) {
	h := newHandler()
	tok := login(t, h)
	code, out := call(t, h, "GET", "/api/v4/secrets?projectId=p1&environment=prod&secretPath=/api", tok, "")
	if code != 200 {
		t.Fatalf("v4 list: %d %v", code, out)
	}
	s := out["secrets"].([]any)[0].(map[string]any)
	for _, field := range []string{"id", "_id", "workspace", "environment", "version", "type", "secretKey",
		"secretValue", "secretComment", "secretValueHidden", "secretPath", "createdAt", "updatedAt", "tags"} {
		if _, ok := s[field]; !ok {
			t.Errorf("secret lacks %q: %v", field, s)
		}
	}
}

func TestHiddenValues(t *testing.T) {
	h := newHandler(infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "id1", ClientSecret: "sec1", HiddenKeys: []string{"USER"}}))
	tok := login(t, h)
	_, out := call(t, h, "GET", "/api/v3/secrets/raw?workspaceId=p1&environment=prod&secretPath=/api", tok, "")
	for _, s := range out["secrets"].([]any) {
		m := s.(map[string]any)
		hidden := m["secretKey"] == "USER"
		if m["secretValueHidden"] != hidden || (hidden && m["secretValue"] != infisicaltest.HiddenValue) {
			t.Errorf("secret %v: want hidden=%v", m, hidden)
		}
	}
}

// Imported secrets whose value the identity may not read are dropped when values are asked for
// (viewSecretValue, true by default), as by the server's fnSecretsV2FromImports; with
// viewSecretValue=false every value is hidden and imported secrets are kept, hidden.
func TestUnreadableImportedSecretsDropped(t *testing.T) {
	h := newHandler(
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "id1", ClientSecret: "sec1", HiddenKeys: []string{"SHARED"}}),
		infisicaltest.WithSecrets(shared, map[string]string{"OTHER": "o"}))
	tok := login(t, h)
	q := url.Values{"workspaceId": {"p1"}, "environment": {"prod"}, "secretPath": {"/api"}, "include_imports": {"true"}}
	_, out := call(t, h, "GET", listURL(q), tok, "")
	imp := out["imports"].([]any)[0].(map[string]any)
	if got := values(imp["secrets"]); len(got) != 1 || got["OTHER"] != "o" {
		t.Errorf("imported secrets = %v, want only OTHER (SHARED dropped)", got)
	}

	q.Set("viewSecretValue", "false")
	_, out = call(t, h, "GET", listURL(q), tok, "")
	for _, list := range []any{out["secrets"], out["imports"].([]any)[0].(map[string]any)["secrets"]} {
		for _, s := range list.([]any) {
			m := s.(map[string]any)
			if m["secretValueHidden"] != true || m["secretValue"] != infisicaltest.HiddenValue {
				t.Errorf("viewSecretValue=false: %v, want hidden", m)
			}
		}
	}
	if got := values(out["imports"].([]any)[0].(map[string]any)["secrets"]); len(got) != 2 {
		t.Errorf("viewSecretValue=false: imported = %v, want SHARED and OTHER, hidden", got)
	}
}

func TestErrors(t *testing.T) {
	h := newHandler()
	tok := login(t, h)
	for _, tc := range []struct {
		name, method, target, token, body string
		status                            int
		errName, message                  string
	}{
		{"wrong secret", "POST", "/api/v1/auth/universal-auth/login", "", `{"clientId":"id1","clientSecret":"nope"}`, 401, "UnauthorizedError", "Invalid credentials"},
		{"no bearer", "GET", "/api/v3/secrets/raw?workspaceId=p1&environment=prod", "", "", 401, "UnauthorizedError", ""},
		{"unknown token", "GET", "/api/v3/secrets/raw?workspaceId=p1&environment=prod", "forged", "", 403, "TokenError", "Invalid token"},
		{"no environment", "GET", "/api/v3/secrets/raw?workspaceId=p1", tok, "", 400, "BadRequest", "Missing project id or environment"},
		{"unknown environment", "GET", "/api/v3/secrets/raw?workspaceId=p1&environment=dev", tok, "", 404, "NotFound", ""},
		{"unknown folder", "GET", "/api/v3/secrets/raw?workspaceId=p1&environment=prod&secretPath=/x", tok, "", 404, "NotFound", "Folder with path '/x' in environment with slug 'prod' not found"},
		{"unknown route", "GET", "/api/v9/nothing", tok, "", 404, "Not Found", "Route GET:/api/v9/nothing not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := call(t, h, tc.method, tc.target, tc.token, tc.body)
			if code != tc.status || out["statusCode"].(float64) != float64(tc.status) || out["error"] != tc.errName || out["reqId"] == "" {
				t.Errorf("got %d %v, want %d %s", code, out, tc.status, tc.errName)
			}
			if tc.message != "" && out["message"] != tc.message {
				t.Errorf("message = %v, want %q", out["message"], tc.message)
			}
		})
	}

	// A body missing fields is a 422 whose message is an array of issues.
	code, out := call(t, h, "POST", "/api/v1/auth/universal-auth/login", "", `{"clientId":"id1"}`)
	issues, _ := out["message"].([]any)
	if code != 422 || out["error"] != "ValidationFailure" || len(issues) != 1 {
		t.Errorf("got %d %v, want 422 ValidationFailure with one issue", code, out)
	}
}

func TestTokenExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newHandler(
		infisicaltest.WithClock(func() time.Time { return now }),
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "id2", ClientSecret: "sec2", TokenTTL: time.Minute}),
	)
	code, out := call(t, h, "POST", "/api/v1/auth/universal-auth/login", "", `{"clientId":"id2","clientSecret":"sec2"}`)
	if code != 200 || out["expiresIn"].(float64) != 60 {
		t.Fatalf("login: %d %v", code, out)
	}
	tok := out["accessToken"].(string)
	target := "/api/v3/secrets/raw?workspaceId=p1&environment=prod"
	if code, _ := call(t, h, "GET", target, tok, ""); code != 200 {
		t.Fatalf("fresh token: %d", code)
	}
	now = now.Add(time.Minute)
	code, out = call(t, h, "GET", target, tok, "")
	if code != 403 || out["error"] != "TokenError" || out["message"] != "Your token has expired. Please re-authenticate." {
		t.Errorf("expired token: %d %v", code, out)
	}

	// ExpireTokens does the same without a clock.
	tok = login(t, h)
	h.ExpireTokens()
	if code, out := call(t, h, "GET", target, tok, ""); code != 403 || out["error"] != "TokenError" {
		t.Errorf("after ExpireTokens: %d %v", code, out)
	}
}

func TestFaultKnobs(t *testing.T) {
	h := newHandler()
	tok := login(t, h)
	target := "/api/v3/secrets/raw?workspaceId=p1&environment=prod"

	h.RateLimitNext(2, 9)
	for range 2 {
		req := httptest.NewRequest("GET", target, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 429 || rec.Header().Get("Retry-After") != "" ||
			!strings.Contains(rec.Body.String(), `"message":"Rate limit exceeded. Please try again in 9 seconds"`) {
			t.Errorf("rate limited: %d %v %s", rec.Code, rec.Header(), rec.Body)
		}
	}
	if code, _ := call(t, h, "GET", target, tok, ""); code != 200 {
		t.Errorf("after the rate limit: %d", code)
	}

	h.FailNext(1, 504)
	if code, out := call(t, h, "GET", target, tok, ""); code != 504 || out["error"] != "GatewayTimeoutError" {
		t.Errorf("FailNext: %d %v", code, out)
	}
	if code, _ := call(t, h, "GET", target, tok, ""); code != 200 {
		t.Errorf("after FailNext: %d", code)
	}
}

func TestLatencyEndsWithTheRequest(t *testing.T) {
	srv := infisicaltest.NewServer(t, infisicaltest.WithLatency(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	srv.OnRequest(func(infisicaltest.Request) { cancel() })
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/api/v1/auth/universal-auth/login",
		strings.NewReader(`{"clientId":"a","clientSecret":"b"}`))
	_, err := http.DefaultClient.Do(req)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	// NewServer's cleanup closes the server; it would hang if the handler still slept.
}

func TestRequestLog(t *testing.T) {
	h := newHandler()
	tok := login(t, h)
	call(t, h, "GET", "/api/v3/secrets/raw?workspaceId=p1&environment=prod", tok, "")
	reqs := h.Requests()
	if len(reqs) != 2 {
		t.Fatalf("requests = %+v, want 2", reqs)
	}
	if r := reqs[1]; r.Method != "GET" || r.Path != "/api/v3/secrets/raw" || r.ClientID != "id1" || r.Status != 200 ||
		r.Query != "workspaceId=p1&environment=prod" {
		t.Errorf("request = %+v", r)
	}
	for _, r := range reqs {
		if b, _ := json.Marshal(r); strings.Contains(string(b), tok) || strings.Contains(string(b), "sec1") {
			t.Errorf("request log holds a credential: %s", b)
		}
	}
	if h.Count("POST", "/api/v1/auth/universal-auth/login") != 1 {
		t.Errorf("Count(login) != 1")
	}
	h.ResetRequests()
	if len(h.Requests()) != 0 {
		t.Errorf("ResetRequests left requests")
	}
}

func TestStateChanges(t *testing.T) {
	h := newHandler()
	tok := login(t, h)
	h.SetSecret(api, "USER", "changed")
	h.SetSecret(api, "NEW", "n")
	h.DeleteSecret(api, "GHOST")
	h.AddImport(root, shared)
	_, out := call(t, h, "GET", "/api/v3/secrets/raw?workspaceId=p1&environment=prod&secretPath=/api", tok, "")
	v := values(out["secrets"])
	if v["USER"] != "changed" || v["NEW"] != "n" {
		t.Errorf("secrets = %v", v)
	}
	if _, ok := v["GHOST"]; ok {
		t.Errorf("deleted secret still listed")
	}
	_, out = call(t, h, "GET", "/api/v3/secrets/raw?workspaceId=p1&environment=prod&include_imports=true", tok, "")
	if imps, _ := out["imports"].([]any); len(imps) != 1 {
		t.Errorf("root imports = %v, want the added one", out["imports"])
	}
}

// The route of one secret by name answers as getSecretByName: the folder's own secret, else
// the last import that has it (with include_imports), expanded when asked; 403
// ForbiddenReadSecretError for a value the identity may not read; 403 ForbiddenError for a
// reference to one; 404 for a key neither has.
func TestGetOneSecret(t *testing.T) {
	h := newHandler(infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "id1", ClientSecret: "sec1", HiddenKeys: []string{"USER", "NAME"}}))
	tok := login(t, h)
	get := func(key string, extra url.Values) (int, map[string]any) {
		q := url.Values{"workspaceId": {"p1"}, "environment": {"prod"}, "secretPath": {"/api"}, "include_imports": {"true"}}
		for k, v := range extra {
			q[k] = v
		}
		return call(t, h, "GET", "/api/v3/secrets/raw/"+key+"?"+q.Encode(), tok, "")
	}
	secretOf := func(body map[string]any) map[string]any { s, _ := body["secret"].(map[string]any); return s }

	code, body := get("SHARED", nil)
	if s := secretOf(body); code != 200 || s["secretValue"] != "s" || s["secretPath"] != "/shared" || s["secretValueHidden"] != false {
		t.Errorf("imported SHARED: %d %v, want 200 with /shared's value", code, body)
	}
	code, body = get("GHOST", url.Values{"expandSecretReferences": {"true"}})
	if s := secretOf(body); code != 200 || s["secretValue"] != "x${NOPE}y" {
		t.Errorf("GHOST: %d %v, want its unresolvable reference left as written", code, body)
	}
	code, body = get("USER", nil)
	if code != 403 || body["error"] != "ForbiddenReadSecretError" || body["message"] != "You do not have permission to view secret value on secret with name 'USER'" {
		t.Errorf("unreadable USER: %d %v, want 403 ForbiddenReadSecretError", code, body)
	}
	code, body = get("USER", url.Values{"viewSecretValue": {"false"}})
	if s := secretOf(body); code != 200 || s["secretValue"] != infisicaltest.HiddenValue || s["secretValueHidden"] != true {
		t.Errorf("USER without its value: %d %v, want 200 hidden", code, body)
	}
	code, body = get("URL", url.Values{"expandSecretReferences": {"true"}})
	if code != 403 || body["error"] != "ForbiddenError" || !strings.Contains(body["message"].(string), "'USER'") ||
		strings.Contains(fmt.Sprint(body), "app@") {
		t.Errorf("URL, which references USER: %d %v, want 403 ForbiddenError naming USER", code, body)
	}
	code, body = get("NOPE", nil)
	if code != 404 || body["error"] != "NotFound" || body["message"] != "Secret with name 'NOPE' not found" {
		t.Errorf("NOPE: %d %v, want 404 NotFound", code, body)
	}
	code, _ = get("SHARED", url.Values{"include_imports": {"false"}})
	if code != 404 {
		t.Errorf("SHARED without imports: %d, want 404", code)
	}
}

// With WithListRefusingUnreadable, a list asking for values of a folder with a secret the
// identity may not read is refused whole; without values it is served, every value hidden.
func TestListRefusingUnreadable(t *testing.T) {
	h := newHandler(infisicaltest.WithListRefusingUnreadable(),
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: "id1", ClientSecret: "sec1", HiddenKeys: []string{"USER"}}))
	tok := login(t, h)
	q := url.Values{"workspaceId": {"p1"}, "environment": {"prod"}, "secretPath": {"/api"}}
	code, body := call(t, h, "GET", listURL(q), tok, "")
	if code != 403 || body["error"] != "ForbiddenError" || body["message"] != "You do not have permission to read secret values" {
		t.Errorf("list of /api: %d %v, want 403 ForbiddenError", code, body)
	}
	q.Set("viewSecretValue", "false")
	if code, body = call(t, h, "GET", listURL(q), tok, ""); code != 200 || values(body["secrets"])["USER"] != infisicaltest.HiddenValue {
		t.Errorf("list of /api without values: %d %v, want 200, values hidden", code, body)
	}
	q.Set("viewSecretValue", "true")
	q.Set("secretPath", "/shared")
	if code, _ = call(t, h, "GET", listURL(q), tok, ""); code != 200 {
		t.Errorf("list of /shared, all readable: %d, want 200", code)
	}
}
