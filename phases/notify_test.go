package phases_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/notify"
	"github.com/deploy-orchestrator/orchestrator/notify/notifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// withNotifier gives h's engine a Notifier (closed at cleanup) and returns the pipeline
// YAML that sends every event to rcv as Slack messages, lock waits after lockWait.
func withNotifier(t *testing.T, h *harness, rcv *notifytest.Server, lockWait time.Duration) string {
	h.env["SLACK_WEBHOOK_URL"] = rcv.URL + "/services/T0/B0/slack-token"
	// No attempt timeout: a delivery on the run's path would block the run for good.
	n := notify.New(notify.Options{Recorder: h.store, PublicURL: "https://deploy.example.com",
		HTTPClient: &http.Client{},
		Policy:     &outbound.Policy{MaxRetries: 1, MinWait: time.Millisecond, MaxWait: time.Millisecond}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Close(ctx)
	})
	h.notifier = n
	return fmt.Sprintf("notify:\n  lock_wait: %s\n  targets:\n    - { name: team, kind: slack, url: \"${SLACK_WEBHOOK_URL}\" }\n", lockWait)
}

// TestNotifyHangingReceiverDoesNotDelayRun: the run's end message goes to a receiver that
// hangs; the run still ends (the receiver is hanging, nothing delivered yet), and once the
// receiver answers, the message arrives and the delivery is in the run's log.
func TestNotifyHangingReceiverDoesNotDelayRun(t *testing.T) {
	h := newHarness(t)
	rcv := notifytest.NewServer(t)
	rcv.Hang()
	h.start(h.pipelineYAML("prod", []string{"api", "worker"}, withNotifier(t, h, rcv, time.Minute)))

	id := h.submit("prod", orchestrator.Trigger{Build: "7", ImageTag: "v2", Commit: "abc123", By: "api:ci"})
	select { // the end message is being delivered, and hangs
	case <-rcv.Hanging():
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery reached the receiver")
	}
	if r := h.wait(id); r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s (%s), want succeeded", r.Status, r.Reason)
	}
	if got := len(rcv.Messages()); got != 0 {
		t.Fatalf("%d messages delivered while the receiver hangs", got)
	}
	rcv.Release()
	m := received(t, rcv)
	for _, want := range []string{"prod: build 7 succeeded", "Image v2, commit abc123, triggered by api:ci", "https://deploy.example.com/runs/" + id} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("message %q lacks %q", m.Text, want)
		}
	}
}

// TestNotifyFailedRunNamesService: a run that fails on a service is announced with the
// service and the reason.
func TestNotifyFailedRunNamesService(t *testing.T) {
	h := newHarness(t)
	rcv := notifytest.NewServer(t)
	h.start(h.pipelineYAML("prod", []string{"api", "broken"}, withNotifier(t, h, rcv, time.Minute)))
	id := h.submit("prod", orchestrator.Trigger{Build: "8", ImageTag: "v3"})
	if r := h.wait(id); r.Status != runs.StatusFailed {
		t.Fatalf("run %s (%s), want failed", r.Status, r.Reason)
	}
	m := received(t, rcv)
	if !strings.Contains(m.Text, "build 8 failed on broken after") || !strings.Contains(m.Text, "phase 1") {
		t.Errorf("message %q does not name the service and the reason", m.Text)
	}
}

// TestNotifyLockWait: a run waiting on a frozen key past the threshold is announced with
// the holder and the freeze's message, once; it goes on when the freeze is lifted.
func TestNotifyLockWait(t *testing.T) {
	h := newHarness(t)
	rcv := notifytest.NewServer(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, withNotifier(t, h, rcv, 50*time.Millisecond)))
	ctx := context.Background()
	if _, err := h.locker.Freeze(ctx, locks.FreezeRequest{Key: "coolify:phase1", Message: "db migration", By: "alice",
		Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	id := h.submit("prod", orchestrator.Trigger{Build: "9", ImageTag: "v4"})
	m := received(t, rcv)
	for _, want := range []string{"build 9 has waited", "for coolify:phase1, held by operator:alice (db migration)"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("message %q lacks %q", m.Text, want)
		}
	}
	if _, err := h.locker.Unfreeze(ctx, "coolify:phase1"); err != nil {
		t.Fatal(err)
	}
	if r := h.wait(id); r.Status != runs.StatusSucceeded {
		t.Fatalf("run %s (%s), want succeeded", r.Status, r.Reason)
	}
	m = received(t, rcv)
	if !strings.Contains(m.Text, "succeeded") {
		t.Errorf("second message %q, want the run's end (one lock-wait message only)", m.Text)
	}
}

// received returns the receiver's next message (failing after a generous bound).
func received(t *testing.T, rcv *notifytest.Server) notifytest.Message {
	t.Helper()
	select {
	case m := <-rcv.Received():
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message arrived")
		return notifytest.Message{}
	}
}
