package chaos

import (
	"testing"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
)

// runChecks reports every promise the history breaks (coolifytest.Checks, read from the
// fake Coolify's own history) as a test error. newWorld runs it after every scenario, once
// its daemons are gone.
func runChecks(t *testing.T, h coolifytest.History) {
	t.Helper()
	for _, b := range h.Broken() {
		t.Error(b)
	}
}
