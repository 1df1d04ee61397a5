package sqlitelock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
)

// TestReleaseInAnotherProcessWakesWaiter: a release made through another handle on the
// file (another process) wakes a waiter long before the Locker's own fallback poll would:
// through the notifier alone (the hubs' polls are an hour apart), and, where neither
// process has a notifier (no inotify), through the waiter's release-counter poll.
func TestReleaseInAnotherProcessWakesWaiter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		notify bool
		poll   time.Duration
	}{
		{name: "notifier", notify: true, poll: time.Hour},
		{name: "poll", notify: false, poll: 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "locks.db")
			other, err := sqlitelock.OpenUnshared(path, tc.poll, tc.notify)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			d, err := sqlitelock.OpenUnshared(path, tc.poll, tc.notify)
			if err != nil {
				t.Fatal(err)
			}
			// The Locker's own fallback poll is far away: only the driver's signal can be fast.
			l := locks.New(d, locks.Options{PollInterval: time.Hour})
			defer l.Close()
			ctx := t.Context()
			for round := range 20 {
				key := fmt.Sprintf("k:%d", round)
				if _, err := other.TryAcquire(ctx, locks.Grant{Key: key, Token: "tok", Holder: "other#1/x", TTL: time.Minute}); err != nil {
					t.Fatal(err)
				}
				granted := make(chan time.Time, 1)
				go func() {
					le, err := l.Acquire(ctx, locks.Request{Key: key, Holder: "me#1/x", Budget: locks.Budget{Timeout: time.Hour}})
					if err != nil {
						t.Error(err)
						granted <- time.Time{}
						return
					}
					granted <- time.Now()
					_ = le.Release(ctx)
				}()
				for {
					info, err := l.Get(ctx, key)
					if err == nil && info.Waiters == 1 {
						break
					}
					time.Sleep(2 * time.Millisecond)
				}
				released := time.Now()
				if err := other.Release(ctx, key, "tok"); err != nil {
					t.Fatal(err)
				}
				select {
				case at := <-granted:
					if round == 0 {
						t.Logf("woken %s after the other handle's release", at.Sub(released).Round(time.Microsecond))
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("round %d: waiter not woken by a release through another handle", round)
				}
			}
		})
	}
}

// TestCrashedHolderExpires: a process that dies holding a lease blocks others only until
// the lease's TTL runs out.
func TestCrashedHolderExpires(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir, "SQLITELOCK_TEST_MODE=crash")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != crashExit {
		t.Fatalf("crashing helper: got %v, want exit %d\n%s", err, crashExit, out)
	}
	d, err := sqlitelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	l := locks.New(d, locks.Options{PollInterval: 100 * time.Millisecond})
	defer l.Close()
	ctx := context.Background()
	info, err := l.Get(ctx, "test:crash")
	if err != nil {
		t.Fatalf("the crashed holder's lease is gone before its TTL: %v", err)
	}
	if info.Holder != "crash#1/step" {
		t.Errorf("holder: got %q, want crash#1/step", info.Holder)
	}
	le, err := l.Acquire(ctx, locks.Request{Key: "test:crash", Holder: "next#1/step", Budget: locks.Budget{Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatalf("acquire after the crashed holder's TTL: %v", err)
	}
	if now := time.Now(); now.Before(info.ExpiresAt) {
		t.Errorf("granted at %s, before the crashed lease expired at %s", now, info.ExpiresAt)
	}
	if le.Fence() <= info.Fence {
		t.Errorf("fence after the crash: got %d, want > %d", le.Fence(), info.Fence)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOddPath: characters that mean something in a URI stay part of the file name.
func TestOddPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state dir?x=1#frag%20")
	path := filepath.Join(dir, "locks.db")
	d, err := sqlitelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.TryAcquire(t.Context(), locks.Grant{Key: "k:x", Token: "t", Holder: "p#1/x", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database not at the given path: %v", err)
	}
	if d.Path() != path {
		t.Errorf("Path: got %q, want %q", d.Path(), path)
	}
}

// TestFilesArePrivate: Open creates the state directory 0700 and the database with its -wal
// and -shm 0600, whatever the umask lets through.
func TestFilesArePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "locks.db")
	d, err := sqlitelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.TryAcquire(t.Context(), locks.Grant{Key: "k:x", Token: "t", Holder: "p#1/x", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600, path + "-wal": 0o600, path + "-shm": 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(p), err)
		}
		if m := fi.Mode().Perm(); m != want {
			t.Errorf("%s: mode %s, want %s", filepath.Base(p), m, want)
		}
	}
}
