package mobile_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
	"github.com/deploy-orchestrator/orchestrator/mobile"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
)

// The mobile step after a release: raise iOS's latest_version, never lowering it.
func ExampleStep_Run() {
	// A fake Flagsmith with a v2-versioned environment (the demo wires the same fake).
	fake := flagsmithtest.New(flagsmithtest.WithAPIKey("org-key"))
	_, _ = fake.AddEnvironment(flagsmithtest.Environment{APIKey: "env-prod", V2: true})
	_ = fake.SetValue("env-prod", "version_state", `{"ios":{"min_version":"2.0.0","latest_version":"2.3.0"}}`)
	srv := httptest.NewServer(fake)
	defer srv.Close()

	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	driver, err := sqlitelock.Open(filepath.Join(dir, "locks.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	locker := locks.New(driver, locks.Options{})
	defer locker.Close()
	_ = locker.RegisterNamespace("coolify:")
	_ = locker.RegisterNamespace(orchestrator.NamespaceMobile)

	// The caller holds the feature's lease and runs the step under its context and fence.
	lease, err := locker.Acquire(context.Background(), locks.Request{
		Key: orchestrator.MobileLockKey("version_state"), Holder: "prod#1234/mobile"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(context.Background())
	lctx, cancel := lease.Context(context.Background())
	defer cancel()

	step := mobile.NewStep(mobile.New(srv.URL, "org-key"))
	res, err := step.Run(lctx, mobile.Request{
		Environment: "env-prod",
		Feature:     "version_state",
		RunID:       "run-1234",
		Fence:       lease.Fence(),
		Changes: []mobile.Change{
			{Path: "ios.latest_version", Value: "2.4.0", NeverDowngrade: true},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("lock:", res.LockKey, "v2:", res.V2, "changed:", res.Changed, "attempts:", res.Attempts)
	fmt.Println("old:", res.Old.Str)
	fmt.Println("new:", res.New.Str)
	// Output:
	// lock: mobile:flagsmith:version_state v2: true changed: true attempts: 1
	// old: {"ios":{"min_version":"2.0.0","latest_version":"2.3.0"}}
	// new: {"ios":{"min_version":"2.0.0","latest_version":"2.4.0"}}
}

// BenchmarkStepRun measures one read-modify-write (the lease is the engine's) against the in-process fake (no
// latency, no spec validation): the orchestrator's own overhead per mobile update.
func BenchmarkStepRun(b *testing.B) {
	for _, v2 := range []bool{false, true} {
		b.Run(fmt.Sprintf("v2=%v", v2), func(b *testing.B) {
			srv := flagsmithtest.NewServer(b)
			_, err := srv.AddEnvironment(flagsmithtest.Environment{APIKey: "env", V2: v2})
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.SetValue("env", "version_state", versionDoc); err != nil {
				b.Fatal(err)
			}
			step := mobile.NewStep(mobile.New(srv.URL, srv.APIKey))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				_, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state",
					Changes: []mobile.Change{latest("ios", fmt.Sprintf("3.0.%d", i))}})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(srv.Requests()))/float64(b.N), "requests/op")
		})
	}
}
