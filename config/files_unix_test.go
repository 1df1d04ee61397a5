//go:build unix

package config

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within runs f and fails the test if it does not return within a few seconds (a read that
// blocks, as on a FIFO nobody writes to, would hang the daemon).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not return within 5s: it blocks", what)
	}
}

// Issue 41, item 4: a FIFO named *.yaml is refused without being read: loading the
// directory, validating it and loading the FIFO as a pipeline or a daemon config all return,
// naming it; the other files still load.
func TestFIFOIsRefusedWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "good.yaml", minimal)
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	check := func(what string, ps Problems) {
		t.Helper()
		for _, p := range ps {
			if p.File == fifo && strings.Contains(p.Message, "not a regular file") {
				return
			}
		}
		t.Errorf("%s: no problem names %s as not a regular file; got:\n%s", what, fifo, strings.Join(ps.Lines(), "\n"))
	}
	within(t, "LoadPipelines", func() {
		got, err := LoadPipelines(dir, testEnv())
		check("LoadPipelines", AsProblems(err))
		if got["good"] == nil {
			t.Errorf("LoadPipelines: good.yaml not loaded beside the FIFO")
		}
	})
	within(t, "Validate", func() { check("Validate", Validate(testEnv(), dir)) })
	within(t, "Validate FILE", func() { check("Validate FILE", Validate(testEnv(), fifo)) })
	within(t, "LoadPipelineFile", func() {
		_, err := LoadPipelineFile(fifo, testEnv())
		check("LoadPipelineFile", AsProblems(err))
	})
	within(t, "LoadDaemon", func() {
		_, err := LoadDaemon(fifo, testEnv(), nil)
		check("LoadDaemon", AsProblems(err))
	})
}
