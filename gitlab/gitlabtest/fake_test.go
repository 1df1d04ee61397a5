package gitlabtest_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/gitlab/gitlabtest"
	"github.com/deploy-orchestrator/orchestrator/gitlab/internal/glspec"
	"github.com/deploy-orchestrator/orchestrator/internal/openapicheck"
)

var sha = strings.Repeat("5e", 20)

type call struct {
	method, path, body string
	header             [2]string
	invalid            bool
	want               int
	wantBody           string
}

func do(t *testing.T, srv *gitlabtest.Server, hc *http.Client, c call) (int, string) {
	t.Helper()
	ctx := context.Background()
	if c.invalid {
		ctx = openapicheck.ExpectInvalidRequest(ctx, "the request breaks the description on purpose")
	}
	req, _ := http.NewRequestWithContext(ctx, c.method, srv.URL+"/api/v4"+c.path, strings.NewReader(c.body))
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.header[0] != "" {
		req.Header.Set(c.header[0], c.header[1])
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
// every answer against the routes' description (glspec) and GitLab's status codes.
func TestFakeFollowsSpec(t *testing.T) {
	srv := gitlabtest.NewServer(t)
	srv.AddProject("g/sub/p", "main", sha, false)
	hc := &http.Client{Transport: glspec.Transport(t, nil)}
	tok := [2]string{"PRIVATE-TOKEN", srv.Token}
	deps := "/projects/g%2Fsub%2Fp/deployments"
	create := `{"environment":"production","sha":"` + sha + `","ref":"main","tag":false,"status":"running"}`
	if got, body := do(t, srv, hc, call{method: "POST", path: deps, body: create, header: tok}); got != 201 || !strings.Contains(body, `"status":"running"`) {
		t.Fatalf("create: got %d %s, want 201 running", got, body)
	}
	dep := deps + "/" + itoa(srv.Deployments("g/sub/p")[0].ID)
	calls := []call{
		{method: "GET", path: deps + "?environment=production&order_by=id&sort=desc&per_page=20", header: tok, want: 200, wantBody: `"deployable":null`},
		{method: "GET", path: deps + "?status=bogus", header: tok, invalid: true, want: 400, wantBody: "status does not have a valid value"},
		{method: "POST", path: deps, body: strings.Replace(create, `"running"`, `"created"`, 1), header: tok, invalid: true, want: 400, wantBody: "status does not have a valid value"},
		{method: "POST", path: deps, body: `{"environment":"production"}`, header: tok, invalid: true, want: 400, wantBody: "is missing"},
		{method: "POST", path: deps, body: strings.Replace(create, sha, strings.Repeat("0", 40), 1), header: tok, want: 400, wantBody: "The commit does not exist"},
		{method: "PUT", path: dep, body: `{"status":"running"}`, header: tok, want: 400, wantBody: `cannot transition via \"run\"`},
		{method: "PUT", path: dep, body: `{"status":"success"}`, header: tok, want: 200, wantBody: `"status":"success"`},
		{method: "PUT", path: dep, body: `{"status":"success"}`, header: tok, want: 400, wantBody: "succeed"},
		{method: "GET", path: dep, header: tok, want: 200, wantBody: `"status":"success"`},
		{method: "PUT", path: deps + "/999", body: `{"status":"success"}`, header: tok, want: 404},
		{method: "POST", path: "/projects/g%2Fsub%2Fp/statuses/" + sha, body: `{"state":"pending","name":"x","ref":"main"}`, header: tok, want: 201, wantBody: `"status":"pending"`},
		{method: "POST", path: "/projects/g%2Fsub%2Fp/statuses/" + sha, body: `{"state":"pending","name":"x","ref":"main"}`, header: tok, want: 400, wantBody: "Cannot transition status via :enqueue from :pending"},
		{method: "POST", path: "/projects/g%2Fsub%2Fp/statuses/" + sha, body: `{"state":"running","name":"x","ref":"main"}`, header: tok, want: 201, wantBody: `"status":"running"`},
		{method: "POST", path: "/projects/g%2Fsub%2Fp/statuses/" + strings.Repeat("1", 40), body: `{"state":"success"}`, header: tok, want: 404, wantBody: "404 Commit Not Found"},
		{method: "POST", path: "/projects/g%2Fother/deployments", body: create, header: tok, want: 404, wantBody: "404 Project Not Found"},
		{method: "GET", path: deps, header: [2]string{"PRIVATE-TOKEN", "nope"}, want: 401, wantBody: "401 Unauthorized"},
		{method: "GET", path: deps, header: [2]string{"JOB-TOKEN", gitlabtest.DefaultJobToken}, want: 200},
	}
	for _, c := range calls {
		got, body := do(t, srv, hc, c)
		if got != c.want || !strings.Contains(body, c.wantBody) {
			t.Errorf("%s %s %s: got %d %s, want %d with %q", c.method, c.path, c.body, got, body, c.want, c.wantBody)
		}
	}
	ci := srv.AddCIDeployment("g/sub/p", "production", "main")
	if got, body := do(t, srv, hc, call{method: "PUT", path: deps + "/" + itoa(ci), body: `{"status":"success"}`, header: tok}); got != 403 {
		t.Errorf("updating a CI deployment: got %d %s, want 403", got, body)
	}
}

func TestFakeRateLimitAndFaults(t *testing.T) {
	srv := gitlabtest.NewServer(t)
	srv.AddProject("g/p", "main", sha, false)
	hc := &http.Client{Transport: glspec.Transport(t, nil)}
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"/api/v4/projects/g%2Fp/deployments", nil)
		req.Header.Set("PRIVATE-TOKEN", srv.Token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := get(); resp.Header.Get("RateLimit-Limit") == "" || resp.Header.Get("RateLimit-Reset") == "" {
		t.Errorf("no RateLimit-* headers: %v", resp.Header)
	}
	srv.RateLimit(5 * time.Second)
	if resp := get(); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "5" || resp.Header.Get("RateLimit-Remaining") != "0" {
		t.Errorf("throttle: got %d %v, want 429 Retry-After 5", resp.StatusCode, resp.Header)
	}
	srv2 := gitlabtest.NewServer(t)
	srv2.AddProject("g/p", "main", sha, false)
	srv2.FailNext(1, 500)
	srv = srv2
	if a, b := get().StatusCode, get().StatusCode; a != 500 || b != 200 {
		t.Errorf("FailNext(1): got %d %d, want 500 200", a, b)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
