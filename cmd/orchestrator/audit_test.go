package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
)

// Issue 36, item 2: the actions a daemon took are in its audit log; `audit verify` proves
// the log intact, and finds a record changed or removed behind the daemon's back in the
// store (exit 1, naming the record); `audit export` writes what `audit verify --file` checks.
func TestAuditVerifyFindsTampering(t *testing.T) {
	env, _ := daemonEnv(t)
	d := serveDaemon(t, env)
	admin := env["ORCH_ADMIN_TOKEN"]
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/locks/coolify:phase2/freeze", `{"message":"launch","for":"1h"}`},
		{"DELETE", "/v1/locks/coolify:phase2/freeze", `{"reason":"launched"}`},
		{"POST", "/v1/locks/coolify:phase2/freeze", `{"message":"weekend","for":"1h"}`},
	} {
		req, _ := http.NewRequest(r.method, d.base+r.path, strings.NewReader(r.body))
		req.Header.Set("Authorization", "Bearer "+admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d", r.method, r.path, resp.StatusCode)
		}
	}
	d.stop()
	ctx := context.Background()
	state := env["ORCH_STATE_DIR"]
	verify := func(args ...string) (string, error) {
		out, errOut, err := invoke(ctx, map[string]string{}, append([]string{"audit", "verify", "--state-dir", state}, args...)...)
		return out + errOut, err
	}
	out, err := verify()
	if err != nil || !strings.Contains(out, "audit log intact: 4 records, from the first record to the head 4") {
		t.Fatalf("verify of an intact log: %v\n%s", err, out)
	}
	export, errOut, err := invoke(ctx, map[string]string{}, "audit", "export", "--state-dir", state)
	if err != nil || strings.Count(export, "\n") != 5 || !strings.Contains(export, `"subject":"api:admin"`) ||
		!strings.Contains(export, `"action":"config"`) {
		t.Fatalf("export: %v\n%s%s", err, export, errOut)
	}
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(file, []byte(export), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := verify("--file", file); err != nil || !strings.Contains(out, "intact: 4 records") {
		t.Fatalf("verify of the export: %v\n%s", err, out)
	}
	// An export with a line removed is refused.
	lines := strings.SplitAfter(export, "\n")
	if err := os.WriteFile(file, []byte(lines[0]+lines[1]+lines[3]), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := verify("--file", file); exitCode(err) != exitFailed || !strings.Contains(err.Error(), "record 2: missing") {
		t.Errorf("verify of an export without record 2: exit %d, %v\n%s", exitCode(err), err, out)
	}

	db, err := sql.Open("sqlite", filepath.Join(state, sqlitestore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Changed: the first freeze's message (record 1 is the daemon's configuration).
	if _, err := db.Exec(`UPDATE audit SET data = replace(data, 'launch', 'lunch') WHERE seq = 2`); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(); exitCode(err) != exitFailed || !strings.Contains(err.Error(), "record 2: changed") {
		t.Errorf("verify of a changed record: exit %d, %v\n%s", exitCode(err), err, out)
	}
	if _, err := db.Exec(`UPDATE audit SET data = replace(data, 'lunch', 'launch') WHERE seq = 2`); err != nil {
		t.Fatal(err)
	}
	if _, err := verify(); err != nil {
		t.Fatalf("verify after undoing the change: %v", err)
	}
	// Removed: the unfreeze.
	if _, err := db.Exec(`DELETE FROM audit WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(); exitCode(err) != exitFailed || !strings.Contains(err.Error(), "record 3: missing") {
		t.Errorf("verify of a removed record: exit %d, %v\n%s", exitCode(err), err, out)
	}
}

// Issue 36, item 4: a daemon that starts with pipelines other than those the audit log last
// recorded (a gate changed by editing a file and restarting) says so in the log, naming the
// pipelines changed, added and removed; one that starts with the same says nothing.
func TestAuditRecordsAChangedConfiguration(t *testing.T) {
	env, _ := daemonEnv(t)
	pipes := env["ORCH_PIPELINES_DIR"]
	prod, err := os.ReadFile(filepath.Join(pipes, "prod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	restart := func() {
		t.Helper()
		d := serveDaemon(t, env)
		d.stop()
		if d.err != nil {
			t.Fatalf("serve: %v\n%s", d.err, d.log)
		}
	}
	write := func(name, yaml string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(pipes, name), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	restart()
	restart() // the same pipelines: nothing to record
	write("prod.yaml", strings.Replace(string(prod), "deploy_timeout: 10s", "deploy_timeout: 20s", 1))
	write("stage.yaml", strings.Replace(string(prod), "deploy_timeout: 10s", "deploy_timeout: 5s", 1))
	restart()
	export, errOut, err := invoke(context.Background(), map[string]string{}, "audit", "export", "--state-dir", env["ORCH_STATE_DIR"])
	if err != nil {
		t.Fatalf("export: %v\n%s", err, errOut)
	}
	var reasons []string
	for _, line := range strings.Split(strings.TrimSpace(export), "\n")[1:] {
		var rec struct{ Action, Subject, Target, Reason string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Action != "config" || rec.Target != "pipelines" || !strings.HasPrefix(rec.Subject, "daemon:") {
			t.Errorf("record %+v, want the daemon's config records only", rec)
		}
		reasons = append(reasons, rec.Reason)
	}
	want := []string{"first configuration recorded: prod", "changed prod; added stage"}
	if !slices.Equal(reasons, want) {
		t.Errorf("config records say %q, want %q", reasons, want)
	}
	if strings.Contains(export, "sentinel-db-password-42") {
		t.Error("the export holds a secret value")
	}
}
