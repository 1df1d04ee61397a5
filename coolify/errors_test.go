package coolify

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestAPIErrorDecodesLeniently(t *testing.T) {
	for _, tc := range []struct {
		name, body  string
		wantMessage string
		wantErrors  string
	}{
		{"arrays", `{"message":"Validation failed.","errors":{"key":["The key field is required.","Too long."]}}`,
			"Validation failed.", "map[key:[The key field is required. Too long.]]"},
		{"plain strings", `{"message":"Validation failed.","errors":{"git_commit_sha":"The git commit sha format is invalid."}}`,
			"Validation failed.", "map[git_commit_sha:[The git commit sha format is invalid.]]"},
		{"mixed and nested", `{"message":"x","errors":{"a":"one","b":[["two"],"three"],"c":null}}`,
			"x", "map[a:[one] b:[two three]]"},
		{"error detail", `{"message":"Invalid request.","error":"Empty JSON."}`, "Invalid request. (Empty JSON.)", "map[]"},
		{"message as list", `{"message":["a","b"]}`, "a; b", "map[]"},
		{"not json", `<html>bad gateway</html>`, "", "map[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &APIError{StatusCode: 422}
			e.decodeBody([]byte(tc.body))
			if e.Message != tc.wantMessage || fmt.Sprint(e.Errors) != tc.wantErrors {
				t.Errorf("got %q %v, want %q %s", e.Message, e.Errors, tc.wantMessage, tc.wantErrors)
			}
		})
	}
}

func TestAPIErrorTextAndMatching(t *testing.T) {
	e := &APIError{Method: "PATCH", Path: "/api/v1/applications/x", StatusCode: 422, Message: "Validation failed.",
		Errors: map[string][]string{"b": {"bad"}, "a": {"one", "two"}}}
	if got, want := e.Error(), "PATCH /api/v1/applications/x: 422 Validation failed. (a: one; two, b: bad)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (&APIError{Method: "GET", Path: "/p", StatusCode: 429, RetryAfter: time.Minute}).Error(); got != "GET /p: 429 too many requests (retry after 1m0s)" {
		t.Errorf("got %q", got)
	}
	sentinels := []error{ErrBadRequest, ErrUnauthorized, ErrForbidden, ErrNotFound, ErrConflict, ErrValidation, ErrRateLimited, ErrServer}
	for status, want := range map[int]error{400: ErrBadRequest, 401: ErrUnauthorized, 403: ErrForbidden, 404: ErrNotFound,
		409: ErrConflict, 422: ErrValidation, 429: ErrRateLimited, 500: ErrServer, 503: ErrServer} {
		err := fmt.Errorf("layer: %w", &APIError{StatusCode: status})
		for _, s := range sentinels {
			if got := errors.Is(err, s); got != (s == want) {
				t.Errorf("status %d: errors.Is(%v) = %v", status, s, got)
			}
		}
	}
	for msg, want := range map[string]string{
		"Missing required permissions: deploy":   "deploy",
		"Missing required permissions: write.":   "write",
		"Missing required permissions: read (x)": "read",
		"API is disabled.":                       "",
	} {
		if got := (&APIError{StatusCode: 403, Message: msg}).MissingPermission(); got != want {
			t.Errorf("%q: got %q, want %q", msg, got, want)
		}
	}
	if (&APIError{StatusCode: 400, Message: "Missing required permissions: deploy"}).MissingPermission() != "" {
		t.Error("a non-403 named a permission")
	}
}
