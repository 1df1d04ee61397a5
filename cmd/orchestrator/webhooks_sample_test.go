package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSampleWebhooksMapToSampleRules delivers the sample payloads of testdata/webhooks,
// signed as each provider signs them, to a daemon started with the sample config
// testdata/config/orchestrator-embedded.yaml (its pipelines: the demo's, on the demo's
// simulators): each one starts a run of the pipeline its rule names, with the trigger the
// rule maps from the payload.
func TestSampleWebhooksMapToSampleRules(t *testing.T) {
	sims, err := startSimulators(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sims.close()
	env := sims.env()
	addr := freeAddr(t)
	const ghSecret, glToken, genSecret = "sample-github-secret-0001", "sample-gitlab-token-00001", "sample-generic-secret-001"
	for k, v := range map[string]string{
		"ORCH_LISTEN": addr, "ORCH_STATE_DIR": t.TempDir(), "ORCH_LOG_FORMAT": "json", "ORCH_SHUTDOWN_GRACE": "5s",
		"TRIGGER_TOKEN": "trigger-token-0123456789", "ADMIN_TOKEN": "admin-token-0123456789ab",
		// production.yaml, loaded too, reads these; no delivery here runs it.
		"COOLIFY_PROD_TOKEN": "1|prod-token", "FLAGSMITH_PROD_ENVIRONMENT": "prod-env",
		"ORCH_SECRET_GATEWAY_OAUTH_CLIENT_SECRET": "gateway-secret",
		"GITHUB_WEBHOOK_SECRET":                   ghSecret, "GITLAB_WEBHOOK_TOKEN": glToken, "GENERIC_WEBHOOK_SECRET": genSecret,
	} {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var serveErr error
	var serveLog string
	go func() {
		_, serveLog, serveErr = invoke(ctx, env, "serve", "--config", filepath.Join(repoRoot, "testdata", "config", "orchestrator-embedded.yaml"))
		close(done)
	}()
	defer func() {
		cancel()
		<-done
		if serveErr != nil {
			t.Errorf("serve: %v\n%s", serveErr, serveLog)
		}
	}()
	base := "http://" + addr
	waitHealthy(t, base, done)

	sign := func(secret string, body []byte) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(body)
		return "sha256=" + hex.EncodeToString(m.Sum(nil))
	}
	for _, c := range []struct {
		file, provider string
		headers        func(body []byte) map[string]string
		pipeline       string
		build          string
	}{
		{"github-workflow-run.json", "github", func(b []byte) map[string]string {
			return map[string]string{"X-GitHub-Event": "workflow_run", "X-GitHub-Delivery": "d-gh-1", "X-Hub-Signature-256": sign(ghSecret, b)}
		}, "demo-web", "1234"},
		{"gitlab-pipeline.json", "gitlab", func([]byte) map[string]string {
			return map[string]string{"X-Gitlab-Event": "Pipeline Hook", "Idempotency-Key": "d-gl-1", "X-Gitlab-Token": glToken}
		}, "demo-web", "412"},
		{"generic.json", "generic", func(b []byte) map[string]string {
			return map[string]string{"X-Delivery-ID": "d-gen-1", "X-Signature-256": sign(genSecret, b)}
		}, "demo", "1234"},
	} {
		body, err := os.ReadFile(filepath.Join(repoRoot, "testdata", "webhooks", c.file))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/webhooks/"+c.provider, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range c.headers(body) {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ans struct {
			Status, Reason, Pipeline string
			Run                      *struct {
				ID      string
				Trigger struct{ Build string }
			}
		}
		_ = json.Unmarshal(data, &ans)
		if resp.StatusCode != http.StatusAccepted || ans.Status != "triggered" || ans.Pipeline != c.pipeline ||
			ans.Run == nil || ans.Run.Trigger.Build != c.build {
			t.Errorf("%s: %d %s; want 202 triggered, a run of %s with build %s", c.file, resp.StatusCode, data, c.pipeline, c.build)
		}
	}
	// Let the runs end before the daemon stops, so the shutdown is the clean one.
	out, _, err := invoke(ctx, map[string]string{"ORCH_URL": base}, "runs", "list", "--json")
	if err != nil {
		t.Fatalf("runs list: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(out)), []byte("\n")) {
		var r struct{ ID string }
		if json.Unmarshal(line, &r) == nil && r.ID != "" {
			wctx, wcancel := context.WithDeadline(ctx, deadline)
			_, _, _ = invoke(wctx, map[string]string{"ORCH_URL": base}, "runs", "watch", r.ID)
			wcancel()
		}
	}
}
