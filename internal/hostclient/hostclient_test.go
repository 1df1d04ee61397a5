package hostclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/hostclient"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
)

func TestHTTPClientHeadersMetricsRedirects(t *testing.T) {
	var mu sync.Mutex
	var seen http.Header
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a redirect to another host was followed, with %v", r.Header)
	}))
	defer elsewhere.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(w, r, elsewhere.URL+"/x", http.StatusFound)
			return
		}
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
	}))
	defer srv.Close()
	var routes []string
	hc := hostclient.HTTPClient(nil, "github", "1.2.3", func(system, method, route string, status int, d time.Duration) {
		routes = append(routes, system+" "+method+" "+route)
	}, func(_, path string) string { return "route:" + path })
	req, _ := http.NewRequestWithContext(trace.With(context.Background(), "run-1", 7), "GET", srv.URL+"/a", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if seen.Get("User-Agent") != "orchestrator/1.2.3" || seen.Get(trace.HeaderRun) != "run-1" || seen.Get(trace.HeaderFence) != "7" {
		t.Errorf("headers: got %v, want the User-Agent and the trace", seen)
	}
	if len(routes) != 1 || routes[0] != "github GET route:/a" {
		t.Errorf("metrics: got %v", routes)
	}
	resp, err = hc.Get(srv.URL + "/away")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Errorf("cross-host redirect: got %d, want the 302 itself", resp.StatusCode)
	}
}

func TestBaseURL(t *testing.T) {
	for _, raw := range []string{"ftp://x", "https://", "https://u:secret@x.example/", "https://x.example/?a=1", "x.example"} {
		_, err := hostclient.BaseURL("gitlab", raw)
		if err == nil {
			t.Errorf("%q: accepted", raw)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: the error repeats the password: %v", raw, err)
		}
	}
	if _, err := hostclient.BaseURL("github", "https://ghe.example/api/v3/"); err != nil {
		t.Errorf("GHES: %v", err)
	}
}

func TestErrorText(t *testing.T) {
	got := hostclient.ErrorText("gitlab", "PUT", "/api/v4/projects/g%2Fp/deployments/7", 400, "",
		map[string][]string{"status": {`cannot transition via "run"`}}, 0)
	want := `gitlab PUT /api/v4/projects/g%2Fp/deployments/7: 400 (status: cannot transition via "run")`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if got := hostclient.ErrorText("github", "GET", "/x", 503, "", nil, 2*time.Second); got != "github GET /x: 503 service unavailable (retry after 2s)" {
		t.Errorf("got %s", got)
	}
}
