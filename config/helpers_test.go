package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sentinel is what the test environment returns; no problem text may contain it.
const sentinel = "S3CRET-VALUE-7f3a"

// testEnv returns sentinel-bearing values for every variable (URLs for *_URL), except
// ORCH_* and the names in unset.
func testEnv(unset ...string) func(string) string {
	return func(k string) string {
		for _, u := range unset {
			if k == u {
				return ""
			}
		}
		if strings.HasPrefix(k, "ORCH_") {
			return "" // daemon overrides are set by each test that wants them
		}
		if strings.HasSuffix(k, "_URL") {
			return "https://" + strings.ToLower(strings.ReplaceAll(k, "_", "-")) + ".example.com"
		}
		return sentinel + "-" + k
	}
}

// mustProblems returns err's Problems, failing the test when err is nil or of another kind.
func mustProblems(t *testing.T, err error) Problems {
	t.Helper()
	if err == nil {
		t.Fatal("got no error, want problems")
	}
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("got error %T %q, want Problems", err, err)
	}
	if strings.Contains(err.Error(), sentinel) {
		t.Errorf("problems leak an environment value:\n%v", err)
	}
	return ps
}

// findProblem returns the problem on field whose message contains substr.
func findProblem(ps Problems, field, substr string) (Problem, bool) {
	for _, p := range ps {
		if p.Field == field && strings.Contains(p.Message, substr) {
			return p, true
		}
	}
	return Problem{}, false
}

func wantProblem(t *testing.T, ps Problems, field, substr string) {
	t.Helper()
	if _, ok := findProblem(ps, field, substr); !ok {
		t.Errorf("no problem on %q containing %q; got:\n%s", field, substr, strings.Join(ps.Lines(), "\n"))
	}
}

// minimal is a valid pipeline to which tests append or replace parts.
const minimal = `
coolify:
  url: https://coolify.example.com
  token: ${COOLIFY_TOKEN}
services:
  - name: api
    uuid: abc123
    image_tag: "${trigger.image_tag}"
    env:
      - { key: LOG_LEVEL, value: info }
`

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func keys[V any](m map[string]V) []string { return sortedKeys(m) }

func mkdir(path string) error { return os.MkdirAll(path, 0o755) }
