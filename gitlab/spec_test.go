package gitlab_test

import (
	"net/http"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/gitlab/internal/glspec"
)

// checkedClient is an HTTP client whose every request and answer is checked against the
// routes' description.
func checkedClient(t *testing.T) *http.Client {
	return &http.Client{Transport: glspec.Transport(t, nil)}
}
