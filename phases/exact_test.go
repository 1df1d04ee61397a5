package phases_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// onePipeline is a pipeline over one application with the given env entries (YAML list items),
// and the broken service after it when failPhase1 (Phase 1 then fails after syncing the app).
func (h *harness) onePipeline(uuid, env string, failPhase1 bool, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: prod\ncoolify:\n  url: %s\n  token: %q\nservices:\n", h.coolifyURL, h.coolifyToken)
	fmt.Fprintf(&b, "  - name: app\n    uuid: %s\n    image_tag: \"${trigger.image_tag}\"\n    deploy_timeout: 5s\n    env:\n%s", uuid, env)
	if failPhase1 {
		fmt.Fprintf(&b, "  - name: broken\n    uuid: %s\n    image_tag: \"${trigger.image_tag}\"\n", uuidBroken)
	}
	b.WriteString("locks: { ttl: 30s, phase: { timeout: 20s, max_retries: 0 }, service: { timeout: 20s, max_retries: 0 } }\n")
	b.WriteString(extra)
	return b.String()
}

func envRow(t *testing.T, h *harness, uuid, key string, preview bool) coolifytest.Env {
	t.Helper()
	for _, e := range h.coolify.Envs(uuid) {
		if e.Key == key && e.IsPreview == preview {
			return e
		}
	}
	t.Fatalf("no env row %s (preview %v) on %s", key, preview, uuid)
	return coolifytest.Env{}
}

func bodiesTo(h *harness, route string) string {
	var b strings.Builder
	for _, r := range h.coolify.RequestsTo(route) {
		b.Write(r.Body)
		b.WriteByte('\n')
	}
	return b.String()
}

// Issue 10 item 4: flags and the comment an entry leaves out keep Coolify's values; an entry
// equal to what is there writes nothing; the run's changes and the plan list every flag and
// comment change.
func TestUnmentionedFlagsAndCommentAreKept(t *testing.T) {
	h := newHarness(t)
	h.coolify.SetEnv(uuidAPI, coolifytest.Env{Key: "OPS", Value: coolifytest.Str("same"), IsRuntime: true,
		IsBuildtime: false, IsLiteral: true, Comment: coolifytest.Str("set by ops")})
	h.coolify.SetEnv(uuidAPI, coolifytest.Env{Key: "OPS2", Value: coolifytest.Str("old"), IsRuntime: true,
		IsBuildtime: false, IsLiteral: true, Comment: coolifytest.Str("set by ops")})
	h.coolify.SetEnv(uuidAPI, coolifytest.Env{Key: "OPS3", Value: coolifytest.Str("v"), IsRuntime: true,
		IsBuildtime: true, IsLiteral: true, Comment: coolifytest.Str("set by ops")})
	h.start(h.onePipeline(uuidAPI, `      - { key: OPS, value: same }
      - { key: OPS2, value: new }
      - { key: OPS3, value: v, is_literal: false, comment: "by pipeline" }
      - { key: FRESH, value: x, is_buildtime: false }
`, false, ""))

	plan, err := h.engine.Plan(context.Background(), "prod", orchestrator.Trigger{ImageTag: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	var planned []string
	for _, e := range plan.Services[0].Env {
		planned = append(planned, e.String())
	}
	wantPlan := `OPS unchanged; OPS2 (value); OPS3 (is_literal true → false, comment "set by ops" → "by pipeline"); FRESH created (is_buildtime false)`
	if got := strings.Join(planned, "; "); got != wantPlan {
		t.Errorf("plan env:\n got  %s\n want %s", got, wantPlan)
	}

	r := h.wait(h.submit("prod", orchestrator.Trigger{ImageTag: "v1"}))
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("status = %s (%s), want succeeded", r.Status, r.Reason)
	}
	if body := bodiesTo(h, "PATCH /applications/{uuid}/envs/bulk"); strings.Contains(body, `"key":"OPS"`) {
		t.Errorf("OPS equals what is there but was written: %s", body)
	}
	for _, key := range []string{"OPS", "OPS2"} {
		e := envRow(t, h, uuidAPI, key, false)
		if e.Comment == nil || *e.Comment != "set by ops" || e.IsBuildtime || !e.IsLiteral || !e.IsRuntime {
			t.Errorf("%s after the run: comment %v buildtime %v literal %v runtime %v, want \"set by ops\" false true true",
				key, e.Comment, e.IsBuildtime, e.IsLiteral, e.IsRuntime)
		}
	}
	if v, _ := h.coolify.EnvValue(uuidAPI, "OPS2", false); v != "new" {
		t.Errorf("OPS2 = %q, want new", v)
	}
	e := envRow(t, h, uuidAPI, "OPS3", false)
	if e.Comment == nil || *e.Comment != "by pipeline" || e.IsLiteral || !e.IsBuildtime {
		t.Errorf("OPS3: comment %v literal %v buildtime %v, want \"by pipeline\" false true", e.Comment, e.IsLiteral, e.IsBuildtime)
	}
	f := envRow(t, h, uuidAPI, "FRESH", false)
	if f.IsBuildtime || !f.IsRuntime || f.IsLiteral {
		t.Errorf("FRESH: buildtime %v runtime %v literal %v, want false true false (Coolify's defaults for the rest)", f.IsBuildtime, f.IsRuntime, f.IsLiteral)
	}
	s := stepOf(t, r, runs.Phase1, "app")
	wantChanges := `env: FRESH created (is_buildtime false), OPS2 (value), OPS3 (is_literal true → false, comment "set by ops" → "by pipeline")`
	if got := s.Changes.String(); got != wantChanges {
		t.Errorf("step changes:\n got  %s\n want %s", got, wantChanges)
	}
}

// Issue 10 items 5 and 6: a tag that was null is restored to null, and a variable the run
// created goes with its preview twin; a preview row that was there before stays.
func TestRestorePutsBackNullTagAndDeletesTwins(t *testing.T) {
	h := newHarness(t)
	const uuid = "app-nulltag-000000000005"
	h.coolify.AddApplication(coolifytest.Application{UUID: uuid, Name: "nulltag", ImageName: "ghcr.io/acme/n"})
	h.coolify.SetEnv(uuid, coolifytest.Env{Key: "HAD_PREVIEW", Value: coolifytest.Str("p"), IsPreview: true, IsRuntime: true})
	h.start(h.onePipeline(uuid, "      - { key: NEWVAR, value: run-value }\n      - { key: HAD_PREVIEW, value: x }\n", true, ""))
	r := h.wait(h.submit("prod", orchestrator.Trigger{ImageTag: "v9"}))
	if r.Status != runs.StatusFailed {
		t.Fatalf("status = %s (%s), want failed (broken)", r.Status, r.Reason)
	}
	if a, _ := h.coolify.App(uuid); a.ImageTag != "" {
		t.Errorf("tag after restore = %q, want null again", a.ImageTag)
	}
	if body := bodiesTo(h, "PATCH /applications/{uuid}"); !strings.Contains(body, `{"docker_registry_image_tag":null}`) {
		t.Errorf("no PATCH with a null tag; bodies:\n%s", body)
	}
	for _, e := range h.coolify.Envs(uuid) {
		if e.Key == "NEWVAR" {
			t.Errorf("NEWVAR row left after restore (preview %v)", e.IsPreview)
		}
		if e.Key == "HAD_PREVIEW" && !e.IsPreview {
			t.Errorf("HAD_PREVIEW production row left after restore")
		}
	}
	if v, ok := h.coolify.EnvValue(uuid, "HAD_PREVIEW", true); !ok || v != "p" {
		t.Errorf("preview row that was there before: %q %v, want p kept", v, ok)
	}
	if s := stepOf(t, r, runs.Phase1, "app"); s.Status != runs.StepRestored || s.Error != "" {
		t.Errorf("step = %s %q, want restored with nothing left", s.Status, s.Error)
	}
}

// Issue 10 items 5 and 7: after a Phase-2 failure the rollback redeploys the previous (null)
// tag, not the failing image, and says so only then.
func TestRollbackRedeploysPreviousNullTag(t *testing.T) {
	h := newHarness(t)
	const uuid = "app-nulltag-000000000005"
	h.coolify.AddApplication(coolifytest.Application{UUID: uuid, Name: "nulltag", ImageName: "ghcr.io/acme/n"})
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if a, _ := h.coolify.App(uuid); a.DeployedImageTag == "v3" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(health.Close)
	y := h.onePipeline(uuid, "      - { key: A, value: b }\n", false, "")
	y = strings.Replace(y, "    deploy_timeout: 5s\n", fmt.Sprintf("    deploy_timeout: 5s\n    health: { http: { url: %q, timeout: 300ms } }\n", health.URL), 1)
	h.start(y)
	id := h.submit("prod", orchestrator.Trigger{ImageTag: "v3"})
	r := h.wait(id)
	if r.Status != runs.StatusFailed {
		t.Fatalf("status = %s (%s), want failed", r.Status, r.Reason)
	}
	deps := h.coolify.Deployments(uuid)
	if len(deps) != 2 || deps[1].ImageTag != "" {
		var tags []string
		for _, d := range deps {
			tags = append(tags, fmt.Sprintf("%q", d.ImageTag))
		}
		t.Fatalf("deployments ran tags %v, want \"v3\" then the previous null tag", tags)
	}
	var msg string
	for _, e := range h.events(id) {
		if e.Type == runs.EventServiceRestored {
			msg = e.Message
		}
	}
	if msg != "phase-1 snapshot restored; previous config redeployed" {
		t.Errorf("restore event = %q", msg)
	}
}

// Issue 10 item 7: a write refused before it was applied leaves nothing to restore, and no
// message says "restored" or "NOT restored".
func TestNothingWrittenNothingRestored(t *testing.T) {
	h := newHarness(t)
	h.start(h.onePipeline(uuidAPI, "      - { key: NEWVAR, value: v }\n", false, ""))
	h.coolify.FailNext(1, coolifytest.Fault{Method: "PATCH", Route: "/applications/{uuid}/envs/bulk", Status: http.StatusBadRequest, Message: "Bulk data is required."})
	id := h.submit("prod", orchestrator.Trigger{ImageTag: "v2"})
	r := h.wait(id)
	if r.Status != runs.StatusFailed {
		t.Fatalf("status = %s, want failed", r.Status)
	}
	for _, e := range h.events(id) {
		if e.Type == runs.EventServiceRestored || strings.Contains(e.Message, "restored") {
			t.Errorf("event %s %q after a write that was refused", e.Type, e.Message)
		}
	}
	if s := stepOf(t, r, runs.Phase1, "app"); strings.Contains(s.Error, "restored") {
		t.Errorf("step error %q", s.Error)
	}
	n := 0
	for _, req := range h.coolify.Requests() {
		if req.Method != http.MethodGet {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d mutating requests, want 1 (the refused bulk write)", n)
	}
}

// Issue 10 item 7: a token lacking abilities is refused before anything is written, naming
// every missing one; plan says a run would fail.
func TestTokenLackingAbilitiesWritesNothing(t *testing.T) {
	h := newHarness(t)
	h.coolifyToken = "7|read-only"
	h.coolify.AddToken(h.coolifyToken, coolifytest.AbilityRead)
	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	p, err := h.engine.Plan(context.Background(), "prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Problems) != 1 || !containsAll(p.Problems[0], "write", "deploy", "read:sensitive") || !p.WouldFail {
		t.Errorf("plan problems = %q (would fail: %v), want one naming write, deploy and read:sensitive", p.Problems, p.WouldFail)
	}
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"}))
	if r.Status != runs.StatusFailed || !containsAll(r.Reason, "write (", "deploy (", "read:sensitive (", "nothing was written") {
		t.Errorf("run = %s %q, want failed naming write, deploy and read:sensitive", r.Status, r.Reason)
	}
	for _, req := range h.coolify.Requests() {
		if req.Method != http.MethodGet {
			t.Errorf("sent %s %s with a read-only token", req.Method, req.Path)
		}
	}
}

// A pipeline whose first service names no resource on Coolify fails naming the service and its
// uuid, not the token (the ability probe reads that service first).
func TestUnknownFirstServiceIsNamed(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"ghost", "api"}, ""))
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"}))
	if r.Status != runs.StatusFailed || !containsAll(r.Reason, "service ghost", uuidGhost, "not found", "check its uuid", "nothing was written") ||
		strings.Contains(r.Reason, "abilities") {
		t.Errorf("run = %s %q, want failed naming service ghost, its uuid, and that nothing was written, not the token", r.Status, r.Reason)
	}
	for _, req := range h.coolify.Requests() {
		if req.Method != http.MethodGet {
			t.Errorf("sent %s %s", req.Method, req.Path)
		}
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
