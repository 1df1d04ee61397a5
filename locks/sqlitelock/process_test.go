package sqlitelock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
)

// helperEnv makes the test binary act as one of the processes of TestTwoProcesses.
const helperEnv = "SQLITELOCK_TEST_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(helper(dir))
	}
	os.Exit(m.Run())
}

const helperRounds = 25

// TestTwoProcesses runs two OS processes against one lock file. Each takes the same key
// in a loop and, inside the critical section, creates a marker file exclusively (it exists
// only while someone is inside), and increments a counter kept in a plain file by a
// read-modify-write that loses updates if two sections overlap.
func TestTwoProcesses(t *testing.T) { twoProcesses(t, "") }

// TestTwoProcessesNotifierOnly is TestTwoProcesses with every poll an hour apart and leases
// of an hour: each of the 50 handoffs between the processes must come from the notifier, so
// a single release it misses leaves a waiter asleep until the test times out.
func TestTwoProcessesNotifierOnly(t *testing.T) { twoProcesses(t, "notify") }

func twoProcesses(t *testing.T, mode string) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "counter"), []byte("0"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for i := range 2 {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+dir, "SQLITELOCK_TEST_ID="+strconv.Itoa(i), "SQLITELOCK_TEST_MODE="+mode)
		out := new(strings.Builder)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	fences := make(map[int64]int)
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v\n%s", i, err, outs[i])
		}
		sc := bufio.NewScanner(strings.NewReader(outs[i].String()))
		n := 0
		for sc.Scan() {
			f, ok := strings.CutPrefix(sc.Text(), "fence ")
			if !ok {
				continue
			}
			fence, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			fences[fence]++
			n++
		}
		if n != helperRounds {
			t.Errorf("process %d: got %d critical sections, want %d\n%s", i, n, helperRounds, outs[i])
		}
	}
	for f, n := range fences {
		if n > 1 {
			t.Errorf("fence %d granted %d times", f, n)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "counter"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), strconv.Itoa(2*helperRounds); got != want {
		t.Errorf("counter: got %s, want %s (critical sections overlapped)", got, want)
	}
}

// crashExit is the exit code of a helper that "crashes" holding a lease.
const crashExit = 7

// helper is one process of TestTwoProcesses or TestCrashedHolderExpires; it returns the
// exit code.
func helper(dir string) int {
	if os.Getenv("SQLITELOCK_TEST_MODE") == "crash" {
		return crash(dir)
	}
	fail := func(format string, args ...any) int {
		fmt.Printf(format+"\n", args...)
		return 1
	}
	poll, lockerPoll, ttl := sqlitelock.DefaultPollInterval, 200*time.Millisecond, 10*time.Second
	if os.Getenv("SQLITELOCK_TEST_MODE") == "notify" {
		poll, lockerPoll, ttl = time.Hour, time.Hour, time.Hour
	}
	d, err := sqlitelock.Open(filepath.Join(dir, "locks.db"), sqlitelock.WithPollInterval(poll))
	if err != nil {
		return fail("open: %v", err)
	}
	l := locks.New(d, locks.Options{PollInterval: lockerPoll})
	defer l.Close()
	ctx := context.Background()
	id := os.Getenv("SQLITELOCK_TEST_ID")
	marker, counter := filepath.Join(dir, "inside"), filepath.Join(dir, "counter")
	for i := range helperRounds {
		le, err := l.Acquire(ctx, locks.Request{Key: "test:two-processes", Holder: fmt.Sprintf("proc%s#%d/step", id, i),
			TTL: ttl, Budget: locks.Budget{Timeout: time.Hour}})
		if err != nil {
			return fail("acquire: %v", err)
		}
		f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			if errors.Is(err, os.ErrExist) {
				return fail("overlap: another process is inside the critical section")
			}
			return fail("marker: %v", err)
		}
		_ = f.Close()
		b, err := os.ReadFile(counter)
		if err != nil {
			return fail("read counter: %v", err)
		}
		n, err := strconv.Atoi(string(b))
		if err != nil {
			return fail("parse counter: %v", err)
		}
		time.Sleep(time.Millisecond) // widen the window a lost update would need
		if err := os.WriteFile(counter, []byte(strconv.Itoa(n+1)), 0o600); err != nil {
			return fail("write counter: %v", err)
		}
		fmt.Printf("fence %d\n", le.Fence())
		if err := os.Remove(marker); err != nil {
			return fail("remove marker: %v", err)
		}
		if err := le.Release(ctx); err != nil {
			return fail("release: %v", err)
		}
	}
	return 0
}

// crash takes a lease with a short TTL and exits without releasing it or closing anything.
func crash(dir string) int {
	d, err := sqlitelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	l := locks.New(d, locks.Options{})
	_, err = l.Acquire(context.Background(), locks.Request{Key: "test:crash", Holder: "crash#1/step", TTL: 3 * time.Second,
		Budget: locks.Budget{Timeout: time.Second}})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	return crashExit
}
