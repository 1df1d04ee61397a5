// Package ghspec checks GitHub traffic, the client's and the fake's, against the excerpt of
// GitHub's REST API description in github/githubtest/testdata/openapi.yaml. The answers
// GitHub gives on routes whose description does not list them are declared here, with their
// reasons, and nowhere else.
package ghspec

import (
	"net/http"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/internal/openapicheck"
)

var undocumented = []openapicheck.Undocumented{
	{Status: http.StatusUnauthorized, Reason: "a refused token answers 401 \"Bad credentials\" on every route"},
	{Status: http.StatusForbidden, Reason: "primary and secondary rate limits answer 403 on every route"},
	{Status: http.StatusTooManyRequests, Reason: "rate limits may answer 429 on every route"},
	{Status: http.StatusNotFound, Reason: "an unknown repository or deployment answers 404 on every route"},
	{Status: http.StatusInternalServerError, Reason: "server errors (faults the fake injects on purpose)"},
	{Status: http.StatusBadGateway, Reason: "a proxy in front of GitHub (faults the fake injects on purpose)"},
	{Status: http.StatusServiceUnavailable, Reason: "GitHub unavailable (faults the fake injects on purpose)"},
	{Method: http.MethodPost, Route: "/repos/{owner}/{repo}/statuses/{sha}", Status: http.StatusUnprocessableEntity,
		Reason: "an unknown commit or a state not in the list answers 422 Validation Failed"},
}

// Transport validates every request sent through next (nil: http.DefaultTransport) and its
// answer, reporting violations with t.Errorf. prefix is the API's path prefix ("" on
// github.com, "/api/v3" on GitHub Enterprise Server).
func Transport(t testing.TB, prefix string, next http.RoundTripper) http.RoundTripper {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "githubtest", "testdata", "openapi.yaml")
	return openapicheck.Load(t, path, openapicheck.Options{Prefix: prefix, Undocumented: undocumented}).Transport(t, next)
}
