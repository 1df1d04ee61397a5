package chaos

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

const flagsmithEnv = "chaosFlagsmithEnvKey01"

// mobileYAML is a mobile step on fs setting ios.latest_version to the trigger's app version.
func mobileYAML(fs *flagsmithtest.Server, apiKeyRef string) string {
	return fmt.Sprintf(`mobile:
  - name: version_state
    flagsmith: { url: %q, api_key: %q, environment: %q }
    feature: version_state
    set:
      ios.latest_version: "${trigger.app_version}"
    never_downgrade: true
`, fs.URL, apiKeyRef, flagsmithEnv)
}

// doc decodes a JSON document feature value.
func doc(t *testing.T, v any) map[string]map[string]string {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("feature value %v (%T) is not a JSON document string", v, v)
	}
	var out map[string]map[string]string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("feature value %q: %v", s, err)
	}
	return out
}

// Scenario 6: someone else changes the Flagsmith document between the step's read and its
// write. The step re-reads and compares just before writing, so it applies its change to the
// other writer's document: both changes survive.
func TestFlagsmithChangedBetweenReadAndWrite(t *testing.T) {
	w := newWorld(t)
	fs := flagsmithtest.NewServer(t)
	if _, err := fs.AddEnvironment(flagsmithtest.Environment{APIKey: flagsmithEnv, Name: "production", V2: true}); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetValue(flagsmithEnv, "version_state",
		`{"ios":{"latest_version":"1.0.0","min_version":"1.0.0"},"android":{"latest_version":"1.0.0","min_version":"1.0.0"}}`); err != nil {
		t.Fatal(err)
	}
	// Right after the step's first read, another writer raises android.min_version.
	err := fs.ChangeAfterRead(flagsmithEnv, "version_state", 1, func(cur any) any {
		s, _ := cur.(string)
		var m map[string]map[string]string
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return cur
		}
		m["android"]["min_version"] = "1.1.0"
		b, _ := json.Marshal(m)
		return string(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML([]svc{{name: "a", uuid: appA}},
		"locks: { ttl: 30s }\n"+mobileYAML(fs, flagsmithtest.DefaultAPIKey))})
	d := startDaemon(t, "d1", w.env("chaos-mobile-1", dir))

	r := d.trigger("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2", AppVersion: "2.0.0"})
	got := d.waitEnded(r.ID, 60*time.Second)
	if got.Status != runs.StatusSucceeded {
		t.Fatalf("run: %q (%s), want succeeded", got.Status, got.Reason)
	}
	v, err := fs.Value(flagsmithEnv, "version_state")
	if err != nil {
		t.Fatal(err)
	}
	m := doc(t, v)
	if m["ios"]["latest_version"] != "2.0.0" {
		t.Errorf("ios.latest_version = %q, want 2.0.0 (the run's change)", m["ios"]["latest_version"])
	}
	if m["android"]["min_version"] != "1.1.0" {
		t.Errorf("android.min_version = %q, want 1.1.0: the other writer's change was lost", m["android"]["min_version"])
	}
	if m["ios"]["min_version"] != "1.0.0" || m["android"]["latest_version"] != "1.0.0" {
		t.Errorf("untouched fields changed: %v", m)
	}
}
