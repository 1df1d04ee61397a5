package openapicheck_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

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

// The validator must see what breaks the description, or the checks built on it mean nothing.
func TestValidatorCatchesViolations(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/pets/1":
			io.WriteString(w, `{"id": 1, "state": "alive"}`)
		case "/v1/pets/2":
			io.WriteString(w, `{"id": 2, "state": "dead"}`)
		case "/v1/pets/3":
			io.WriteString(w, `{"state": "alive"}`)
		case "/v1/pets/4":
			w.WriteHeader(http.StatusTeapot)
			io.WriteString(w, `{}`)
		case "/v1/pets/5":
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `slow down`)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"message": "down"}`)
		}
	}))
	defer srv.Close()
	v := openapicheck.Load(t, "testdata/pets.yaml", openapicheck.Options{Prefix: "/v1", Undocumented: []openapicheck.Undocumented{
		{Status: http.StatusServiceUnavailable, Reason: "faults"},
		{Status: http.StatusTooManyRequests, Reason: "a throttle"},
	}})
	cases := []struct {
		name, path, body string
		exempt           bool
		want             string // a substring of the one expected violation; "" for none
	}{
		{"good", "/v1/pets/1", `{"state":"alive"}`, false, ""},
		{"request state not in the enum", "/v1/pets/1", `{"state":"dead"}`, false, "request PUT"},
		{"request without the required field", "/v1/pets/1", `{}`, false, "request PUT"},
		{"exempt request", "/v1/pets/1", `{}`, true, ""},
		{"answer state not in the enum", "/v1/pets/2", `{"state":"alive"}`, false, "answer 200"},
		{"answer without a required field", "/v1/pets/3", `{"state":"alive"}`, false, "answer 200"},
		{"undeclared status", "/v1/pets/4", `{"state":"alive"}`, false, "answer 418"},
		{"declared status with a JSON body", "/v1/pets/6", `{"state":"alive"}`, false, ""},
		{"declared status whose body is not JSON", "/v1/pets/5", `{"state":"alive"}`, false, "not a JSON object"},
		{"no such operation", "/v1/cats/1", `{}`, false, "no such operation"},
		{"path parameter of the wrong type", "/v1/pets/x", `{"state":"alive"}`, false, "request PUT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			hc := &http.Client{Transport: v.Transport(rec, nil)}
			ctx := context.Background()
			if tc.exempt {
				ctx = openapicheck.ExpectInvalidRequest(ctx, "the request breaks the description on purpose")
			}
			req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			all := strings.Join(rec.errs, "\n")
			switch {
			case tc.want == "" && len(rec.errs) > 0:
				t.Errorf("got violations %q, want none", rec.errs)
			case tc.want != "" && !strings.Contains(all, tc.want):
				t.Errorf("got violations %q, want one containing %q", rec.errs, tc.want)
			}
		})
	}
}
