package spec_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/coolify/internal/spec"
	"github.com/deploy-orchestrator/orchestrator/internal/openapicheck"
)

// recorder is a testing.TB that keeps Errorf calls instead of failing.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Helper() {}

// The validator must catch what breaks the spec, or the checks in the other tests mean nothing.
func TestValidatorCatchesViolations(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/applications/good":
			io.WriteString(w, `{"id": 1, "uuid": "good", "docker_registry_image_tag": null, "build_pack": "dockerimage"}`)
		case "/api/v1/applications/bad":
			io.WriteString(w, `{"id": "one", "uuid": "bad"}`)
		case "/api/v1/deploy":
			w.WriteHeader(http.StatusConflict) // not documented for /deploy, not in the exceptions
			io.WriteString(w, `{"message": "x"}`)
		case "/api/v1/projects/nomessage":
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"error": "x"}`)
		case "/api/v1/deployments/x":
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `not json`)
		default:
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"message": "Missing required permissions: read"}`)
		}
	}))
	defer srv.Close()
	v := spec.Load(t)

	cases := []struct {
		name, method, path, body, auth string
		want                           string // substring of the one expected violation; "" for none
	}{
		{"good answer with patched nullable and enum", "GET", "/api/v1/applications/good", "", "Bearer t", ""},
		{"wrong type in answer", "GET", "/api/v1/applications/bad", "", "Bearer t", "answer 200"},
		{"no bearer token", "GET", "/api/v1/applications/good", "", "", "request GET"},
		{"undocumented status", "POST", "/api/v1/deploy?uuid=x", "", "Bearer t", "status is not supported"},
		{"no such operation", "GET", "/api/v1/nothing/here", "", "Bearer t", "no such operation"},
		{"error body not JSON", "GET", "/api/v1/deployments/x", "", "Bearer t", "not a JSON object"},
		{"bad query type", "POST", "/api/v1/deploy?uuid=x&force=maybe", "", "Bearer t", "request POST"},
		{"bulk without data", "PATCH", "/api/v1/applications/a/envs/bulk", `{"x": 1}`, "Bearer t", "request PATCH"},
		{"error body without message", "GET", "/api/v1/projects/nomessage", "", "Bearer t", `no string "message"`},
		{"answered, not in the spec", "GET", "/api/v1/applications/a/start", "", "Bearer t", ""},
		{"health's unversioned alias", "GET", "/api/health", "", "", ""},
		{"exempt 403 on any route", "GET", "/api/v1/services/s", "", "Bearer t", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			hc := &http.Client{Transport: v.Transport(rec, nil)}
			req, _ := http.NewRequestWithContext(context.Background(), tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			switch {
			case tc.want == "" && len(rec.errs) > 0:
				t.Errorf("got violations %q, want none", rec.errs)
			case tc.want != "" && (len(rec.errs) == 0 || !strings.Contains(strings.Join(rec.errs, "\n"), tc.want)):
				t.Errorf("got violations %q, want one containing %q", rec.errs, tc.want)
			}
		})
	}
}

func TestExpectInvalidRequestSkipsOnlyTheRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id": "not an int"}`)
	}))
	defer srv.Close()
	rec := &recorder{TB: t}
	hc := &http.Client{Transport: spec.Load(t).Transport(rec, nil)}
	ctx := openapicheck.ExpectInvalidRequest(context.Background(), "no token on purpose")
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/applications/x", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "answer 200") {
		t.Errorf("got %q, want only the response violation", rec.errs)
	}
}
