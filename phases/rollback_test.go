package phases_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A wave of api and worker deploying at once, web in the wave after, and a mobile step before
// Phase 1; api's deployment fails while worker's finishes. With on_failure: rollback the whole
// release goes back: worker (deployed fine) and api (failed) are restored and redeployed on
// v1, web (synced, never deployed) is restored, the last wave first, and the Flagsmith field
// the run set goes back, while the field a person changed since keeps the person's value;
// the run's left says what each service carries and runs. With rollback-failed, the old
// behaviour: worker keeps v4 (a mixed release, asked for by name) and Flagsmith is left as it
// is. Read from the fakes' own records.
func TestRollbackReturnsTheWholeRelease(t *testing.T) {
	for _, policy := range []string{"rollback", "rollback-failed"} {
		t.Run(policy, func(t *testing.T) {
			h := newHarness(t)
			fs := flagsmithtest.NewServer(t)
			if _, err := fs.AddEnvironment(flagsmithtest.Environment{APIKey: "env-key"}); err != nil {
				t.Fatal(err)
			}
			if err := fs.SetValue("env-key", "version_state", `{"ios":{"latest_version":"1.0.0"},"android":{"latest_version":"1.0.0"}}`); err != nil {
				t.Fatal(err)
			}
			h.coolify.SetDeployOutcomes(uuidAPI, coolifytest.Fail, coolifytest.Succeed) // v4 fails, the redeploy of v1 does not
			pipeline := fmt.Sprintf(`name: prod
coolify: { url: %s, token: %q }
phase2: { parallel: 2 }
on_failure: %s
services:
  - { name: api, uuid: %s, image_tag: "${trigger.image_tag}", deploy_timeout: 10s }
  - { name: worker, uuid: %s, image_tag: "${trigger.image_tag}", deploy_timeout: 10s }
  - { name: web, uuid: %s, image_tag: "${trigger.image_tag}", deploy_timeout: 10s, after: [api] }
mobile:
  - name: version_state
    flagsmith: { url: %q, api_key: %q, environment: env-key }
    feature: version_state
    when: before_phase1
    set: { ios.latest_version: "${trigger.app_version}", android.latest_version: "${trigger.app_version}" }
`, h.coolifyURL, h.coolifyToken, policy, uuidAPI, uuidWorker, uuidWeb, fs.URL, fs.APIKey)
			h.start(pipeline)
			// A person edits android's version while the run is in Phase 2.
			blocker := holdPhase2(t, h)
			id := h.submit("prod", orchestrator.Trigger{Build: "4", ImageTag: "v4", AppVersion: "4.0.0"})
			waitUntil(t, 30*time.Second, "the run to wait for coolify:phase2", func() bool {
				return slices.ContainsFunc(h.events(id), func(e runs.Event) bool {
					return e.Type == runs.EventLockWaiting && e.LockKey == "coolify:phase2"
				})
			})
			if err := fs.SetValue("env-key", "version_state", `{"ios":{"latest_version":"4.0.0"},"android":{"latest_version":"4.1.0"}}`); err != nil {
				t.Fatal(err)
			}
			if err := blocker.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			r := h.wait(id)
			if r.Status != runs.StatusFailed {
				t.Fatalf("run %s (%s), want failed", r.Status, r.Reason)
			}
			carries := func(uuid string) (string, string) {
				a, _ := h.coolify.App(uuid)
				return a.ImageTag, a.DeployedImageTag
			}
			want := map[string][2]string{uuidAPI: {"v1", "v1"}, uuidWorker: {"v1", "v1"}, uuidWeb: {"v1", "v1"}}
			wantLeft := map[string]string{"api": runs.LeftRestored, "worker": runs.LeftRestored, "web": runs.LeftRestored}
			wantDoc := `{"ios":{"latest_version":"1.0.0"},"android":{"latest_version":"4.1.0"}}`
			if policy == "rollback-failed" {
				want[uuidWorker] = [2]string{"v4", "v4"}
				wantLeft["worker"] = runs.LeftDeployed
				wantDoc = `{"ios":{"latest_version":"4.0.0"},"android":{"latest_version":"4.1.0"}}`
			}
			for uuid, w := range want {
				if tag, ran := carries(uuid); tag != w[0] || ran != w[1] {
					t.Errorf("%s carries %s and runs %s, want %s and %s", uuid, tag, ran, w[0], w[1])
				}
			}
			for _, l := range r.Left {
				if l.State != wantLeft[l.Service] || !strings.Contains(l.Detail, "tag") {
					t.Errorf("left %s: %s (%s), want %s with the tags", l.Service, l.State, l.Detail, wantLeft[l.Service])
				}
			}
			if len(r.Left) != 3 {
				t.Errorf("left %+v, want a line per service", r.Left)
			}
			if got, err := fs.Value("env-key", "version_state"); err != nil || got != wantDoc {
				t.Errorf("version_state after the run: %v (%v), want %s", got, err, wantDoc)
			}
			if policy == "rollback-failed" {
				return
			}
			// The last wave first: web's restore came before worker's and api's.
			var order []string
			for _, q := range h.coolify.Requests() {
				if q.RunID == id && q.Method == "PATCH" && strings.Contains(string(q.Body), `"v1"`) {
					for name, uuid := range map[string]string{"api": uuidAPI, "worker": uuidWorker, "web": uuidWeb} {
						if strings.Contains(q.Path, uuid) {
							order = append(order, name)
						}
					}
				}
			}
			if !slices.Equal(order, []string{"web", "worker", "api"}) {
				t.Errorf("restored in the order %v, want web, worker, api (the last wave first, then the reverse of the file)", order)
			}
		})
	}
}

// holdPhase2 takes coolify:phase2 as an operator would, so runs sync and wait before
// deploying.
func holdPhase2(t *testing.T, h *harness) *locks.Lease {
	t.Helper()
	l, err := h.locker.Acquire(t.Context(), locks.Request{Key: "coolify:phase2", Holder: "test#0/blocker"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}
