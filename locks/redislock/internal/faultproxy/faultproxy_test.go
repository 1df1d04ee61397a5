package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every line with the same line until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, rd *bufio.Reader, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return rd.ReadString('\n')
}

func TestProxy(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}

	c, rd := dial()
	if got, err := roundTrip(c, rd, "hello"); err != nil || got != "hello\n" {
		t.Fatalf("through the proxy: got %q, %v; want hello", got, err)
	}

	p.SetDelay(50 * time.Millisecond)
	start := time.Now()
	if got, err := roundTrip(c, rd, "slow"); err != nil || got != "slow\n" {
		t.Fatalf("delayed: got %q, %v; want slow", got, err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("delayed round trip took %s, want at least 100ms (50ms each way)", took)
	}
	p.SetDelay(0)

	p.Cut()
	if _, err := roundTrip(c, rd, "after cut"); err == nil {
		t.Fatal("a cut connection still answered")
	}

	c2, rd2 := dial()
	if got, err := roundTrip(c2, rd2, "again"); err != nil || got != "again\n" {
		t.Fatalf("new connection after a cut: got %q, %v; want again", got, err)
	}
	p.Reset()
	_, err = roundTrip(c2, rd2, "after reset")
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Fatalf("after a reset: got %v, want a connection reset", err)
	}
}
