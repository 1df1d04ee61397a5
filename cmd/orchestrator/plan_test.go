package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

// TestPlanCreatesNoState: plan is a dry run, so on the embedded backend it creates no state
// directory or database where there is none: it shows the same plan, every lock free and no
// service stale, and says that there was no state to read. Where a run left state, plan reads
// it (a service carrying a newer build is shown stale), and a database missing from it is
// not created either.
func TestPlanCreatesNoState(t *testing.T) {
	env, _ := daemonEnv(t)
	state := env["ORCH_STATE_DIR"]
	ctx := context.Background()
	noState := func() {
		t.Helper()
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Fatalf("plan created the state directory (stat: %v)", err)
		}
	}
	noState()

	out, errOut, err := invoke(ctx, env, "plan", "prod", "--image-tag", "v2", "--build", "42")
	if err != nil {
		t.Fatalf("plan: %v\n%s\n%s", err, out, errOut)
	}
	noState()
	for _, want := range []string{
		"backend: state dir " + state + " (no state directory at " + state + ": no lock held, no build marks for the stale-build check)\n",
		"Plan for prod\n",
		"api (application app-api-uuid-000000000001)\n",
		"  image tag  v1 → v2\n",
		"  env create     DB_PASSWORD created\n",
		"coolify:phase1                           free\n",
		"coolify:phase2                           free\n",
		"coolify:app-api-uuid-000000000001        free\n",
		"\nCoolify requests (about): ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "left alone") || strings.Contains(out, "WARNING") {
		t.Errorf("plan without state shows a stale service or a warning:\n%s", out)
	}

	// --json: stdout is the plan alone; the missing state is said on stderr.
	out, errOut, err = invoke(ctx, env, "plan", "prod", "--image-tag", "v2", "--build", "42", "--json")
	if err != nil {
		t.Fatalf("plan --json: %v\n%s\n%s", err, out, errOut)
	}
	noState()
	var p orchestrator.Plan
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Pipeline != "prod" || len(p.Services) != 1 ||
		p.Services[0].ImageTag == nil || p.Services[0].ImageTag.New != "v2" || len(p.Locks) != 3 || !p.Locks[0].Free {
		t.Errorf("plan --json: %v, got %+v from\n%s", err, p, out)
	}
	if sum := p.Requests.ByPurpose["preflight"] + p.Requests.ByPurpose["sync"] + p.Requests.ByPurpose["deploy"] +
		p.Requests.ByPurpose["poll"] + p.Requests.ByPurpose["health"]; p.Requests.ByPurpose["sync"] == 0 || sum != p.Requests.Total {
		t.Errorf("plan --json: Coolify requests %+v, want sync requests and a total that adds up", p.Requests)
	}
	if !strings.Contains(errOut, "no state directory at "+state) {
		t.Errorf("plan --json does not say on stderr that there is no state:\n%s", errOut)
	}

	// A run leaves state: the build mark of api. A plan of an older build reads it and shows
	// api stale, and leaves the state dir's files as they are.
	if out, errOut, err := invoke(ctx, env, "run", "prod", "--image-tag", "v5", "--build", "7"); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out, errOut)
	}
	files := func() []string {
		t.Helper()
		entries, err := os.ReadDir(state)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	before := files()
	// A run of that build would end superseded without writing: the plan says so and exits 1,
	// so a CI job gates on it.
	out, errOut, err = invoke(ctx, env, "plan", "prod", "--image-tag", "v2", "--build", "3")
	if exitCode(err) != exitFailed || !strings.Contains(fmt.Sprint(err), "would end superseded") {
		t.Fatalf("plan on a state dir: exit %d, %v; want 1 saying a run would end superseded\n%s\n%s", exitCode(err), err, out, errOut)
	}
	if !strings.Contains(out, "backend: state dir "+state+"\n") || !strings.Contains(out, "  left alone, build 7 of run ") {
		t.Errorf("plan of an older build on the state a run left: want api left alone, got\n%s", out)
	}
	if after := files(); !slices.Equal(before, after) {
		t.Errorf("plan changed the state dir's files: before %v, after %v", before, after)
	}

	// Without the lock database, the run store is read all the same and no lock database
	// is created.
	lockDB := filepath.Join(state, lockDBName)
	if err := os.Remove(lockDB); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = invoke(ctx, env, "plan", "prod", "--image-tag", "v2", "--build", "3")
	if exitCode(err) != exitFailed {
		t.Fatalf("plan on a state dir without a lock database: exit %d, %v\n%s\n%s", exitCode(err), err, out, errOut)
	}
	if !strings.Contains(out, "backend: state dir "+state+" (no lock database in "+state+": no lock held)\n") ||
		!strings.Contains(out, "  left alone, build 7 of run ") {
		t.Errorf("plan on a state dir without a lock database: got\n%s", out)
	}
	if _, err := os.Stat(lockDB); !os.IsNotExist(err) {
		t.Errorf("plan created the lock database (stat: %v)", err)
	}
}
