package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/deploy-orchestrator/orchestrator/client"
)

// cmdHealth probes a daemon's /readyz once: exit 0 only on 200 (the run store and the lock
// backend answer), 3 otherwise. The container image's HEALTHCHECK runs it: distroless has no
// curl.
func cmdHealth(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("health", "[--url URL] [--timeout 5s]",
		"Exits 0 when the daemon answers ready (GET /readyz is 200: its run store and lock backend\n"+
			"are reachable), 3 otherwise. The URL defaults to ORCH_URL, else the local ORCH_LISTEN\n"+
			"address (default http://127.0.0.1:8080). Used as the container image's HEALTHCHECK.")
	base := fs.String("url", defaultHealthURL(c.getenv), "daemon URL (env ORCH_URL)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	quiet := fs.BoolP("quiet", "q", false, "print nothing when ready")
	wait := fs.Duration("wait", 0, "keep asking (every 200ms) until ready or this long has passed, e.g. 30s")
	if done, err := parse(fs, args); done {
		return err
	}
	a := newAPIClient(*base, "", c.getenv, client.WithRetries(0))
	deadline := time.Now().Add(*wait)
	for {
		actx, cancel := context.WithTimeout(ctx, *timeout)
		err := a.ready(actx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return &exitError{code: exitUnreachable, err: fmt.Errorf("not ready: %w", err)}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !*quiet {
		fmt.Fprintf(c.stdout, "ready: %s/readyz answered 200\n", a.base)
	}
	return nil
}

// defaultHealthURL is ORCH_URL, else the daemon's own listen address from ORCH_LISTEN as
// reached from the same host (0.0.0.0 and :: become loopback).
func defaultHealthURL(getenv func(string) string) string {
	if u := getenv("ORCH_URL"); u != "" {
		return u
	}
	host, port, err := net.SplitHostPort(getenv("ORCH_LISTEN"))
	if err != nil {
		return "http://127.0.0.1:8080"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
