package flagspec

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDocumentLoadsAndPatchesApply(t *testing.T) {
	if _, err := Router(); err != nil {
		t.Fatal(err)
	}
	if got := len(KnownDifferences()); got != len(knownDifferences) {
		t.Fatalf("got %d differences, want %d", got, len(knownDifferences))
	}
}

func TestCheckRejectsWhatTheSpecForbids(t *testing.T) {
	cases := []struct {
		name   string
		method string
		path   string
		auth   string
		body   string
		status int
		resp   string
		want   string
	}{
		{"unknown route", "GET", "/api/v1/environments/k/nope/", "Api-Key x", "", 200, `{}`, "no such route"},
		{"no credentials", "GET", "/api/v1/environments/k/", "", "", 200, `{}`, "request does not match"},
		{"environment without required fields", "GET", "/api/v1/environments/k/", "Api-Key x", "", 200, `{"id":1}`, "response does not match"},
		{"undocumented success status", "GET", "/api/v1/environments/k/", "Api-Key x", "", 201, `{}`, "status is not supported"},
		{"version with a non-boolean publish flag", "POST", "/api/v1/environments/1/features/2/versions/", "Api-Key x",
			`{"feature_states_to_update":[],"publish_immediately":"yes"}`, 201, `{}`, "request does not match"},
		{"error body that is not DRF", "GET", "/api/v1/environments/k/", "Api-Key x", "", 404, `<html>`, "not a DRF error"},
		{"429 without Retry-After", "GET", "/api/v1/environments/k/", "Api-Key x", "", 429, `{"detail":"slow"}`, "Retry-After"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, "http://127.0.0.1:1"+c.path, strings.NewReader(c.body))
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			h := http.Header{"Content-Type": {"application/json"}}
			var body []byte
			if c.body != "" {
				body = []byte(c.body)
			}
			err := Check(req, body, c.status, h, []byte(c.resp))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
