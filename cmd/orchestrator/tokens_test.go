package main

import (
	"context"
	"strings"
	"testing"
)

// TestServeWithoutTokensSaysSo: a daemon started without any API token warns at start,
// naming the variables that set them, and `trigger` against it shows the daemon's answer
// that no token is configured, not a hint to check its own token.
func TestServeWithoutTokensSaysSo(t *testing.T) {
	env, _ := daemonEnv(t)
	delete(env, "ORCH_TRIGGER_TOKEN")
	delete(env, "ORCH_ADMIN_TOKEN")
	d := serveDaemon(t, env)
	_, _, err := invoke(context.Background(), map[string]string{"ORCH_TRIGGER_TOKEN": "some-token-0123456789"},
		"trigger", "prod", "--url", d.base, "--image-tag", "v2", "--build", "1")
	d.stop()
	serveLog := d.log
	if !strings.Contains(serveLog, `"level":"WARN","msg":"no API token is configured: every route that needs one (triggers, cancels and lock operations) answers 403; set ORCH_TRIGGER_TOKEN, ORCH_ADMIN_TOKEN or ORCH_READ_TOKEN`) {
		t.Errorf("serve without tokens does not warn at start:\n%s", serveLog)
	}
	if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), "403 Forbidden: no API token is configured on this daemon") ||
		strings.Contains(err.Error(), "check --token") {
		t.Errorf("trigger against a daemon without tokens: exit %d, %v", exitCode(err), err)
	}
}
