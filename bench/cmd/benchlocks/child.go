package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
)

// childFlag makes benchlocks a lock client in a process of its own, on the SQLite file it
// names, driven by its parent over stdin and stdout (one request, one answer per line):
//
//	acquire <key>  →  granted <asked> <granted>      (Unix nanoseconds)
//	release        →  released <start> <end>
//	               or error <message>
//
// It is how orchestrator-sqlite-procs measures the SQLite backend across processes, as
// `serve` and `run` share a state directory.
const childFlag = "-sqlite-child"

// runChild serves one parent until stdin closes.
func runChild(path string, in io.Reader, out io.Writer) error {
	d, err := sqlitelock.Open(path)
	if err != nil {
		return err
	}
	c, err := newOrchClient(d, int64(os.Getpid()))
	if err != nil {
		return err
	}
	defer c.close()
	ctx := context.Background()
	var cur *held
	w := bufio.NewWriter(out)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch {
		case cmd == "acquire" && cur == nil:
			h, err := c.acquire(ctx, arg)
			if err != nil {
				fmt.Fprintf(w, "error %s\n", oneLine(err))
				break
			}
			cur = &h
			fmt.Fprintf(w, "granted %d %d\n", h.asked.UnixNano(), h.granted.UnixNano())
		case cmd == "release" && cur != nil:
			start, end, err := cur.release(ctx)
			cur = nil
			if err != nil {
				fmt.Fprintf(w, "error %s\n", oneLine(err))
				break
			}
			fmt.Fprintf(w, "released %d %d\n", start.UnixNano(), end.UnixNano())
		default:
			fmt.Fprintf(w, "error unexpected %q\n", sc.Text())
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// childClient is a client in a child process.
type childClient struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startChild starts a child process of this binary serving a client on the SQLite file
// at path.
func startChild(path string) (*childClient, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, childFlag, path)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child process: %w", err)
	}
	return &childClient{cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

// call sends one request and parses the answer's two times.
func (c *childClient) call(req, want string) (time.Time, time.Time, error) {
	if _, err := fmt.Fprintln(c.in, req); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("child %d: %w", c.cmd.Process.Pid, err)
	}
	if !c.out.Scan() {
		return time.Time{}, time.Time{}, fmt.Errorf("child %d exited: %v", c.cmd.Process.Pid, c.out.Err())
	}
	f := strings.Fields(c.out.Text())
	if len(f) != 3 || f[0] != want {
		return time.Time{}, time.Time{}, fmt.Errorf("child %d: %s", c.cmd.Process.Pid, c.out.Text())
	}
	a, err1 := strconv.ParseInt(f[1], 10, 64)
	b, err2 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("child %d: %q: %w", c.cmd.Process.Pid, c.out.Text(), err)
	}
	return time.Unix(0, a), time.Unix(0, b), nil
}

// acquire asks the child for key. A child serves one request at a time; ctx only bounds
// the parent's patience through the round's timeout, which ends the run.
func (c *childClient) acquire(_ context.Context, key string) (held, error) {
	asked, granted, err := c.call("acquire "+key, "granted")
	if err != nil {
		return held{}, err
	}
	return held{asked: asked, granted: granted, release: func(context.Context) (time.Time, time.Time, error) {
		return c.call("release", "released")
	}}, nil
}

// close ends the child: it closes its database when stdin closes.
func (c *childClient) close() error {
	_ = c.in.Close()
	return c.cmd.Wait()
}
