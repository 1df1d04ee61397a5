package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestLoadDaemonDefaults(t *testing.T) {
	d, err := LoadDaemon("", testEnv(), nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if d.Listen != DefaultListen || d.StateDir != DefaultStateDir || d.PipelinesDir != DefaultPipelinesDir {
		t.Errorf("got listen %q state %q pipelines %q", d.Listen, d.StateDir, d.PipelinesDir)
	}
	if d.Backend() != BackendEmbedded || d.PublicRead || d.Tokens.Admin.IsSet() {
		t.Errorf("got backend %q public %v admin set %v", d.Backend(), d.PublicRead, d.Tokens.Admin.IsSet())
	}
	if d.RateLimits.Trigger != DefaultTriggerRate || d.RateLimits.Webhook != DefaultWebhookRate {
		t.Errorf("rate limits %+v", d.RateLimits)
	}
	if d.ShutdownGrace != DefaultShutdownGrace || d.MaxBodyBytes != DefaultMaxBodyBytes || d.Log.Level != "info" || d.Log.Format != "auto" {
		t.Errorf("got %+v", d)
	}
}

const daemonFile = `
listen: 0.0.0.0:9000
state_dir: state
pipelines_dir: /etc/orchestrator/pipelines
tokens: { admin: "${ADMIN}" }
webhooks:
  github:
    secret: "${HOOK}"
    rules:
      - { repository: acme/*, branch: main, pipeline: prod, trigger: { build: "${payload.run.number}", image_tag: "$${x}" } }
      - { repository: acme/*, workflow: rollback, pipeline: prod, rollback: true }
`

func TestLoadDaemonPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "orchestrator.yaml", daemonFile)
	env := func(k string) string {
		switch k {
		case "ORCH_LISTEN":
			return "127.0.0.1:7000"
		case "ORCH_PUBLIC_READ":
			return "true"
		case "ORCH_REDIS_URL":
			return "redis://:" + sentinel + "@localhost:6379/0"
		case "ORCH_SHUTDOWN_GRACE":
			return "5s"
		}
		return testEnv()(k)
	}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	AddFlags(fs)
	fs.Int("other", 0, "not a config flag")
	if err := fs.Parse([]string{"--listen", "127.0.0.1:6000", "--other", "3"}); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDaemon(path, env, fs)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if d.Listen != "127.0.0.1:6000" {
		t.Errorf("listen = %q, want the flag's value", d.Listen)
	}
	if !d.PublicRead || d.ShutdownGrace != 5*time.Second || d.Backend() != BackendRedis {
		t.Errorf("env overrides not applied: public %v grace %s backend %s", d.PublicRead, d.ShutdownGrace, d.Backend())
	}
	if want := filepath.Join(dir, "state"); d.StateDir != want {
		t.Errorf("state dir = %q, want %q (relative to the file)", d.StateDir, want)
	}
	if d.PipelinesDir != "/etc/orchestrator/pipelines" {
		t.Errorf("pipelines dir = %q", d.PipelinesDir)
	}
	if d.Tokens.Admin.Reveal() != sentinel+"-ADMIN" || d.Webhooks.GitHub.Secret.Reveal() != sentinel+"-HOOK" {
		t.Errorf("secrets not resolved from the environment")
	}
	rule := d.Webhooks.GitHub.Rules[0]
	if rule.Trigger.Build != "${payload.run.number}" || rule.Trigger.ImageTag != "$${x}" {
		t.Errorf("payload references not kept for run time: %+v", rule.Trigger)
	}
	if rules := d.Webhooks.GitHub.Rules; rules[0].Rollback || !rules[1].Rollback {
		t.Errorf("rollback of the rules: %v, %v; want false, true", rules[0].Rollback, rules[1].Rollback)
	}

	// Nothing secret shows in any printed form of the config.
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "daemon", d, "tokens", d.Tokens, "redis", d.RedisURL)
	js, _ := json.Marshal(d)
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", d, d, d, d.RedisURL), string(js), logs.String()} {
		if strings.Contains(s, sentinel) {
			t.Errorf("a secret leaks: %s", s)
		}
	}
	if !strings.Contains(string(js), `"Admin":"[redacted]"`) {
		t.Errorf("JSON does not show the admin token as redacted: %s", js)
	}
}

func TestLoadDaemonFromEnvironmentOnly(t *testing.T) {
	env := map[string]string{
		"ORCH_STATE_DIR":             "rel/state",
		"ORCH_ADMIN_TOKEN":           "admin-token-0123456789",
		"ORCH_GITLAB_WEBHOOK_TOKEN":  "gitlab-token-0123456789",
		"ORCH_MAX_BODY_BYTES":        "2048",
		"ORCH_LOG_FORMAT":            "text",
		"ORCH_GITHUB_WEBHOOK_SECRET": "",
	}
	d, err := LoadDaemon("", func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if d.StateDir != "rel/state" || d.Tokens.Admin.Reveal() != env["ORCH_ADMIN_TOKEN"] || d.MaxBodyBytes != 2048 || d.Log.Format != "text" {
		t.Errorf("got %+v", d)
	}
	if d.Webhooks.GitLab == nil || d.Webhooks.GitLab.Secret.Reveal() != env["ORCH_GITLAB_WEBHOOK_TOKEN"] || d.Webhooks.GitHub != nil {
		t.Errorf("webhooks = %+v", d.Webhooks)
	}
}

func TestLoadDaemonProblems(t *testing.T) {
	tests := []struct {
		name, yaml string
		env        map[string]string
		file       string // want problem.File; "" means the config file
		field, msg string
	}{
		{"unknown field", "listen: :80\nlisten_addr: x\n", nil, "", "listen_addr", "unknown field"},
		{"unknown nested", "tokens: { admin_token: x }\n", nil, "", "tokens.admin_token", "unknown field"},
		{"bad listen", "listen: localhost\n", nil, "", "listen", "host:port"},
		{"bad listen from env", "", map[string]string{"ORCH_LISTEN": "nope"}, "ORCH_LISTEN", "listen", "host:port"},
		{"bad bool from env", "", map[string]string{"ORCH_PUBLIC_READ": "sometimes"}, "ORCH_PUBLIC_READ", "public_read", "true or false"},
		{"bad duration from env", "", map[string]string{"ORCH_SHUTDOWN_GRACE": "soon"}, "ORCH_SHUTDOWN_GRACE", "shutdown_grace", "invalid duration"},
		{"coolify rate limit too low", "coolify: { rate_limit: 5 }\n", nil, "", "coolify.rate_limit", "at least 10"},
		{"coolify rate limit from env", "", map[string]string{"ORCH_COOLIFY_RATE_LIMIT": "-1"}, "ORCH_COOLIFY_RATE_LIMIT", "coolify.rate_limit", "at least 10"},
		{"bad redis scheme", "redis_url: http://x:6379\n", nil, "", "redis_url", "scheme"},
		{"min replicas without redis", "locks: { min_replicas: 1 }\n", nil, "", "locks.min_replicas", "needs the Redis backend"},
		{"negative min replicas", "redis_url: redis://x:6379\nlocks: { min_replicas: -1 }\n", nil, "", "locks.min_replicas", "negative"},
		{"zero replica timeout", "redis_url: redis://x:6379\nlocks: { min_replicas: 1, replica_timeout: 0s }\n", nil, "", "locks.replica_timeout", "positive"},
		{"short token", "tokens: { admin: short }\n", nil, "", "tokens.admin", "shorter than 16"},
		{"same tokens", "tokens: { admin: aaaaaaaaaaaaaaaa, trigger: aaaaaaaaaaaaaaaa }\n", nil, "", "tokens.admin", "must differ from tokens.trigger"},
		{"negative rate", "rate_limits: { trigger: { per_second: -1 } }\n", nil, "", "rate_limits.trigger.per_second", "negative"},
		{"no burst", "rate_limits: { webhook: { per_second: 3, burst: 0 } }\n", nil, "", "rate_limits.webhook.burst", "at least 1"},
		{"rules without secret", "webhooks: { github: { rules: [ { pipeline: prod } ] } }\n", nil, "", "webhooks.github.secret", "required"},
		{"rule without pipeline", "webhooks: { gitlab: { secret: 0123456789abcdef, rules: [ { branch: main } ] } }\n", nil, "", "webhooks.gitlab.rules[0].pipeline", "required"},
		{"bad glob", "webhooks: { generic: { secret: 0123456789abcdef, rules: [ { pipeline: p, branch: '[' } ] } }\n", nil, "", "webhooks.generic.rules[0].branch", "glob"},
		{"merge-request source", "webhooks: { gitlab: { secret: 0123456789abcdef, rules: [ { pipeline: p, sources: [push, merge_request_event] } ] } }\n", nil, "", "webhooks.gitlab.rules[0].sources[1]", "never deploy"},
		{"generic source", "webhooks: { generic: { secret: 0123456789abcdef, rules: [ { pipeline: p, sources: [push] } ] } }\n", nil, "", "webhooks.generic.rules[0].sources[0]", "no source"},
		{"bad source", "webhooks: { github: { secret: 0123456789abcdef, rules: [ { pipeline: p, sources: ['Push!'] } ] } }\n", nil, "", "webhooks.github.rules[0].sources[0]", "not a source name"},
		{"unknown provider", "webhooks: { bitbucket: {} }\n", nil, "", "webhooks.bitbucket", "unknown field"},
		{"payload ref outside rules", "listen: '${payload.x}'\n", nil, "", "listen", "not allowed here"},
		{"bad log level", "log: { level: loud }\n", nil, "", "log.level", "not one of"},
		{"unset variable", "tokens: { admin: '${NOPE}' }\n", map[string]string{}, "", "tokens.admin", "NOPE is not set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.yaml != "" {
				path = write(t, t.TempDir(), "d.yaml", tc.yaml)
			}
			getenv := testEnv()
			if tc.env != nil {
				getenv = func(k string) string { return tc.env[k] }
			}
			_, err := LoadDaemon(path, getenv, nil)
			ps := mustProblems(t, err)
			p, ok := findProblem(ps, tc.field, tc.msg)
			if !ok {
				t.Fatalf("no problem on %q containing %q; got:\n%v", tc.field, tc.msg, ps)
			}
			wantFile := tc.file
			if wantFile == "" {
				wantFile = path
			}
			if p.File != wantFile {
				t.Errorf("problem names %q, want %q", p.File, wantFile)
			}
		})
	}
}

func TestLoadDaemonRedisURLProblemHidesPassword(t *testing.T) {
	env := map[string]string{"ORCH_REDIS_URL": "http://:" + sentinel + "@host"}
	_, err := LoadDaemon("", func(k string) string { return env[k] }, nil)
	wantProblem(t, mustProblems(t, err), "redis_url", "scheme")
}

func TestEnvOverridesCoverKnownKeys(t *testing.T) {
	d, err := LoadDaemon("", func(k string) string {
		switch k {
		case "ORCH_PUBLIC_READ":
			return "true"
		case "ORCH_SHUTDOWN_GRACE":
			return "1s"
		case "ORCH_LIVENESS_TTL":
			return "3s"
		case "ORCH_MAX_BODY_BYTES":
			return "10"
		case "ORCH_LOCKS_MIN_REPLICAS":
			return "1"
		case "ORCH_LOCKS_REPLICA_TIMEOUT":
			return "250ms"
		case "ORCH_COOLIFY_RATE_LIMIT":
			return "60"
		case "ORCH_LOG_LEVEL":
			return "warn"
		case "ORCH_LOG_FORMAT":
			return "json"
		case "ORCH_LISTEN":
			return ":1"
		case "ORCH_REDIS_URL":
			return "redis://localhost:1"
		}
		return "value-of-" + strings.ToLower(k) + "-long-enough"
	}, nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	for env, key := range EnvOverrides() {
		if !strings.HasPrefix(env, "ORCH_") || key == "" {
			t.Errorf("override %q → %q", env, key)
		}
	}
	if d.Coolify.RateLimit != 60 {
		t.Errorf("coolify.rate_limit %d from ORCH_COOLIFY_RATE_LIMIT=60", d.Coolify.RateLimit)
	}
	if d.Tokens.Trigger.Reveal() != "value-of-orch_trigger_token-long-enough" || d.Webhooks.Generic == nil || d.PipelinesDir != "value-of-orch_pipelines_dir-long-enough" ||
		d.Locks != (DaemonLocks{MinReplicas: 1, ReplicaTimeout: 250 * time.Millisecond}) {
		t.Errorf("got %+v", d)
	}
}

// TestLoadDaemonAcceptsHARedisURLs: the Sentinel and Cluster URL forms the Redis backend
// opens are accepted as redis_url.
func TestLoadDaemonAcceptsHARedisURLs(t *testing.T) {
	for _, u := range []string{
		"redis://s1:26379/0?master_name=orch&addr=s2:26379&addr=s3:26379",
		"redis+cluster://n1:7000?addr=n2:7000&addr=n3:7000",
		"rediss+cluster://:pw@n1:7000",
	} {
		env := map[string]string{"ORCH_REDIS_URL": u}
		if _, err := LoadDaemon("", func(k string) string { return env[k] }, nil); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}
