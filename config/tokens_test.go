package config

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 41, item 4: a token or webhook secret that is easy to guess refuses the config: too
// short, too few distinct characters (sixteen a's), or a placeholder the repository ships
// (.env.example's change-me-… values). The problem names the field, never the value.
func TestWeakTokensAreRefused(t *testing.T) {
	weak := map[string]string{
		"short":         "s3cr3t-x",
		"one character": strings.Repeat("a", 16),
		"two":           strings.Repeat("ab", 16),
		"seven":         strings.Repeat("abcdefg", 4),
	}
	for name, v := range exampleSecrets(t) {
		weak[".env.example's "+name] = v
	}
	for what, v := range weak {
		for _, field := range []string{"tokens.trigger", "tokens.admin", "tokens.read", "webhooks.github.secret", "webhooks.gitlab.secret", "webhooks.generic.secret"} {
			env := map[string]string{EnvFor(field): v}
			_, err := LoadDaemon("", func(k string) string { return env[k] }, nil)
			if err == nil {
				t.Errorf("%s as %s: accepted", what, field)
				continue
			}
			ps := AsProblems(err)
			if _, ok := findProblem(ps, field, ""); !ok {
				t.Errorf("%s as %s: no problem names the field; got:\n%s", what, field, strings.Join(ps.Lines(), "\n"))
			}
			if strings.Contains(ps.Error(), v) {
				t.Errorf("%s as %s: a problem shows the value:\n%s", what, field, ps.Error())
			}
		}
	}
	// Generated and readable tokens pass.
	for _, v := range []string{"3f9c1a7e5b2d8064c1e9a7f3b5d20c8e", "demo-trigger-token-0001", "trigger-token-0123456789"} {
		if _, err := LoadDaemon("", func(k string) string { return map[string]string{"ORCH_TRIGGER_TOKEN": v}[k] }, nil); err != nil {
			t.Errorf("token %q refused: %v", v, err)
		}
	}
}

// exampleSecrets returns the token and webhook secret values .env.example ships, by name.
func exampleSecrets(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && !strings.HasPrefix(k, "#") && (strings.HasSuffix(k, "_TOKEN") && !strings.HasPrefix(k, "COOLIFY") || strings.HasSuffix(k, "_WEBHOOK_SECRET")) {
			out[k] = v
		}
	}
	if len(out) < 5 {
		t.Fatalf(".env.example: found %d tokens and webhook secrets, want the 5 compose passes", len(out))
	}
	return out
}
