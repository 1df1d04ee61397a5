package githubtest_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/github/githubtest"
	"github.com/deploy-orchestrator/orchestrator/github/internal/ghspec"
	"github.com/deploy-orchestrator/orchestrator/internal/openapicheck"
)

var sha = strings.Repeat("ab", 20)

type call struct {
	method, path, body, token string
	invalid                   bool // the request breaks the description on purpose
	want                      int
	wantBody                  string
}

func do(t *testing.T, srv *githubtest.Server, hc *http.Client, c call) (int, string) {
	t.Helper()
	ctx := context.Background()
	if c.invalid {
		ctx = openapicheck.ExpectInvalidRequest(ctx, "the request breaks the description on purpose")
	}
	req, _ := http.NewRequestWithContext(ctx, c.method, strings.TrimSuffix(srv.URL, "/")+c.path, strings.NewReader(c.body))
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestFakeFollowsSpec drives the fake through its routes, good requests and bad, and checks
// every answer against the description (ghspec) and GitHub's status codes.
func TestFakeFollowsSpec(t *testing.T) {
	srv := githubtest.NewServer(t)
	srv.AddRepo("acme/web", sha)
	hc := &http.Client{Transport: ghspec.Transport(t, "", nil)}
	tok := srv.Token
	deps := "/repos/acme/web/deployments"
	calls := []call{
		{method: "POST", path: deps, body: `{"ref":"` + sha + `","environment":"qa","required_contexts":[],"auto_merge":false,"payload":{"orchestrator_run":"r1"}}`, token: tok, want: 201, wantBody: `"orchestrator_run":"r1"`},
		{method: "GET", path: deps + "?sha=" + sha + "&environment=qa&per_page=100", token: tok, want: 200, wantBody: `"environment":"qa"`},
		{method: "GET", path: deps + "?environment=other", token: tok, want: 200, wantBody: `[]`},
		{method: "POST", path: deps, body: `{"ref":"` + strings.Repeat("0", 40) + `"}`, token: tok, want: 422, wantBody: "No ref found"},
		{method: "POST", path: deps, body: `{"environment":"qa"}`, token: tok, invalid: true, want: 422, wantBody: "missing_field"},
		{method: "POST", path: deps + "/1001/statuses", body: `{"state":"in_progress","log_url":"https://x.example/1"}`, token: tok, want: 201, wantBody: `"state":"in_progress"`},
		{method: "POST", path: deps + "/1001/statuses", body: `{"state":"canceled"}`, token: tok, invalid: true, want: 422, wantBody: "not included in the list"},
		{method: "POST", path: deps + "/1001/statuses", body: `{"state":"success","description":"` + strings.Repeat("x", 141) + `"}`, token: tok, want: 422, wantBody: "too long"},
		{method: "POST", path: deps + "/9/statuses", body: `{"state":"success"}`, token: tok, want: 404},
		{method: "POST", path: "/repos/acme/web/statuses/" + sha, body: `{"state":"pending","context":"ci/x"}`, token: tok, want: 201, wantBody: `"context":"ci/x"`},
		{method: "POST", path: "/repos/acme/web/statuses/" + sha, body: `{"state":"queued"}`, token: tok, invalid: true, want: 422},
		{method: "POST", path: "/repos/acme/other/deployments", body: `{"ref":"` + sha + `"}`, token: tok, want: 404},
		{method: "GET", path: deps, token: "ghp_wrong", want: 401, wantBody: "Bad credentials"},
		{method: "GET", path: deps, want: 401},
	}
	for _, c := range calls {
		got, body := do(t, srv, hc, c)
		if got != c.want || !strings.Contains(body, c.wantBody) {
			t.Errorf("%s %s %s: got %d %s, want %d with %q", c.method, c.path, c.body, got, body, c.want, c.wantBody)
		}
	}
	if got := srv.States(1001); len(got) != 1 || got[0] != "in_progress" {
		t.Errorf("states: got %v, want [in_progress]", got)
	}
}

func TestFakeRateLimitsAndFaults(t *testing.T) {
	srv := githubtest.NewServer(t)
	srv.AddRepo("acme/web", sha)
	hc := &http.Client{Transport: ghspec.Transport(t, "", nil)}
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"repos/acme/web/deployments", nil)
		req.Header.Set("Authorization", "Bearer "+srv.Token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := get()
	for _, h := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-Used", "X-Ratelimit-Resource"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
	srv.ExhaustRateLimit(time.Minute)
	if resp := get(); resp.StatusCode != 403 || resp.Header.Get("X-Ratelimit-Remaining") != "0" {
		t.Errorf("primary limit: got %d remaining %q, want 403 and 0", resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining"))
	}
	srv2 := githubtest.NewServer(t)
	srv2.AddRepo("acme/web", sha)
	srv2.SecondaryRateLimit(10 * time.Second)
	srv = srv2
	if resp := get(); resp.StatusCode != 403 || resp.Header.Get("Retry-After") != "10" {
		t.Errorf("secondary limit: got %d retry-after %q, want 403 and 10", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	srv3 := githubtest.NewServer(t)
	srv3.AddRepo("acme/web", sha)
	srv3.FailNext(2, 502)
	srv = srv3
	if a, b, c := get().StatusCode, get().StatusCode, get().StatusCode; a != 502 || b != 502 || c != 200 {
		t.Errorf("FailNext(2): got %d %d %d, want 502 502 200", a, b, c)
	}
}

// jwt signs an App JWT with key.
func jwt(t *testing.T, key *rsa.PrivateKey, iss string, iat, exp time.Time) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signing := enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(map[string]any{"iss": iss, "iat": iat.Unix(), "exp": exp.Unix()})
	digest := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func TestFakeChecksAppJWT(t *testing.T) {
	srv := githubtest.NewServer(t, githubtest.WithApp(12, 34))
	block, _ := pem.Decode(srv.AppKeyPEM())
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	now := time.Now()
	hc := &http.Client{Transport: ghspec.Transport(t, "", nil)}
	path := "/app/installations/34/access_tokens"
	cases := []struct {
		name, token, path string
		want              int
	}{
		{"good", jwt(t, key, "12", now.Add(-30*time.Second), now.Add(5*time.Minute)), path, 201},
		{"signed by another key", jwt(t, other, "12", now, now.Add(5*time.Minute)), path, 401},
		{"another app", jwt(t, key, "13", now, now.Add(5*time.Minute)), path, 401},
		{"expired", jwt(t, key, "12", now.Add(-20*time.Minute), now.Add(-10*time.Minute)), path, 401},
		{"too long", jwt(t, key, "12", now, now.Add(time.Hour)), path, 401},
		{"not a JWT", "ghp_token", path, 401},
		{"another installation", jwt(t, key, "12", now, now.Add(5*time.Minute)), "/app/installations/35/access_tokens", 404},
	}
	for _, tc := range cases {
		got, body := do(t, srv, hc, call{method: "POST", path: tc.path, body: `{}`, token: tc.token})
		if got != tc.want {
			t.Errorf("%s: got %d %s, want %d", tc.name, got, body, tc.want)
		}
		if got == 201 {
			var tok struct{ Token string }
			_ = json.Unmarshal([]byte(body), &tok)
			srv.AddRepo("acme/web", sha)
			if st, _ := do(t, srv, hc, call{method: "GET", path: "/repos/acme/web/deployments", token: tok.Token}); st != 200 {
				t.Errorf("the installation token is refused: %d", st)
			}
		}
	}
	if n := srv.TokenExchanges(); n != 1 {
		t.Errorf("exchanges: got %d, want 1", n)
	}
}
