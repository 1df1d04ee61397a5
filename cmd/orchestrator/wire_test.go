package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
)

// TestOpenBackendsWarnsOfAnOpenStateDir: a state directory others can read is kept as it is
// (an operator may have set it up so) but named in a warning; a new one is created private.
func TestOpenBackendsWarnsOfAnOpenStateDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode // 0: let openBackends create it
		warn bool
	}{{"new", 0, false}, {"private", 0o700, false}, {"open", 0o755, true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if tc.mode != 0 {
				if err := os.Mkdir(dir, tc.mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			b, err := openBackends(context.Background(), &config.Daemon{StateDir: dir}, slog.New(slog.NewTextHandler(&logs, nil)), nil)
			if err != nil {
				t.Fatal(err)
			}
			b.Close()
			warned := strings.Contains(logs.String(), "state directory is open to other users")
			if warned != tc.warn || (tc.warn && !strings.Contains(logs.String(), dir)) {
				t.Errorf("warned=%v, want %v naming %s; log:\n%s", warned, tc.warn, dir, logs.String())
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.mode
			if want == 0 {
				want = 0o700
			}
			if fi.Mode().Perm() != want {
				t.Errorf("state dir mode: got %s, want %s", fi.Mode().Perm(), want)
			}
		})
	}
}
