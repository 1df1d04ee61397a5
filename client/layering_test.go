package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A program that imports the client gets the domain's types and nothing of the daemon: of
// the module, the client depends only on the root package, runs and locks (their types), and
// the two leaf helpers locks uses (internal/logkey, internal/ctxtime: standard library only).
func TestClientImportsOnlyTheTypes(t *testing.T) {
	const mod = "github.com/deploy-orchestrator/orchestrator"
	out, err := exec.Command("go", "list", "-deps", mod+"/client").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := map[string]bool{mod: true, mod + "/client": true, mod + "/runs": true, mod + "/locks": true,
		mod + "/internal/logkey": true, mod + "/internal/ctxtime": true}
	for _, d := range strings.Fields(string(out)) {
		if (d == mod || strings.HasPrefix(d, mod+"/")) && !allowed[d] {
			t.Errorf("the client depends on %s", d)
		}
	}
}
