package pacing

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// fakeBucket holds tokens the test puts in; take reports each call's keep on asked.
type fakeBucket struct {
	mu     sync.Mutex
	tokens int
	asked  chan int
}

func (b *fakeBucket) take(_ context.Context, keep int) (time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked <- keep
	if b.tokens > keep {
		b.tokens--
		return 0, nil
	}
	return time.Millisecond, nil
}

func (b *fakeBucket) hold(context.Context, time.Duration) {}

func (b *fakeBucket) put(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens += n
}

// A plan's call (PriorityLow) takes nothing while a run's call waits on the same pacer, and
// then only from a full bucket: the run's calls get the budget first.
func TestLowPriorityYieldsToWaitingCalls(t *testing.T) {
	shape := Shape{PerSecond: 1, Burst: 8, Reserve: 4}
	b := &fakeBucket{asked: make(chan int, 1024)}
	p := &Pacer{shape: shape, b: b}
	ctx := t.Context()

	order := make(chan string, 4)
	go func() {
		if p.Wait(ctx, outbound.PriorityNormal) == nil {
			order <- "normal"
		}
	}()
	// The normal call is in Wait once it asked the (empty) bucket.
	if keep := <-b.asked; keep != shape.Reserve {
		t.Fatalf("the normal call asked to keep %d, want the reserve %d", keep, shape.Reserve)
	}
	lowDone := make(chan error, 1)
	go func() {
		err := p.Wait(ctx, outbound.PriorityLow)
		order <- "low"
		lowDone <- err
	}()
	// Enough for the normal call, not for a low one (it needs a full bucket): the normal
	// call goes, and the low one may not take the rest while the normal call is in Wait.
	b.put(shape.Reserve + 1)
	if got := <-order; got != "normal" {
		t.Fatalf("first through: %s, want the normal call", got)
	}
	// Drain what the bucket was asked so far; from now on only the low call asks, and it
	// asks to keep Burst − 1.
	for len(b.asked) > 0 {
		if keep := <-b.asked; keep != shape.Reserve && keep != shape.Burst-1 {
			t.Fatalf("asked to keep %d", keep)
		}
	}
	if keep := <-b.asked; keep != shape.Burst-1 {
		t.Fatalf("the low call asked to keep %d, want Burst-1 = %d", keep, shape.Burst-1)
	}
	b.put(shape.Burst - shape.Reserve) // a full bucket
	if err := <-lowDone; err != nil {
		t.Fatal(err)
	}
	if got := <-order; got != "low" {
		t.Fatalf("second through: %s, want the low call", got)
	}
}

// A low call waiting behind a run's call asks the bucket nothing, and ends with its context.
func TestLowPriorityWaitEndsWithItsContext(t *testing.T) {
	shape := Shape{PerSecond: 1, Burst: 8, Reserve: 4}
	b := &fakeBucket{asked: make(chan int, 1<<16)}
	p := &Pacer{shape: shape, b: b}
	runCtx, stopRun := context.WithCancel(t.Context())
	runDone := make(chan struct{})
	go func() { _ = p.Wait(runCtx, outbound.PriorityNormal); close(runDone) }()
	<-b.asked // the run's call is in Wait, the bucket empty
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Wait(ctx, outbound.PriorityLow) }()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the low call got through while a run's call was in Wait")
	}
	stopRun()
	<-runDone
	for len(b.asked) > 0 {
		if keep := <-b.asked; keep != shape.Reserve {
			t.Fatalf("the bucket was asked to keep %d while a run's call was in Wait: the low call asked", keep)
		}
	}
}
