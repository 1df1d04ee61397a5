package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/knadh/koanf/parsers/yaml"
)

const repoRoot = "../.."

// readEnvExample reads .env.example as NAME=value pairs.
func readEnvExample(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf(".env.example: %q is not NAME=value", line)
		}
		env[k] = v
	}
	return env
}

// composeVar is a compose interpolation: ${NAME}, ${NAME:?message} or ${NAME:-default}.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:[?-])([^}]*))?\}`)

// interpolate expands compose variables the way `docker compose` does with env as its .env.
func interpolate(t *testing.T, s string, env map[string]string) string {
	return composeVar.ReplaceAllStringFunc(s, func(m string) string {
		p := composeVar.FindStringSubmatch(m)
		if v := env[p[1]]; v != "" {
			return v
		}
		if p[2] == ":-" {
			return p[3]
		}
		t.Errorf("docker-compose.yml needs %s, which .env.example does not set", p[1])
		return ""
	})
}

// TestComposeSetupValidates lays out the files docker-compose.yml mounts into the daemon's
// container, with the environment compose gives it from .env.example, and validates the
// daemon config there as the container would load it: every variable compose needs is in
// .env.example, the config and pipelines validate, and no env-source secret is missing
// (compose passes ORCH_SECRET_GATEWAY_OAUTH_CLIENT_SECRET). It also checks the port is
// published on loopback by default and the image has a HEALTHCHECK running `health`.
func TestComposeSetupValidates(t *testing.T) {
	exampleEnv := readEnvExample(t)
	data, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range composeVar.FindAllStringSubmatch(string(data), -1) {
		if _, ok := exampleEnv[m[1]]; !ok {
			t.Errorf("docker-compose.yml reads ${%s}; .env.example does not list it", m[1])
		}
	}
	doc, err := yaml.Parser().Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := doc["services"].(map[string]any)["orchestrator"].(map[string]any)
	if svc == nil {
		t.Fatal("docker-compose.yml has no orchestrator service")
	}

	// The container's environment, as compose builds it.
	env := map[string]string{}
	for k, v := range svc["environment"].(map[string]any) {
		env[k] = interpolate(t, v.(string), exampleEnv)
	}
	// The container's files: each mount copied to where it lands under root.
	root := t.TempDir()
	var cmdConfig string
	for _, v := range svc["volumes"].([]any) {
		parts := strings.Split(v.(string), ":")
		src, dst := filepath.Join(repoRoot, parts[0]), filepath.Join(root, parts[1])
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			// a single file
			data, rerr := os.ReadFile(src)
			if rerr != nil {
				t.Fatalf("mount %s: %v", v, rerr)
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`CMD \["serve", "--config", "([^"]+)"\]`).FindSubmatch(dockerfile); m != nil {
		cmdConfig = filepath.Join(root, string(m[1]))
	} else {
		t.Fatal("Dockerfile: no CMD [\"serve\", \"--config\", …]")
	}
	if !regexp.MustCompile(`(?m)^HEALTHCHECK .*\n?.*"health"`).Match(dockerfile) {
		t.Error("Dockerfile has no HEALTHCHECK running `orchestrator health`")
	}

	// As shipped, .env.example's placeholder tokens and webhook secrets refuse to start:
	// whoever read the repository knows them (issue 41, item 4).
	out, _, err := invoke(context.Background(), env, "validate", cmdConfig)
	if err == nil {
		t.Errorf("validate the compose setup with .env.example's placeholders: passed, want them refused\n%s", out)
	}
	for _, field := range []string{"tokens.trigger", "tokens.admin", "tokens.read", "webhooks.github.secret", "webhooks.gitlab.secret"} {
		if !strings.Contains(out, field+": is a placeholder") {
			t.Errorf("validate with .env.example's placeholders does not refuse %s:\n%s", field, out)
		}
	}
	// Filled in, as the comment at its top says, it validates.
	filled := map[string]string{}
	for k, v := range env {
		if strings.Contains(v, "change-me") {
			v = fmt.Sprintf("%x", sha256.Sum256([]byte(k)))
		}
		filled[k] = v
	}
	out, _, err = invoke(context.Background(), filled, "validate", cmdConfig)
	if err != nil {
		t.Errorf("validate the compose setup: %v\n%s", err, out)
	}
	if strings.Contains(out, "warning:") {
		t.Errorf("validate the compose setup warns (a secret compose does not pass?):\n%s", out)
	}

	// Every compose file publishes every port on loopback by default.
	for _, file := range []string{"docker-compose.yml", "docker-compose.ha.yml"} {
		data, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := yaml.Parser().Unmarshal(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		published := 0
		for name, s := range doc["services"].(map[string]any) {
			ports, _ := s.(map[string]any)["ports"].([]any)
			for _, p := range ports {
				published++
				if addr := interpolate(t, fmt.Sprint(p), map[string]string{}); !strings.HasPrefix(addr, "127.0.0.1:") {
					t.Errorf("%s: service %s publishes %q: want 127.0.0.1 by default", file, name, addr)
				}
			}
		}
		if published == 0 {
			t.Errorf("%s publishes no port", file)
		}
	}
	if !slices.Contains(strings.Fields(string(mustRead(t, filepath.Join(repoRoot, ".dockerignore")))), ".git") {
		t.Error(".dockerignore does not keep .git out of the build context")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
