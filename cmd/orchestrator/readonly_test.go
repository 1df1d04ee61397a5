package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
)

// TestReadOnlyCommandsCreateNoState: on the embedded backend, the commands that only read
// (runs list, show and watch; locks list and audit) create no state directory or database
// where there is none, and say why they found nothing; a command that writes (locks freeze)
// still creates it, and the readers then read it; with one database removed, they read the
// other and create none.
func TestReadOnlyCommandsCreateNoState(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	env := map[string]string{"ORCH_STATE_DIR": state}
	ctx := context.Background()
	why := "(no state directory at " + state + ")"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "list"}, "no runs " + why},
		{[]string{"locks", "list"}, "no locks held " + why},
		{[]string{"locks", "audit"}, "no operator actions recorded " + why},
	} {
		out, errOut, err := invoke(ctx, env, c.args...)
		if err != nil || !strings.Contains(out, "from state dir "+state+"\n") || !strings.Contains(out, c.want+"\n") {
			t.Errorf("%v: %v, output:\n%s%s\nwant %q", c.args, err, out, errOut, c.want)
		}
	}
	for _, sub := range []string{"show", "watch"} {
		_, _, err := invoke(ctx, env, "runs", sub, "01M8X5XAXQK5Z5S7E2N0BBESNN")
		if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), "not found "+why) {
			t.Errorf("runs %s of an unknown run: exit %d, %v", sub, exitCode(err), err)
		}
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("a read-only command created the state directory (stat: %v)", err)
	}

	// A state directory without either database: nothing is created in it either.
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, _, err := invoke(ctx, env, "runs", "list"); err != nil || !strings.Contains(out, "no runs (no state in "+state+")\n") {
		t.Errorf("runs list on an empty state dir: %v\n%s", err, out)
	}
	if entries, err := os.ReadDir(state); err != nil || len(entries) != 0 {
		t.Fatalf("a read-only command wrote to the empty state directory: %v, %d entries", err, len(entries))
	}

	if _, _, err := invoke(ctx, env, "locks", "freeze", "coolify:phase2", "--message", "m", "--for", "1m"); err != nil {
		t.Fatalf("locks freeze: %v", err)
	}
	if out, _, err := invoke(ctx, env, "locks", "list"); err != nil || !strings.Contains(out, "coolify:phase2") {
		t.Errorf("locks list after a freeze: %v\n%s", err, out)
	}
	if out, _, err := invoke(ctx, env, "runs", "list"); err != nil || !strings.Contains(out, "no runs\n") {
		t.Errorf("runs list on a state dir without runs: %v\n%s", err, out)
	}

	// One database gone: the readers read the other and do not create it again.
	runsDB := filepath.Join(state, sqlitestore.FileName)
	if err := os.Remove(runsDB); err != nil {
		t.Fatal(err)
	}
	if out, _, err := invoke(ctx, env, "runs", "list"); err != nil || !strings.Contains(out, "no runs (no run store in "+state+")\n") {
		t.Errorf("runs list without the run store: %v\n%s", err, out)
	}
	if out, _, err := invoke(ctx, env, "locks", "list"); err != nil || !strings.Contains(out, "coolify:phase2") {
		t.Errorf("locks list without the run store: %v\n%s", err, out)
	}
	if _, err := os.Stat(runsDB); !os.IsNotExist(err) {
		t.Errorf("a read-only command created the run store again (stat: %v)", err)
	}
}
