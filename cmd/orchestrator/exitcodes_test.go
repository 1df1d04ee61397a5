package main

import (
	"context"
	"net"
	"strings"
	"testing"
)

// TestListenProblemsAreConfiguration: a --listen that is no address names --listen (not
// ORCH_LISTEN, which is not set) for demo as for serve, and a listen address already in use
// is a configuration problem too: exit 2 for both commands, as README's exit codes say.
func TestListenProblemsAreConfiguration(t *testing.T) {
	ctx := context.Background()
	env, _ := daemonEnv(t)
	delete(env, "ORCH_LISTEN")
	for _, cmd := range []string{"demo", "serve"} {
		_, _, err := invoke(ctx, env, cmd, "--listen", "nonsense")
		if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), "--listen: listen:") || strings.Contains(err.Error(), "ORCH_LISTEN") {
			t.Errorf("%s --listen nonsense: exit %d, %v; want 2 naming --listen", cmd, exitCode(err), err)
		}
	}
	_, _, err := invoke(ctx, map[string]string{"ORCH_LISTEN": "nonsense"}, "demo")
	if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), "ORCH_LISTEN: listen:") {
		t.Errorf("demo with ORCH_LISTEN=nonsense: exit %d, %v; want 2 naming ORCH_LISTEN", exitCode(err), err)
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, cmd := range []string{"demo", "serve"} {
		_, _, err := invoke(ctx, env, cmd, "--listen", busy.Addr().String())
		if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Errorf("%s on a port in use: exit %d, %v; want 2 saying the address is in use", cmd, exitCode(err), err)
		}
	}
}
