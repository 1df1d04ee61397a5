// Package glspec checks GitLab traffic, the client's and the fake's, against the routes'
// description in gitlab/gitlabtest/testdata/openapi.yaml. The answers GitLab gives on routes
// whose description does not list them are declared here, with their reasons, and nowhere
// else.
package glspec

import (
	"net/http"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/internal/openapicheck"
)

var undocumented = []openapicheck.Undocumented{
	{Status: http.StatusUnauthorized, Reason: "a refused token answers 401 {\"message\": \"401 Unauthorized\"} on every route"},
	{Status: http.StatusForbidden, Reason: "a token without the role answers 403 on every route"},
	{Status: http.StatusNotFound, Reason: "an unknown project, commit or deployment answers 404 on every route"},
	{Status: http.StatusTooManyRequests, Text: true, Reason: "Rack::Attack throttles answer 429 text/plain \"Retry later\" on every route"},
	{Status: http.StatusInternalServerError, Reason: "server errors (faults the fake injects on purpose)"},
	{Status: http.StatusBadGateway, Reason: "a proxy in front of GitLab (faults the fake injects on purpose)"},
	{Status: http.StatusServiceUnavailable, Reason: "GitLab unavailable (faults the fake injects on purpose)"},
}

// Transport validates every request sent through next (nil: http.DefaultTransport) and its
// answer, reporting violations with t.Errorf.
func Transport(t testing.TB, next http.RoundTripper) http.RoundTripper {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "gitlabtest", "testdata", "openapi.yaml")
	return openapicheck.Load(t, path, openapicheck.Options{Prefix: "/api/v4", Undocumented: undocumented}).Transport(t, next)
}
