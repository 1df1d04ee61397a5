package redislock

import (
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/internal/testutil"
)

// Closing the driver while its subscription connection is open (a daemon shutting down
// cleanly with a waiter subscribed) is not an interruption: nothing is logged as a warning.
func TestCloseLogsNoWarning(t *testing.T) {
	srv := redistest.Start(t)
	for i := range 20 {
		var log testutil.SyncBuffer
		client := redis.NewClient(&redis.Options{Addr: srv.Addr})
		d := New(client, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		s, err := d.Subscribe(t.Context(), "coolify:phase1")
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		_ = client.Close()
		if out := log.String(); out != "" {
			t.Fatalf("close %d logged:\n%s", i+1, out)
		}
	}
}
