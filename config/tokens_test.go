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

// Issue 36, item 1: named tokens load with their names and roles, beside the shared ones
// (which become the tokens named trigger, admin and read); a bad name, an unknown role, a
// missing or repeated token, or a name already taken is a problem naming the entry's field,
// never the value.
func TestNamedTokens(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "orchestrator.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"ORCH_TRIGGER_TOKEN": "trigger-token-0123456789", "CI_PROD": "ci-prod-token-0123456789"}
	getenv := func(k string) string { return env[k] }
	write(`tokens:
  named:
    - {name: ci-prod, role: deployer, token: "${CI_PROD}"}
    - {name: alice, role: approver, token: alice-token-0123456789}
`)
	d, err := LoadDaemon(path, getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range d.Tokens.All() {
		got = append(got, n.Name+":"+string(n.Role)+":"+n.Token.Reveal())
	}
	want := []string{"trigger:deployer:trigger-token-0123456789", "ci-prod:deployer:ci-prod-token-0123456789", "alice:approver:alice-token-0123456789"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("tokens: got %v, want %v", got, want)
	}

	write(`tokens:
  named:
    - {name: "Bad Name", role: deployer, token: bad-name-token-0123456789}
    - {name: trigger, role: viewer, token: other-token-0123456789}
    - {name: bob, role: superuser, token: bob-token-0123456789}
    - {name: carol, role: viewer}
    - {name: dave, role: viewer, token: bad-name-token-0123456789}
`)
	_, err = LoadDaemon(path, getenv, nil)
	ps := AsProblems(err)
	for _, w := range []struct{ field, substr string }{
		{"tokens.named[0].name", "is not a token name"},
		{"tokens.named[1].name", `"trigger" is already the name of tokens.trigger`},
		{"tokens.named[2].role", `"superuser" is not a role: use viewer, deployer, approver or admin`},
		{"tokens.named[3].token", "is required"},
		{"tokens.named[4].token", "must differ from tokens.named[0].token"},
	} {
		if _, ok := findProblem(ps, w.field, w.substr); !ok {
			t.Errorf("no problem %s: %s; got:\n%s", w.field, w.substr, strings.Join(ps.Lines(), "\n"))
		}
	}
	if strings.Contains(ps.Error(), "ci-prod-token-0123456789") || strings.Contains(ps.Error(), "bob-token") {
		t.Errorf("a problem shows a token:\n%s", ps.Error())
	}
}

// Issue 36, item 1: the oidc block's problems name their fields; a valid one loads.
func TestOIDCConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "orchestrator.yaml")
	if err := os.WriteFile(path, []byte(`oidc:
  issuer: login.example.com
  roles: [{ claim: groups, value: ops, role: root }]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadDaemon(path, func(string) string { return "" }, nil)
	ps := AsProblems(err)
	for _, w := range []struct{ field, substr string }{
		{"oidc.issuer", "is not a URL"}, {"oidc.client_id", "is required"}, {"oidc.client_secret", "is required"},
		{"oidc.roles[0].role", `"root" is not a role`},
	} {
		if _, ok := findProblem(ps, w.field, w.substr); !ok {
			t.Errorf("no problem %s: %s; got:\n%s", w.field, w.substr, strings.Join(ps.Lines(), "\n"))
		}
	}
	if err := os.WriteFile(path, []byte(`oidc:
  issuer: https://login.example.com
  client_id: orchestrator
  client_secret: "${OIDC_SECRET}"
  roles: [{ claim: groups, value: ops, role: admin }]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDaemon(path, func(k string) string { return map[string]string{"OIDC_SECRET": "oidc-secret-0123456789"}[k] }, nil)
	if err != nil || d.OIDC.ClientSecret.Reveal() != "oidc-secret-0123456789" || d.OIDC.Roles[0].Role != RoleAdmin {
		t.Errorf("valid oidc block: %+v, %v", d, err)
	}
}
