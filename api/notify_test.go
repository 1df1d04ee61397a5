package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/notify/notifytest"
)

// TestFreezeNotifies: a freeze placed and lifted through the API reaches the daemon's
// default notify targets, and each attempt and outcome is a metric.
func TestFreezeNotifies(t *testing.T) {
	rcv := notifytest.NewServer(t)
	f := newFixture(t, func(d *config.Daemon) {
		d.Notify = &config.Notify{Targets: []config.NotifyTarget{
			{Name: "ops", Kind: config.NotifySlack, URL: config.Secret(rcv.URL + "/services/T0/B0/slack-token-value")}}}
	})
	if rec := f.do("POST", "/v1/locks/coolify:phase2/freeze", adminToken, `{"message":"release freeze","for":"1h","by":"alice"}`); rec.Code != http.StatusOK {
		t.Fatalf("freeze: %d %s", rec.Code, rec.Body)
	}
	m := nextMessage(t, rcv)
	if !strings.Contains(m.Text, "coolify:phase2 frozen by") || !strings.Contains(m.Text, "alice") || !strings.Contains(m.Text, "release freeze") {
		t.Errorf("freeze message %q", m.Text)
	}
	if rec := f.do("DELETE", "/v1/locks/coolify:phase2/freeze", adminToken, `{"reason":"shipped"}`); rec.Code != http.StatusNoContent {
		t.Fatalf("unfreeze: %d %s", rec.Code, rec.Body)
	}
	m = nextMessage(t, rcv)
	if !strings.Contains(m.Text, "freeze on coolify:phase2 lifted by") || !strings.Contains(m.Text, "shipped") {
		t.Errorf("unfreeze message %q", m.Text)
	}

	// Close waits until the sender is done with both (an outcome is counted after the answer).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.notifier.Close(ctx); err != nil {
		t.Fatal(err)
	}
	body := f.do("GET", "/metrics", readToken, nil).Body.String()
	if want := `orchestrator_notifications_total{outcome="sent",target="ops"} 2`; !strings.Contains(body, want) {
		t.Errorf("metrics lack %s", want)
	}
	if want := `orchestrator_outside_requests_total{method="POST",route="slack:ops",status="200",system="notify"} 2`; !strings.Contains(body, want) {
		t.Errorf("metrics lack %s", want)
	}
	if strings.Contains(body, "slack-token-value") {
		t.Error("the metrics hold the webhook URL's token")
	}
}

func nextMessage(t *testing.T, rcv *notifytest.Server) notifytest.Message {
	t.Helper()
	select {
	case m := <-rcv.Received():
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("no message arrived")
		return notifytest.Message{}
	}
}
