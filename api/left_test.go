package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A run taken over from a dead daemon says on its page which daemon took it over and when,
// and what state it left each service in.
func TestRunPageShowsLeftState(t *testing.T) {
	f := newFixture(t)
	r := f.trigger("prod", map[string]string{"build": "7", "image_tag": "v2"})
	if page := f.do("GET", "/runs/"+r.ID, readToken, nil).Body.String(); strings.Contains(page, `id="left"`) || strings.Contains(page, `id="taken-over"`) {
		t.Fatal("a run that left nothing and was not taken over shows a left-state or takeover section")
	}
	at := time.Date(2026, 12, 6, 3, 4, 5, 0, time.UTC)
	if _, err := f.store.Update(context.Background(), r.ID, func(run *runs.Run) error {
		run.Status, run.Reason = runs.StatusInterrupted, "daemon d1 died"
		run.Epoch, run.TakenOverBy, run.TakenOverAt = 2, "node-b", at
		run.Left = []runs.Left{
			{Service: "api", State: runs.LeftDeployCanceled, Detail: "deployment dep-1 canceled; the service carries this run's config, not deployed"},
			{Service: "worker", State: runs.LeftSyncedNotDeployed},
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rec := f.do("GET", "/runs/"+r.ID, readToken, nil)
	if rec.Code != 200 {
		t.Fatalf("run page: %d %s", rec.Code, rec.Body)
	}
	page := rec.Body.String()
	for _, want := range []string{
		`<tr data-service="api"><td data-label="Service">api</td><td data-label="State"><span class="badge">deploy_canceled</span></td><td data-label="Detail">deployment dep-1 canceled; the service carries this run&#39;s config, not deployed</td></tr>`,
		`<tr data-service="worker"><td data-label="Service">worker</td><td data-label="State"><span class="badge">synced_not_deployed</span></td>`,
		`<div id="taken-over"><dt>Taken over</dt><dd>by node-b at 03:04:05Z</dd></div>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("run page lacks %s", want)
		}
	}
}
