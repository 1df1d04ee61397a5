package config

import (
	"strings"
	"testing"
)

// TestCheckEnvNamesUnknownVariables: a mistyped ORCH_* variable is named with the setting it
// most likely stands for; settings, env-source secrets, the caller's own names and other
// programs' variables are not.
func TestCheckEnvNamesUnknownVariables(t *testing.T) {
	set := []string{
		"HOME", "PATH", "ORCHESTRA", // not ORCH_*
		"ORCH_LISTEN", "ORCH_GITLAB_WEBHOOK_TOKEN", "ORCH_GENERIC_WEBHOOK_SECRET", // settings
		"ORCH_SECRET_DB_PASSWORD", "ORCH_SECRET_X", // env-source secrets
		"ORCH_URL", // the caller's own
		"ORCH_PUBLIC_REED", "ORCH_GITLAB_WEBHOOK_SECRET", "ORCH_GITHUB_WEBHOOK_TOKEN", "ORCH_TRIGER_TOKEN",
		"ORCH_REDISURL", "ORCH_SECRETS_DB_PASSWORD", "ORCH_STATEDIR", "ORCH_WHATEVER", "ORCH_PUBLIC_REED",
	}
	got := CheckEnv(set, "ORCH_URL")
	want := map[string]string{
		"ORCH_PUBLIC_REED":           "ORCH_PUBLIC_READ",
		"ORCH_GITLAB_WEBHOOK_SECRET": "ORCH_GITLAB_WEBHOOK_TOKEN",
		"ORCH_GITHUB_WEBHOOK_TOKEN":  "ORCH_GITHUB_WEBHOOK_SECRET",
		"ORCH_TRIGER_TOKEN":          "ORCH_TRIGGER_TOKEN",
		"ORCH_REDISURL":              "ORCH_REDIS_URL",
		"ORCH_SECRETS_DB_PASSWORD":   "ORCH_SECRET_<KEY>",
		"ORCH_STATEDIR":              "ORCH_STATE_DIR",
		"ORCH_WHATEVER":              "",
	}
	if len(got) != len(want) {
		t.Errorf("got %d unknown variables, want %d: %v", len(got), len(want), got)
	}
	for i, u := range got {
		if i > 0 && got[i-1].Name >= u.Name {
			t.Errorf("not sorted or not unique: %v", got)
		}
		s, ok := want[u.Name]
		if !ok {
			t.Errorf("%s reported, but orchestrator reads it", u.Name)
			continue
		}
		if u.Suggest != s {
			t.Errorf("%s: suggests %q, want %q", u.Name, u.Suggest, s)
		}
		if !strings.HasPrefix(u.String(), u.Name+" is set but orchestrator reads no such variable") ||
			(s != "" && !strings.Contains(u.String(), "did you mean "+s+"?")) {
			t.Errorf("message %q", u.String())
		}
	}
}

// TestWebhookSecretsShareTheLengthRule: the three webhook secrets (GitLab's is a shared token
// compared in constant time, the others HMAC keys) are held to the tokens' length rule alike,
// from the environment and from the file, each problem naming the variable.
func TestWebhookSecretsShareTheLengthRule(t *testing.T) {
	for name, field := range map[string]string{"ORCH_GITHUB_WEBHOOK_SECRET": "webhooks.github.secret",
		"ORCH_GITLAB_WEBHOOK_TOKEN": "webhooks.gitlab.secret", "ORCH_GENERIC_WEBHOOK_SECRET": "webhooks.generic.secret"} {
		env := map[string]string{name: "short-secret"}
		_, err := LoadDaemon("", func(k string) string { return env[k] }, nil)
		ps := mustProblems(t, err)
		wantProblem(t, ps, field, "shorter than 16 characters")
		if p, _ := findProblem(ps, field, "shorter"); p.File != name {
			t.Errorf("%s: the problem names %q, want the variable", field, p.File)
		}
	}
}
