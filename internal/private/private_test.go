package private_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/internal/private"
)

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestDirCreatesPrivateAndReportsAnOpenOne(t *testing.T) {
	base := t.TempDir()
	fresh := filepath.Join(base, "a", "state")
	open, err := private.Dir(fresh)
	if err != nil || open != 0 {
		t.Fatalf("Dir(new): got open=%s err=%v, want 0, nil", open, err)
	}
	if m := mode(t, fresh); m != 0o700 {
		t.Errorf("new state directory: mode %s, want 0700", m)
	}

	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	open, err = private.Dir(shared)
	if err != nil || open != 0o055 {
		t.Errorf("Dir(0755): got open=%s err=%v, want ----r-xr-x", open, err)
	}
	if m := mode(t, shared); m != 0o755 {
		t.Errorf("an existing directory's mode changed to %s", m)
	}

	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := private.Dir(file); err == nil {
		t.Error("Dir(a file): no error")
	}
}

func TestFileCreatesAndTightens(t *testing.T) {
	dir := t.TempDir()
	fresh := filepath.Join(dir, "new.db")
	if err := private.File(fresh); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, fresh); m != 0o600 {
		t.Errorf("new file: mode %s, want 0600", m)
	}

	old := filepath.Join(dir, "old.db")
	for _, p := range []string{old, old + "-wal", old + "-shm"} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o664); err != nil {
			t.Fatal(err)
		}
	}
	if err := private.File(old); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{old, old + "-wal", old + "-shm"} {
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s: mode %s after File, want 0600", filepath.Base(p), m)
		}
	}
	if b, _ := os.ReadFile(old); string(b) != "x" {
		t.Errorf("File changed an existing file's content: %q", b)
	}
}
