package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeUsingIt returns the sh blocks of README.md's "Using it" section, up to its first
// subsection, as one script.
func readmeUsingIt(t *testing.T) string {
	t.Helper()
	readme := string(mustRead(t, filepath.Join(repoRoot, "README.md")))
	start := strings.Index(readme, "\n## Using it\n")
	if start < 0 {
		t.Fatal(`README.md has no "## Using it" section`)
	}
	section := readme[start+1:]
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	var script strings.Builder
	for _, block := range strings.Split(section, "```sh\n")[1:] {
		body, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatal("README.md: an sh block in Using it does not end")
		}
		script.WriteString(body)
	}
	if script.Len() == 0 {
		t.Fatal("README.md: Using it has no sh blocks")
	}
	return script.String()
}

// TestREADMEUsingIt runs the sh blocks of README's "Using it" section as written, with bash
// (set -e), in a copy of the repository (as a fresh clone has it, without .git), and fails
// on the first command that fails. The only change: the README's 127.0.0.1:8080 becomes a
// free port, so the test does not depend on 8080 being free. The demo the script starts in
// the background is stopped with its process group.
func TestREADMEUsingIt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the README's workflow")
	}
	if _, err := exec.LookPath("go"); err != nil {
		skipOutsideCI(t, "no go on PATH")
	}
	addr := freeAddr(t)
	script := strings.ReplaceAll(readmeUsingIt(t), "127.0.0.1:8080", addr)

	clone := t.TempDir()
	tar := exec.Command("bash", "-c", `tar -C "$1" --exclude=.git --exclude=.orchestrator --exclude=./orchestrator -cf - . | tar -C "$2" -xf -`,
		"copy", repoRoot, clone)
	if out, err := tar.CombinedOutput(); err != nil {
		t.Fatalf("copy the repository: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = clone
	cmd.Env = append(os.Environ(), "ORCH_LISTEN="+addr, "USER=readme")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	// The demo in the background is in the script's process group.
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	if err != nil {
		demoLog, _ := os.ReadFile(filepath.Join(clone, "demo.log"))
		t.Fatalf("README's Using it failed: %v\n%s\ndemo.log:\n%s", err, out.String(), demoLog)
	}
	for _, want := range []string{"run.succeeded", "from daemon http://" + addr, "canceled", "exit code 1",
		"froze coolify:phase2", "lifted the freeze on coolify:phase2", "unfreeze"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("README's Using it output lacks %q:\n%s", want, out.String())
		}
	}
}

// skipOutsideCI skips t for a missing part of the machine, except in CI (CI=true, set by
// .ci/run), where the project's scripts install every part and a skip would hide a test.
func skipOutsideCI(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}
