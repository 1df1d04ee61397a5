package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoadPipelineNotify: a notify block loads with its defaults; the URL comes from the
// environment and stays a Secret.
func TestLoadPipelineNotify(t *testing.T) {
	y := minimal + `
notify:
  targets:
    - { kind: slack, url: "${SLACK_WEBHOOK_URL}", events: [failed, lock_wait] }
    - { name: audit, kind: webhook, url: "https://hooks.example.com/deploys", secret: "${NOTIFY_HMAC}" }
`
	p, err := LoadPipelineBytes("prod.yaml", []byte(y), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	n := p.Notify
	if n == nil || len(n.Targets) != 2 || n.LockWait != DefaultNotifyLockWait {
		t.Fatalf("notify = %+v", n)
	}
	slack, hook := n.Targets[0], n.Targets[1]
	if slack.Name != "slack" || slack.URL.Reveal() != "https://slack-webhook-url.example.com" || !slack.Wants(NotifyFailed) || slack.Wants(NotifySucceeded) {
		t.Errorf("slack target = %+v", slack)
	}
	if hook.Name != "audit" || hook.Secret.Reveal() != sentinel+"-NOTIFY_HMAC" || !hook.Wants(NotifyUnfreeze) {
		t.Errorf("webhook target = %+v", hook)
	}
	p2, err := LoadPipelineBytes("prod.yaml", []byte(minimal), testEnv())
	if err != nil || p2.Notify != nil {
		t.Errorf("a pipeline without notify: %+v, %v (want nil: the daemon's default applies)", p2.Notify, err)
	}
	p3, err := LoadPipelineBytes("prod.yaml", []byte(minimal+"notify: { targets: [] }\n"), testEnv())
	if err != nil || p3.Notify == nil || len(p3.Notify.Targets) != 0 {
		t.Errorf("notify: {targets: []}: %+v, %v (want an empty block: no messages, not the default)", p3.Notify, err)
	}
}

// TestLoadPipelineNotifyProblems: each mistake is named by its field, and no URL or secret
// is shown.
func TestLoadPipelineNotifyProblems(t *testing.T) {
	y := minimal + `
notify:
  lock_wait: -1s
  targets:
    - { kind: teams, url: "${TEAMS_URL}" }
    - { name: a, kind: slack }
    - { name: a, kind: discord, url: "ftp://discord.example.com/api/webhooks/1/SECRETPATH" }
    - { name: b, kind: webhook, url: "https://hooks.example.com/x" }
    - { name: c, kind: slack, url: "${SLACK_URL}", secret: "${HMAC}", events: [done] }
`
	_, err := LoadPipelineBytes("prod.yaml", []byte(y), testEnv())
	ps := mustProblems(t, err)
	wantProblem(t, ps, "notify.lock_wait", "negative")
	wantProblem(t, ps, "notify.targets[0].kind", "not one of: slack, discord, webhook")
	wantProblem(t, ps, "notify.targets[1].url", "is required")
	wantProblem(t, ps, "notify.targets[2].name", "duplicate target name")
	wantProblem(t, ps, "notify.targets[2].url", "absolute http")
	wantProblem(t, ps, "notify.targets[3].secret", "required for a webhook target")
	wantProblem(t, ps, "notify.targets[4].secret", "only a webhook target")
	wantProblem(t, ps, "notify.targets[4].events[0]", "not one of")
	if strings.Contains(err.Error(), "SECRETPATH") {
		t.Errorf("problems show a webhook URL:\n%v", err)
	}
}

// TestLoadDaemonNotifyDefaults: the daemon's notify block and public_url load and are checked.
func TestLoadDaemonNotifyDefaults(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "orchestrator.yaml", `
public_url: https://deploy.example.com
notify:
  lock_wait: 5m
  targets:
    - { kind: discord, url: "${DISCORD_WEBHOOK_URL}" }
`)
	d, err := LoadDaemon(path, testEnv(), nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if d.PublicURL != "https://deploy.example.com" || d.Notify == nil || d.Notify.LockWait != 5*time.Minute ||
		d.Notify.Targets[0].Name != "discord" || d.Notify.Targets[0].URL.Reveal() != "https://discord-webhook-url.example.com" {
		t.Errorf("daemon notify = %+v, public_url %q", d.Notify, d.PublicURL)
	}
	bad := write(t, dir, "bad.yaml", "public_url: deploy.example.com\nnotify:\n  targets:\n    - { kind: slack }\n")
	_, err = LoadDaemon(filepath.Clean(bad), testEnv(), nil)
	ps := mustProblems(t, err)
	wantProblem(t, ps, "public_url", "absolute http")
	wantProblem(t, ps, "notify.targets[0].url", "is required")
}
