package api_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind (an SSE heartbeat, a
// stream, a lease's heartbeat).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
