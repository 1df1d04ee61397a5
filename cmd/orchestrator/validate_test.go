//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// countOpens counts how often each of paths is opened from now on (inotify IN_OPEN): the
// returned function reports the counts so far, in the order of paths. Opens are queued as
// they happen, so an open that returned has been counted. Closes are watched too, though not
// counted: inotify merges an event with an identical one queued right before it, and a
// close between two opens of a file keeps them apart.
func countOpens(t *testing.T, paths ...string) func() []int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	index := map[int32]int{}
	for i, p := range paths {
		wd, err := unix.InotifyAddWatch(fd, p, unix.IN_OPEN|unix.IN_CLOSE)
		if err != nil {
			t.Fatalf("inotify watch %s: %v", p, err)
		}
		index[int32(wd)] = i
	}
	counts := make([]int, len(paths))
	buf := make([]byte, 64<<10)
	return func() []int {
		t.Helper()
		for {
			n, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				return slices.Clone(counts)
			}
			if err != nil {
				t.Fatalf("read inotify events: %v", err)
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				wd := int32(binary.NativeEndian.Uint32(buf[off:]))
				mask := binary.NativeEndian.Uint32(buf[off+4:])
				if i, ok := index[wd]; ok && mask&unix.IN_OPEN != 0 {
					counts[i]++
				}
				off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
			}
		}
	}
}

// TestValidateReadsEachFileOnce: `validate DIR` reads and parses each file of DIR once: the
// daemon config in it is told from the pipelines by its top-level keys and then checked, and
// each pipeline file is loaded, from that one read (inotify counts the opens); `validate
// FILE` of a daemon config too. The problems found are the ones validate always reported.
func TestValidateReadsEachFileOnce(t *testing.T) {
	dir := t.TempDir()
	pipes := filepath.Join(t.TempDir(), "pipelines") // the daemon's pipelines, elsewhere
	if err := os.Mkdir(pipes, 0o700); err != nil {
		t.Fatal(err)
	}
	daemon := filepath.Join(dir, "orchestrator.yaml")
	pipeline := filepath.Join(dir, "prod.yaml")
	for path, content := range map[string]string{
		daemon: "listen: 127.0.0.1:8080\npipelines_dir: " + pipes + "\nconnections: { per_client: 0 }\n",
		pipeline: "coolify: { url: 'https://coolify.example.com', token: t }\n" +
			"services:\n  - name: api\n    uuid: abc123\n    image_tag: v1\non_failure: never\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opens := countOpens(t, daemon, pipeline)

	out, errOut, err := invoke(context.Background(), nil, "validate", dir)
	if exitCode(err) != exitUsage {
		t.Errorf("validate: exit %d (%v), want 2\n%s%s", exitCode(err), err, out, errOut)
	}
	want := pipeline + ": on_failure: \"never\" is not one of: rollback, rollback-failed, halt\n" +
		daemon + ": connections.per_client: must be between 1 and connections.max (1024)\n"
	if out != want {
		t.Errorf("validate output:\n%s\nwant:\n%s", out, want)
	}
	first := opens()
	if first[0] != 1 || first[1] != 1 {
		t.Errorf("validate opened the daemon config %d times and the pipeline file %d times, want each once", first[0], first[1])
	}

	// So is a daemon config named as a file.
	out, _, err = invoke(context.Background(), nil, "validate", daemon)
	if want := daemon + ": connections.per_client: must be between 1 and connections.max (1024)\n"; exitCode(err) != exitUsage || out != want {
		t.Errorf("validate %s: exit %d, output:\n%s\nwant:\n%s", daemon, exitCode(err), out, want)
	}
	if n := opens()[0] - first[0]; n != 1 {
		t.Errorf("validate of the daemon config alone opened it %d times, want once", n)
	}
}

// Issue 41, item 4: a FIFO named *.yaml in the pipelines directory used to hang validate and
// serve in open(2), deaf to SIGINT and SIGTERM. Both now refuse it at once, naming it, with
// exit code 2.
func TestValidateAndServeRefuseAFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ORCH_STATE_DIR": t.TempDir(), "ORCH_LISTEN": "127.0.0.1:0"}
	for _, args := range [][]string{{"validate", dir}, {"serve", "--pipelines-dir", dir}} {
		done := make(chan struct{})
		var out, errOut string
		var err error
		go func() {
			defer close(done)
			out, errOut, err = invoke(context.Background(), env, args...)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%v did not return within 10s: it blocks on the FIFO", args)
		}
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(out+errOut+err.Error(), fifo+": is not a regular file") {
			t.Errorf("%v: %v\n%s%s\nwant exit code 2 naming %s as not a regular file", args, err, out, errOut, fifo)
		}
	}
}
