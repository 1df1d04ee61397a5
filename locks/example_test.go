package locks_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
)

// A step takes the phase lock, then one service lock, does its work under the service
// lease's context (canceled if the lease is lost), and releases in reverse order.
func Example() {
	dir, _ := os.MkdirTemp("", "locks-example")
	defer os.RemoveAll(dir)
	d, err := sqlitelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	l := locks.New(d, locks.Options{})
	defer l.Close()
	if err := l.RegisterNamespace("coolify:"); err != nil {
		fmt.Println(err)
		return
	}

	ctx := context.Background()
	phase, err := l.Acquire(ctx, locks.Request{Key: "coolify:phase1", Holder: "prod#1234/phase1", Message: "syncing 2 services"})
	if err != nil {
		fmt.Println(err) // names the key, the holder in the way and what to do next
		return
	}
	defer phase.Release(ctx)

	svc, err := l.Acquire(ctx, locks.Request{Key: "coolify:api", Holder: "prod#1234/api", Budget: locks.Budget{Timeout: 5 * time.Second}})
	if err != nil {
		fmt.Println(err)
		return
	}
	work, cancel := svc.Context(ctx)
	defer cancel()
	_ = work // sync the service under work; record svc.Fence() with what it changed

	fmt.Println("held:", l.Held("prod#1234"))
	if err := svc.Release(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("released:", errors.Is(svc.Err(), locks.ErrReleased))
	fmt.Println("held:", l.Held("prod#1234"))

	// Output:
	// held: [coolify:api coolify:phase1]
	// released: true
	// held: [coolify:phase1]
}
