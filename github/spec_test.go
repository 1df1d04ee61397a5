package github_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/github/internal/ghspec"
)

// checkedClient is an HTTP client whose every request and answer is checked against GitHub's
// description; the prefix is read from each request (GitHub Enterprise Server's /api/v3).
func checkedClient(t *testing.T) *http.Client {
	plain := ghspec.Transport(t, "", nil)
	ghes := ghspec.Transport(t, "/api/v3", nil)
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.HasPrefix(r.URL.Path, "/api/v3/") {
			return ghes.RoundTrip(r)
		}
		return plain.RoundTrip(r)
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
