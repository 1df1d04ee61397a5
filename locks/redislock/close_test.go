package redislock

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
)

// lockedBuffer is a bytes.Buffer safe for the log handler and the test to share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Closing the driver while its subscription connection is open (a daemon shutting down
// cleanly with a waiter subscribed) is not an interruption: nothing is logged as a warning.
func TestCloseLogsNoWarning(t *testing.T) {
	srv := redistest.Start(t)
	for i := range 20 {
		var log lockedBuffer
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
