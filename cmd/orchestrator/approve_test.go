package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Issue 36, item 4: from the CLI, `runs approve` without --digest shows the plan a run waits
// on and its digest; with it, the run goes on and deploys; each decision is in the audit log.
func TestRunsApproveFromTheCLI(t *testing.T) {
	env, cf := daemonEnv(t)
	prod := filepath.Join(env["ORCH_PIPELINES_DIR"], "prod.yaml")
	b, err := os.ReadFile(prod)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prod, append(b, []byte("approvals: { required: 1 }\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	d := serveDaemon(t, env)
	req, _ := http.NewRequest("POST", d.base+"/v1/pipelines/prod/runs", strings.NewReader(`{"build":"5","image_tag":"v5"}`))
	req.Header.Set("Authorization", "Bearer "+env["ORCH_TRIGGER_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ Run runs.Run }
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	id := created.Run.ID
	ctx := context.Background()
	admin := map[string]string{"ORCH_ADMIN_TOKEN": env["ORCH_ADMIN_TOKEN"]}
	var digest string
	for deadline := time.Now().Add(20 * time.Second); digest == "" && time.Now().Before(deadline); {
		_, _, err := invoke(ctx, admin, "runs", "approve", id, "--url", d.base)
		if m := regexp.MustCompile(`--digest ([0-9a-f]{64})`).FindStringSubmatch(errString(err)); m != nil {
			digest = m[1]
			if !strings.Contains(err.Error(), "waits for 1 approval(s) (0 given)") || !strings.Contains(err.Error(), "api: image tag → v5") {
				t.Errorf("approve without --digest: %v", err)
			}
			break
		}
		time.Sleep(50 * time.Millisecond) // the run reaches its approval after the preflight
	}
	if digest == "" {
		t.Fatal("the run never showed a plan to approve")
	}
	if app, _ := cf.App("app-api-uuid-000000000001"); app.ImageTag != "v1" {
		t.Fatalf("the run wrote %q before its approval", app.ImageTag)
	}
	out, errOut, err := invoke(ctx, admin, "runs", "approve", id, "--url", d.base, "--digest", digest, "--reason", "checked")
	if err != nil || !strings.Contains(out, "approved: run "+id+" has 1 of 1 approval(s)") {
		t.Fatalf("approve: %v\n%s%s", err, out, errOut)
	}
	out, _, err = invoke(ctx, map[string]string{}, "runs", "watch", id, "--url", d.base)
	if err != nil || !strings.Contains(out, "run.succeeded") {
		t.Errorf("watch after the approval: %v\n%s", err, out)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Issue 36, item 3: `runs override` lets a run waiting for its deploy window go ahead; with
// override_second_person the first person only asks, the same person again is refused, and a
// second person's override lets the run deploy.
func TestRunsOverrideFromTheCLI(t *testing.T) {
	env, cf := daemonEnv(t)
	prod := filepath.Join(env["ORCH_PIPELINES_DIR"], "prod.yaml")
	b, err := os.ReadFile(prod)
	if err != nil {
		t.Fatal(err)
	}
	freeze := "windows:\n  override_second_person: true\n  freezes: [{ from: \"2000-01-01T00:00:00Z\", to: \"2100-01-01T00:00:00Z\", reason: freeze }]\n"
	if err := os.WriteFile(prod, append(b, []byte(freeze)...), 0o644); err != nil {
		t.Fatal(err)
	}
	d := serveDaemon(t, env)
	req, _ := http.NewRequest("POST", d.base+"/v1/pipelines/prod/runs", strings.NewReader(`{"build":"6","image_tag":"v6"}`))
	req.Header.Set("Authorization", "Bearer "+env["ORCH_TRIGGER_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ Run runs.Run }
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	id := created.Run.ID
	ctx := context.Background()
	admin := map[string]string{"ORCH_ADMIN_TOKEN": env["ORCH_ADMIN_TOKEN"]}
	override := func(by string) (string, error) {
		out, errOut, err := invoke(ctx, admin, "runs", "override", id, "--url", d.base, "--by", by, "--reason", "hotfix")
		return out + errOut, err
	}
	if out, err := override("alice"); err != nil || !strings.Contains(out, "takes effect once a second person overrides too") {
		t.Fatalf("first override: %v\n%s", err, out)
	}
	if _, err := override("alice"); err == nil || !strings.Contains(err.Error(), "second_person_required") && !strings.Contains(err.Error(), "second person") {
		t.Errorf("the same person again: %v", err)
	}
	if app, _ := cf.App("app-api-uuid-000000000001"); app.ImageTag != "v1" {
		t.Fatalf("the run wrote %q inside the freeze", app.ImageTag)
	}
	if out, err := override("bob"); err != nil || !strings.Contains(out, "overridden: run "+id) {
		t.Fatalf("second person's override: %v\n%s", err, out)
	}
	out, _, err := invoke(ctx, map[string]string{}, "runs", "watch", id, "--url", d.base)
	if err != nil || !strings.Contains(out, "run.succeeded") {
		t.Errorf("watch after the override: %v\n%s", err, out)
	}
}
