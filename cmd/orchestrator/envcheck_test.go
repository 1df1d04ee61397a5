package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
)

// TestServeWarnsAboutUnknownEnv: an ORCH_* variable nothing reads (a mistyped setting, or
// GitLab's token under the name the GitHub secret suggests) is a warning at start naming the
// variable and the setting it most likely stands for, never its value; settings, env-source
// secrets and variables a pipeline references as ${NAME} are not.
func TestServeWarnsAboutUnknownEnv(t *testing.T) {
	env, cf := daemonEnv(t)
	env["ORCH_PUBLIC_REED"] = "true"
	env["ORCH_GITLAB_WEBHOOK_SECRET"] = "sentinel-gitlab-token-0042"
	env["ORCH_TEAM_COOLIFY_TOKEN"] = cf.Token
	yaml := "coolify: { url: " + cf.URL + `, token: "${ORCH_TEAM_COOLIFY_TOKEN}" }
services:
  - { name: api, uuid: app-api-uuid-000000000001, image_tag: "${trigger.image_tag}" }
`
	if err := os.WriteFile(filepath.Join(env["ORCH_PIPELINES_DIR"], "team.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	d := serveDaemon(t, env)
	d.stop()
	serveLog, serveErr := d.log, d.err
	if serveErr != nil {
		t.Fatalf("serve: %v\n%s", serveErr, serveLog)
	}
	for name, suggest := range map[string]string{"ORCH_PUBLIC_REED": "ORCH_PUBLIC_READ", "ORCH_GITLAB_WEBHOOK_SECRET": "ORCH_GITLAB_WEBHOOK_TOKEN"} {
		if !strings.Contains(serveLog, `"variable":"`+name+`","did_you_mean":"`+suggest+`"`) {
			t.Errorf("serve log lacks the warning about %s suggesting %s:\n%s", name, suggest, serveLog)
		}
	}
	for _, known := range []string{"ORCH_TEAM_COOLIFY_TOKEN", "ORCH_SECRET_DB_PASSWORD", "ORCH_SHUTDOWN_GRACE"} {
		if strings.Contains(serveLog, `"variable":"`+known+`"`) {
			t.Errorf("serve warns about %s, which it reads:\n%s", known, serveLog)
		}
	}
	if strings.Contains(serveLog, "sentinel-gitlab-token-0042") {
		t.Error("the warning shows the variable's value")
	}
}

// TestCommandsWarnAboutUnknownEnv: validate prints the warning with its other warnings, and
// the local `runs list` logs it, so a mistyped ORCH_STATE_DIR is not silently the default.
func TestCommandsWarnAboutUnknownEnv(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"ORCH_STATEDIR": dir, "ORCH_STATE_DIR": filepath.Join(dir, "state")}
	out, errOut, err := invoke(context.Background(), env, "validate", filepath.Join("..", "..", "testdata", "config", "orchestrator-embedded.yaml"))
	want := "ORCH_STATEDIR is set but orchestrator reads no such variable, so it is ignored (did you mean ORCH_STATE_DIR?)"
	if !strings.Contains(out, "warning: "+want) {
		t.Errorf("validate: %v, output lacks the warning:\n%s%s", err, out, errOut)
	}
	_, errOut, err = invoke(context.Background(), env, "runs", "list")
	if err != nil || !strings.Contains(errOut, want) {
		t.Errorf("runs list: %v, stderr lacks the warning:\n%s", err, errOut)
	}
}

// TestServeHelpListsEveryVariable: `serve --help` names every ORCH_* variable the daemon
// config reads, with its key, and the configuration reference (docs/configuration.md) names
// each too.
func TestServeHelpListsEveryVariable(t *testing.T) {
	out, _, err := invoke(context.Background(), nil, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	reference := string(mustRead(t, filepath.Join(repoRoot, "docs", "configuration.md")))
	for name, key := range config.EnvOverrides() {
		if !strings.Contains(out, name) || !strings.Contains(out, key) {
			t.Errorf("serve --help lacks %s (%s)", name, key)
		}
		if !strings.Contains(reference, "`"+name+"`") {
			t.Errorf("docs/configuration.md does not name %s", name)
		}
	}
	for _, name := range cliEnvNames {
		if !strings.Contains(reference, "`"+name+"`") {
			t.Errorf("docs/configuration.md does not name %s", name)
		}
	}
}
