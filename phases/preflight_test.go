package phases_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// mobilePipeline is api and worker with a mobile step on fs's environment envKey, and api's
// env taking SENTRY_DSN from the env source.
func (h *harness) mobilePipeline(fs *flagsmithtest.Server, envKey string) string {
	return h.pipelineYAML("prod", []string{"api", "worker"}, fmt.Sprintf(`mobile:
  - name: version_state
    flagsmith: { url: %q, api_key: %q, environment: %s }
    feature: version_state
    set: { ios.latest_version: "${trigger.app_version}" }
    never_downgrade: true
`, fs.URL, fs.APIKey, envKey))
}

func newFlagsmith(t *testing.T) *flagsmithtest.Server {
	t.Helper()
	fs := flagsmithtest.NewServer(t)
	if _, err := fs.AddEnvironment(flagsmithtest.Environment{APIKey: "env-key"}); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetValue("env-key", "version_state", `{"ios":{"latest_version":"2.0.0"}}`); err != nil {
		t.Fatal(err)
	}
	return fs
}

// A pipeline whose Flagsmith environment key is wrong, or one of whose secrets cannot be
// read, or both, fails in its preflight, before anything is written anywhere: the reason
// lists every problem at once, and neither Coolify nor Flagsmith received a single write
// (their own logs). (Before, a wrong key was found at the mobile step, after every service
// had been synced and deployed.)
func TestPreflightFailsBeforeAnyWrite(t *testing.T) {
	for name, tc := range map[string]struct {
		envKey    string
		noSecret  bool
		wantNamed []string
	}{
		"wrong flagsmith key":  {"wrong-key", false, []string{"mobile step version_state"}},
		"secret not readable":  {"env-key", true, []string{"SENTRY_DSN"}},
		"both, listed at once": {"wrong-key", true, []string{"mobile step version_state", "SENTRY_DSN"}},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			if tc.noSecret {
				delete(h.env, "ORCH_SECRET_SENTRY_DSN")
			}
			fs := newFlagsmith(t)
			h.start(h.mobilePipeline(fs, tc.envKey))
			r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2", AppVersion: "2.1.0"}))
			if r.Status != runs.StatusFailed || !strings.HasPrefix(r.Reason, "preflight: nothing was written") || !containsAll(r.Reason, tc.wantNamed...) {
				t.Errorf("run %s (%s), want failed in preflight naming %q", r.Status, r.Reason, tc.wantNamed)
			}
			for _, q := range h.coolify.Requests() {
				if q.Method != http.MethodGet {
					t.Errorf("Coolify received %s %s", q.Method, q.Path)
				}
			}
			if n := len(fs.Writes()); n != 0 {
				t.Errorf("Flagsmith received %d writes", n)
			}
			if e := findEvent(h.events(r.ID), runs.EventPreflight); e == nil || !containsAll(e.Message, tc.wantNamed...) {
				t.Errorf("preflight event %+v, want one listing the problems", e)
			}
		})
	}
}

// plan is the same preflight plus the diff: a run that would fail is a plan that says so
// (every problem, would_fail), for a wrong Flagsmith key, an unreachable Coolify and a
// refused token; a run that would succeed is a plan without problems that shows the
// Flagsmith value now and what the step would write, with the never_downgrade verdict.
func TestPlanIsTheRunsPreflight(t *testing.T) {
	ctx := context.Background()
	tr := orchestrator.Trigger{Build: "2", ImageTag: "v2", AppVersion: "1.5.0"}
	for name, tc := range map[string]struct {
		setup func(h *harness, fs *flagsmithtest.Server) string
		want  string
	}{
		"fine": {func(h *harness, fs *flagsmithtest.Server) string { return h.mobilePipeline(fs, "env-key") }, ""},
		"wrong flagsmith key": {func(h *harness, fs *flagsmithtest.Server) string { return h.mobilePipeline(fs, "wrong-key") },
			"mobile step version_state"},
		"coolify unreachable": {func(h *harness, fs *flagsmithtest.Server) string {
			h.coolifyURL = "http://127.0.0.1:1"
			return h.mobilePipeline(fs, "env-key")
		}, "Coolify http://127.0.0.1:1"},
		"token refused": {func(h *harness, fs *flagsmithtest.Server) string {
			h.coolifyToken = "9|unknown-token"
			return h.mobilePipeline(fs, "env-key")
		}, "Coolify"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			fs := newFlagsmith(t)
			h.start(tc.setup(h, fs))
			p, err := h.engine.Plan(ctx, "prod", tr)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if p.WouldFail || len(p.Problems) > 0 {
					t.Fatalf("plan of a run that would succeed: problems %q", p.Problems)
				}
				m := p.Mobile[0]
				if m.Changes || m.Current != `{"ios":{"latest_version":"2.0.0"}}` || m.Next != m.Current || len(m.Kept) != 1 ||
					!strings.Contains(m.Kept[0], "never_downgrade") {
					t.Errorf("mobile plan %+v, want 2.0.0 kept over 1.5.0 by never_downgrade", m)
				}
				return
			}
			if !p.WouldFail || !strings.Contains(strings.Join(p.Problems, "\n"), tc.want) {
				t.Errorf("plan: would fail %v, problems %q; want one naming %q", p.WouldFail, p.Problems, tc.want)
			}
			if n := len(fs.Writes()); n != 0 {
				t.Errorf("plan wrote to Flagsmith %d times", n)
			}
		})
	}
}

// A preflight looks the pipeline's applications up in one list of the team's applications
// (GET /applications) instead of reading each: an unknown one among them is still named,
// with its uuid, and the run writes nothing; the applications after the first (which the
// ability probe reads) cost one request, not one each.
func TestPreflightListsApplicationsOnce(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api", "worker", "ghost", "web"}, ""))
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"}))
	if r.Status != runs.StatusFailed || !containsAll(r.Reason, "preflight: nothing was written", "service ghost", uuidGhost, "not found", "check its uuid") ||
		containsAll(r.Reason, "service worker") || containsAll(r.Reason, "service web") {
		t.Errorf("run = %s %q, want failed in preflight naming service ghost (only)", r.Status, r.Reason)
	}
	lists, reads := 0, 0
	for _, q := range h.coolify.Requests() {
		switch {
		case q.Method != http.MethodGet:
			t.Errorf("Coolify received %s %s", q.Method, q.Path)
		case q.Route == "GET /applications":
			lists++
		case q.Route == "GET /applications/{uuid}":
			reads++
		}
	}
	if lists != 1 || reads != 1 {
		t.Errorf("preflight listed the applications %d times and read %d of them, want one list and one read (the ability probe's)", lists, reads)
	}
}
