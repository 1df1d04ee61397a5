package main

import (
	"context"
	"strings"
	"testing"
)

// TestUnreachableRedisIsOneError: with Redis unreachable, `runs list` and `serve` print the
// one error (exit 3) and nothing else: go-redis's own notices (each failed dial of its pool)
// go to the command's log at debug level, where serve --log-level debug still shows them.
func TestUnreachableRedisIsOneError(t *testing.T) {
	url := "redis://" + freeAddr(t) + "/0" // nobody listens there
	env, _ := daemonEnv(t)
	env["ORCH_REDIS_URL"] = url
	for _, args := range [][]string{{"runs", "list"}, {"serve"}} {
		out, errOut, err := invoke(context.Background(), env, args...)
		if exitCode(err) != exitUnreachable || err == nil || !strings.Contains(err.Error(), "cannot reach the server") {
			t.Errorf("%v: exit %d, %v; want 3, cannot reach the server", args, exitCode(err), err)
		}
		if out != "" || errOut != "" {
			t.Errorf("%v: printed more than the error (main prints that):\nstdout: %s\nstderr: %s", args, out, errOut)
		}
	}
	_, errOut, _ := invoke(context.Background(), env, "serve", "--log-level", "debug")
	if !strings.Contains(errOut, `"level":"DEBUG","msg":"redis client: redis: connection pool: failed to dial`) {
		t.Errorf("serve --log-level debug does not show go-redis's notices:\n%s", errOut)
	}
}
