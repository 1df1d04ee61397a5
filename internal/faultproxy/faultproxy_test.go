package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
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

// A silent partition holds the bytes of open and new connections until Heal, then they go
// through in order; a reset partition resets open connections and every new one until Heal.
func TestPartition(t *testing.T) {
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
	silent := func(c net.Conn, rd *bufio.Reader, msg string) {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			t.Fatal(err)
		}
		if got, err := rd.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("partitioned: read %q, %v; want nothing until the deadline", got, err)
		}
	}
	c, rd := dial()
	if got, err := roundTrip(c, rd, "before"); err != nil || got != "before\n" {
		t.Fatalf("through the proxy: got %q, %v", got, err)
	}
	p.Partition(false)
	silent(c, rd, "held")
	c2, rd2 := dial()
	silent(c2, rd2, "new")
	p.Heal()
	for _, conn := range []struct {
		c    net.Conn
		rd   *bufio.Reader
		held string
	}{{c, rd, "held\n"}, {c2, rd2, "new\n"}} {
		_ = conn.c.SetDeadline(time.Now().Add(5 * time.Second))
		if got, err := conn.rd.ReadString('\n'); err != nil || got != conn.held {
			t.Fatalf("after Heal: got %q, %v; want the held %q first", got, err, conn.held)
		}
		if got, err := roundTrip(conn.c, conn.rd, "after"); err != nil || got != "after\n" {
			t.Fatalf("after Heal: got %q, %v; want after", got, err)
		}
	}

	p.Partition(true)
	if _, err := roundTrip(c, rd, "open"); err == nil {
		t.Fatal("an open connection answered through a reset partition")
	}
	c3, rd3 := dial()
	if _, err := roundTrip(c3, rd3, "new"); err == nil {
		t.Fatal("a new connection answered through a reset partition")
	}
	p.Heal()
	c4, rd4 := dial()
	if got, err := roundTrip(c4, rd4, "healed"); err != nil || got != "healed\n" {
		t.Fatalf("new connection after Heal: got %q, %v; want healed", got, err)
	}
}
