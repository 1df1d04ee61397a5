package phases_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"sync/atomic"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

func TestRunSyncsDeploysAndRecords(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		h.start(h.pipelineYAML("prod", []string{"api", "worker"}, ""))
		id := h.submit("prod", orchestrator.Trigger{Build: "101", ImageTag: "v2", By: "test"})
		r := h.wait(id)
		if r.Status != runs.StatusSucceeded {
			t.Fatalf("status = %s (%s), want succeeded", r.Status, r.Reason)
		}
		for _, uuid := range []string{uuidAPI, uuidWorker} {
			app, _ := h.coolify.App(uuid)
			if app.DeployedImageTag != "v2" {
				t.Errorf("%s deployed tag = %q, want v2", uuid, app.DeployedImageTag)
			}
			if got := app.DeployedEnv["LOG_LEVEL"]; got != "info" {
				t.Errorf("%s deployed LOG_LEVEL = %q, want info", uuid, got)
			}
			if got := app.DeployedEnv["SENTRY_DSN"]; got != "sentry-secret-value-123" {
				t.Errorf("%s deployed SENTRY_DSN from the env source: got %q", uuid, got)
			}
			if n := len(h.coolify.Deployments(uuid)); n != 1 {
				t.Errorf("%s: %d deployments, want 1", uuid, n)
			}
		}
		// A variable the pipeline does not name keeps its value and flags.
		if v, _ := h.coolify.EnvValue(uuidAPI, "KEEP_ME", false); v != "untouched" {
			t.Errorf("KEEP_ME = %q, want untouched", v)
		}
		s := stepOf(t, r, runs.Phase1, "api")
		if s.Status != runs.StepSynced || s.Fence == 0 || s.Changes.ImageTag == nil || s.Changes.ImageTag.New != "v2" {
			t.Errorf("phase1 api step = %+v, want synced with a fence and tag v1→v2", s)
		}
		var keys []string
		for _, e := range s.Changes.Env {
			keys = append(keys, e.Key)
		}
		if want := []string{"BUILD", "LOG_LEVEL", "SENTRY_DSN"}; !slices.Equal(keys, want) {
			t.Errorf("phase1 api env keys = %v, want %v", keys, want)
		}
		d := stepOf(t, r, runs.Phase2, "api")
		if d.Status != runs.StepHealthy || d.DeploymentUUID == "" || d.Fence <= s.Fence {
			t.Errorf("phase2 api step = %+v, want healthy with a deployment and a fence above phase 1's %d", d, s.Fence)
		}
		// The step links to the deployment's page in Coolify's UI: the instance's host and the
		// path Coolify gives.
		if want := h.coolifyURL + "/project/fake/environment/production/application/" + uuidAPI + "/deployment/" + d.DeploymentUUID; d.DeploymentURL != want {
			t.Errorf("phase2 api deployment link = %q, want %q", d.DeploymentURL, want)
		}
		// Every mutating request carried the run and a fence.
		for _, req := range h.coolify.Requests() {
			if req.Method != http.MethodGet && (req.RunID != id || req.Fence == "") {
				t.Errorf("%s %s: run %q fence %q, want run %s and a fence", req.Method, req.Path, req.RunID, req.Fence, id)
			}
		}
		if len(r.HeldLocks) != 0 {
			t.Errorf("held locks after the run: %v", r.HeldLocks)
		}
		held, err := h.locker.List(context.Background(), "coolify:")
		if err != nil || len(held) != 0 {
			t.Errorf("locks after the run = %v, %v; want none", held, err)
		}
		// The event log tells the story in order, and names no secret.
		evs := h.events(id)
		if evs[0].Type != runs.EventRunQueued || evs[len(evs)-1].Type != runs.EventRunSucceeded {
			t.Errorf("events run from %s to %s, want run.queued … run.succeeded", evs[0].Type, evs[len(evs)-1].Type)
		}
		for _, e := range evs {
			if strings.Contains(e.Message, "sentry-secret") {
				t.Errorf("event %s leaks a secret: %q", e.Type, e.Message)
			}
		}
	})
}

func TestSecondRunWritesOnlyWhatDiffers(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"}))
	h.coolify.ResetRequests()
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"}))
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("status = %s (%s)", r.Status, r.Reason)
	}
	if s := stepOf(t, r, runs.Phase1, "api"); !s.Changes.Empty() {
		t.Errorf("second identical run changed %+v, want nothing", s.Changes)
	}
	for _, req := range h.coolify.Requests() {
		if req.Method == http.MethodPatch {
			t.Errorf("second identical run sent %s %s", req.Method, req.Path)
		}
	}
}

func TestOverlappingRunsOnSharedServices(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		h.start(h.pipelineYAML("a", []string{"api", "worker"}, ""), h.pipelineYAML("b", []string{"worker", "web"}, ""))
		var ids []string
		for i, p := range []string{"a", "b", "a", "b"} {
			ids = append(ids, h.submit(p, orchestrator.Trigger{Build: string(rune('1' + i)), ImageTag: "t" + string(rune('1'+i))}))
		}
		byRun := map[string]string{}
		for i, id := range ids {
			r := h.wait(id)
			if r.Status != runs.StatusSucceeded {
				t.Errorf("run %d: status %s (%s)", i, r.Status, r.Reason)
			}
			byRun[id] = "t" + string(rune('1'+i))
		}
		// No deployment ran with another run's config: each deployment's tag is the one of the
		// run that queued it.
		for _, uuid := range []string{uuidAPI, uuidWorker, uuidWeb} {
			deps := h.coolify.Deployments(uuid)
			if len(deps) == 0 {
				t.Errorf("%s was never deployed", uuid)
			}
			for _, d := range deps {
				if want := byRun[d.RunID]; d.ImageTag != want {
					t.Errorf("%s deployment %s by run %s ran tag %q, want %q", uuid, d.UUID, d.RunID, d.ImageTag, want)
				}
			}
		}
		// The last run of each service wins.
		if app, _ := h.coolify.App(uuidWorker); app.DeployedImageTag != "t4" {
			t.Errorf("worker runs %q, want t4 (the last run)", app.DeployedImageTag)
		}
	})
}

func TestPhase1FailureRestoresEverything(t *testing.T) {
	h := newHarness(t)
	// The third service does not exist in Coolify: Phase 1 fails there, after api and worker
	// were synced, and must put both back.
	h.start(h.pipelineYAML("prod", []string{"api", "worker", "broken"}, ""))
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "7", ImageTag: "v9"}))
	if r.Status != runs.StatusFailed || !strings.Contains(r.Reason, "broken") {
		t.Fatalf("status = %s (%q), want failed naming broken", r.Status, r.Reason)
	}
	for _, uuid := range []string{uuidAPI, uuidWorker} {
		app, _ := h.coolify.App(uuid)
		if app.ImageTag != "v1" {
			t.Errorf("%s tag = %q after restore, want v1", uuid, app.ImageTag)
		}
		if n := len(h.coolify.Deployments(uuid)); n != 0 {
			t.Errorf("%s deployed %d times after a phase-1 failure", uuid, n)
		}
	}
	if v, _ := h.coolify.EnvValue(uuidAPI, "LOG_LEVEL", false); v != "debug" {
		t.Errorf("api LOG_LEVEL = %q after restore, want debug", v)
	}
	if _, ok := h.coolify.EnvValue(uuidAPI, "BUILD", false); ok {
		t.Errorf("api BUILD still exists after restore; it did not exist before")
	}
	for _, name := range []string{"api", "worker"} {
		if s := stepOf(t, r, runs.Phase1, name); s.Status != runs.StepRestored {
			t.Errorf("phase1 %s step = %s, want restored", name, s.Status)
		}
	}
}

func TestPhase2HealthFailure(t *testing.T) {
	for _, policy := range []string{"rollback", "halt"} {
		t.Run(policy, func(t *testing.T) {
			h := newHarness(t)
			// api's health endpoint fails while api runs v3, the tag this run deploys.
			health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if app, _ := h.coolify.App(uuidAPI); app.DeployedImageTag == "v3" {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			}))
			t.Cleanup(health.Close)
			h.health = map[string]string{"api": health.URL}
			h.start(h.pipelineYAML("prod", []string{"api", "worker"}, "on_failure: "+policy+"\n"))
			r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "8", ImageTag: "v3"}))
			if r.Status != runs.StatusFailed {
				t.Fatalf("status = %s, want failed", r.Status)
			}
			api, _ := h.coolify.App(uuidAPI)
			worker, _ := h.coolify.App(uuidWorker)
			if n := len(h.coolify.Deployments(uuidWorker)); n != 0 {
				t.Errorf("worker deployed %d times after api failed first", n)
			}
			switch policy {
			case "rollback":
				if api.ImageTag != "v1" || worker.ImageTag != "v1" {
					t.Errorf("tags after rollback: api %q worker %q, want v1 v1", api.ImageTag, worker.ImageTag)
				}
				if n := len(h.coolify.Deployments(uuidAPI)); n != 2 {
					t.Errorf("api: %d deployments, want 2 (v3, then the redeploy of v1)", n)
				}
				if s := stepOf(t, r, runs.Phase2, "api"); s.RestoredAt.IsZero() {
					t.Errorf("api phase2 step not marked restored: %+v", s)
				}
			case "halt":
				if api.ImageTag != "v3" || worker.ImageTag != "v3" {
					t.Errorf("tags after halt: api %q worker %q, want v3 v3 (left as synced)", api.ImageTag, worker.ImageTag)
				}
				if s := stepOf(t, r, runs.Phase2, "worker"); s.Status != runs.StepSkipped {
					t.Errorf("worker phase2 step = %s, want skipped", s.Status)
				}
			}
		})
	}
}

func TestLockLostMidDeployCancelsAndCompensates(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		h := newHarnessOn(t, backend)
		h.start(h.pipelineYAML("prod", []string{"api"}, ""))
		h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Hang)
		id := h.submit("prod", orchestrator.Trigger{Build: "9", ImageTag: "v4"})
		// Once the deployment runs, take the lock away behind the holder's back.
		ctx := context.Background()
		h.waitEvent(id, runs.EventDeployStarted, "api")
		info, err := h.locker.Get(ctx, "coolify:"+uuidAPI)
		if err != nil {
			t.Fatalf("service lock not held during the deploy: %v", err)
		}
		if _, err := h.locker.ForceRelease(ctx, locks.ForceRequest{Key: info.Key, Fence: info.Fence, Reason: "test", By: "test", LockDelay: 1}); err != nil {
			t.Fatal(err)
		}
		h.coolify.SetDeployOutcome(uuidAPI, coolifytest.Succeed) // the compensation's redeploy works
		r := h.wait(id)
		if r.Status != runs.StatusFailed || !strings.HasPrefix(r.Reason, "lock lost") {
			t.Fatalf("status = %s (%q), want failed with reason lock lost", r.Status, r.Reason)
		}
		if app, _ := h.coolify.App(uuidAPI); app.ImageTag != "v1" || app.DeployedImageTag != "v1" {
			t.Errorf("api tag = %q, running %q after compensation, want v1 and v1", app.ImageTag, app.DeployedImageTag)
		}
		deps := h.coolify.Deployments(uuidAPI)
		if len(deps) != 2 || deps[0].Status != "cancelled-by-user" || deps[1].ImageTag != "v1" {
			t.Errorf("deployments after the loss = %+v, want the run's own canceled, then a redeploy of v1", deps)
		}
	})
}

func TestSubmitErrors(t *testing.T) {
	h := newHarness(t)
	h.start(h.pipelineYAML("prod", []string{"api"}, ""))
	ctx := context.Background()
	if _, _, err := h.engine.Submit(ctx, "nope", orchestrator.Trigger{}); !errors.Is(err, orchestrator.ErrUnknownPipeline) {
		t.Errorf("unknown pipeline: %v", err)
	}
	if _, _, err := h.engine.Submit(ctx, "prod", orchestrator.Trigger{Build: "1"}); !errors.Is(err, orchestrator.ErrInvalid) || !strings.Contains(err.Error(), "image_tag") {
		t.Errorf("missing image tag: %v, want ErrInvalid naming image_tag", err)
	} else if es := orchestrator.AsFieldErrors(err); len(es) != 1 || es[0].Field != "image_tag" {
		t.Errorf("missing image tag: field errors %v, want one on field image_tag (the trigger's field, as data)", es)
	}
	a, _, err := h.engine.Submit(ctx, "prod", orchestrator.Trigger{Build: "1", ImageTag: "v2", IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	b, existing, err := h.engine.Submit(ctx, "prod", orchestrator.Trigger{Build: "1", ImageTag: "v2", IdempotencyKey: "k1"})
	if err != nil || !existing || b.ID != a.ID {
		t.Errorf("same idempotency key: %v existing=%v id %s vs %s", err, existing, b.ID, a.ID)
	}
	h.wait(a.ID)
}

func TestShownOnceVariableIsWrittenAndNotRestored(t *testing.T) {
	h := newHarness(t)
	// Coolify never shows an is_shown_once value, to any token: a run writes it without
	// comparing, and a rollback cannot put the old value back (it says so; it does not refuse
	// the sync the way it refuses a value hidden for want of read:sensitive).
	h.coolify.SetEnv(uuidAPI, coolifytest.Env{Key: "API_KEY", Value: coolifytest.Str("old-key"), IsRuntime: true, IsShownOnce: coolifytest.Bool(true)})
	yaml := func(services string) string {
		return fmt.Sprintf(`name: prod
coolify: { url: %q, token: %q }
services:
  - name: api
    uuid: %s
    image_tag: "${trigger.image_tag}"
    env:
      - { key: API_KEY, value: "${trigger.params.key}", is_shown_once: true, is_buildtime: false }
%s`, h.coolifyURL, h.coolifyToken, uuidAPI, services)
	}
	h.start(yaml(""), strings.Replace(yaml("  - { name: broken, uuid: "+uuidBroken+", image_tag: v9 }\n"), "name: prod", "name: broken", 1))
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2", Params: map[string]string{"key": "new-key"}}))
	if r.Status != runs.StatusSucceeded {
		t.Fatalf("status = %s (%s), want succeeded", r.Status, r.Reason)
	}
	if v, _ := h.coolify.EnvValue(uuidAPI, "API_KEY", false); v != "new-key" {
		t.Errorf("API_KEY = %q, want new-key", v)
	}
	r = h.wait(h.submit("broken", orchestrator.Trigger{Build: "2", ImageTag: "v3", Params: map[string]string{"key": "newer-key"}}))
	if r.Status != runs.StatusFailed {
		t.Fatalf("broken run: status = %s, want failed at the broken service", r.Status)
	}
	s := stepOf(t, r, runs.Phase1, "api")
	if s.Status != runs.StepRestored || !strings.Contains(s.Error, "API_KEY") {
		t.Errorf("api phase1 step = %s (%q), want restored with a note naming API_KEY", s.Status, s.Error)
	}
	if app, _ := h.coolify.App(uuidAPI); app.ImageTag != "v2" {
		t.Errorf("api tag = %q after the restore, want v2", app.ImageTag)
	}
}

func TestSecretSourcesAreBuiltOncePerPipeline(t *testing.T) {
	h := newHarness(t)
	var built atomic.Int32
	h.secrets = func(name string, src config.SecretSource) (secrets.Source, error) {
		built.Add(1)
		return secrets.NewLiteral(map[string]string{"DB_URL": "postgres://vault-value"}), nil
	}
	h.start(fmt.Sprintf(`name: prod
coolify: { url: %q, token: %q }
secrets:
  vault: { infisical: { url: "http://127.0.0.1:1", client_id: id, client_secret: s, project_id: p, environment: prod } }
services:
  - name: api
    uuid: %s
    image_tag: "${trigger.image_tag}"
    env:
      - { key: DB_URL, secret: { source: vault, key: DB_URL } }
`, h.coolifyURL, h.coolifyToken, uuidAPI))
	for i, tag := range []string{"v2", "v3"} {
		if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: fmt.Sprint(i), ImageTag: tag})); r.Status != runs.StatusSucceeded {
			t.Fatalf("run %d: %s (%s)", i, r.Status, r.Reason)
		}
	}
	if v, _ := h.coolify.EnvValue(uuidAPI, "DB_URL", false); v != "postgres://vault-value" {
		t.Errorf("DB_URL = %q, want the vault's value", v)
	}
	// Runs share the source (and so an Infisical client's login).
	if n := built.Load(); n != 1 {
		t.Errorf("secret source built %d times for two runs, want 1", n)
	}
}

// panickySource is a secrets source with a bug: it panics while the flag is set.
type panickySource struct{ panicking *atomic.Bool }

func (p panickySource) Fetch(ctx context.Context, keys []string) (secrets.Values, error) {
	if p.panicking.Load() {
		var m map[string]string
		//lint:ignore SA5000 the runtime's own panic, as a buggy source would raise, is the point
		m["x"] = "boom" // assignment to a nil map
	}
	return secrets.NewLiteral(map[string]string{"DB_URL": "postgres://vault-value"}).Fetch(ctx, keys)
}

// A panic in a goroutine a plan or a run starts (here: the secrets lookup) fails that plan or
// run with the panic named, and the engine goes on: the next run succeeds.
func TestPanicInSecretSourceFailsOnlyThatRun(t *testing.T) {
	h := newHarness(t)
	var panicking atomic.Bool
	panicking.Store(true)
	h.secrets = func(string, config.SecretSource) (secrets.Source, error) {
		return panickySource{&panicking}, nil
	}
	h.start(fmt.Sprintf(`name: prod
coolify: { url: %q, token: %q }
secrets:
  vault: { infisical: { url: "http://127.0.0.1:1", client_id: id, client_secret: s, project_id: p, environment: prod } }
services:
  - name: api
    uuid: %s
    image_tag: "${trigger.image_tag}"
    env:
      - { key: DB_URL, secret: { source: vault, key: DB_URL } }
`, h.coolifyURL, h.coolifyToken, uuidAPI))
	if p, err := h.engine.Plan(context.Background(), "prod", orchestrator.Trigger{Build: "0", ImageTag: "v2"}); err != nil ||
		!p.WouldFail || !strings.Contains(strings.Join(p.Problems, "\n"), "panic") {
		t.Errorf("plan: got %+v, %v; want a plan whose problems name the source's panic", p, err)
	}
	r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "1", ImageTag: "v2"}))
	if r.Status != runs.StatusFailed || !strings.Contains(r.Reason+stepOf(t, r, runs.Phase1, "api").Error, "panic") {
		t.Errorf("run with a panicking source: %s (%q, step %q), want failed naming the panic",
			r.Status, r.Reason, stepOf(t, r, runs.Phase1, "api").Error)
	}
	panicking.Store(false)
	if r := h.wait(h.submit("prod", orchestrator.Trigger{Build: "2", ImageTag: "v3"})); r.Status != runs.StatusSucceeded {
		t.Errorf("next run: %s (%s), want succeeded", r.Status, r.Reason)
	}
}
