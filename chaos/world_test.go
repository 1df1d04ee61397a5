package chaos

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/redistest"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/redislock"
	"github.com/deploy-orchestrator/orchestrator/runs/redisstore"
)

// Application UUIDs of the suite's fake Coolify (24 lowercase alphanumerics, like Coolify's).
const (
	appA = "chaosappa0000000000000001"
	appB = "chaosappb0000000000000002"
	appC = "chaosappc0000000000000003"
)

// world is one fault scenario's outside world: a private Redis and a fake Coolify with three
// applications, each starting on tag v1 with BUILD=0.
type world struct {
	t *testing.T
	// redis is the single redis-server of newWorld (nil on the topologies of newWorldAt);
	// url is what the daemons are given as redis_url.
	redis *redistest.Server
	url   string
	cf    *coolifytest.Server
	// leftSynced are applications the scenario lets end carrying a config they do not run,
	// left out of the newest-config check.
	leftSynced map[string]leftSynced
}

// leftSynced is why an application may end carrying a config it does not run, and the run
// that must have written that config last ("" for any).
type leftSynced struct{ run, why string }

// allowLeftSynced lets app end carrying a config it does not run, when run (any run if "")
// wrote it last, for the reason given: a scenario that forbids the last run to touch it
// again (a newer fence recorded by a stand-in for another run) cannot expect that run to
// deploy or restore it, nor can a run that could not take the lock its restore needs.
func (w *world) allowLeftSynced(app, run, why string) {
	if w.leftSynced == nil {
		w.leftSynced = map[string]leftSynced{}
	}
	w.leftSynced[app] = leftSynced{run: run, why: why}
}

// chaosRateLimit is the fake Coolify's throttle and the daemons' coolify.rate_limit (requests
// per minute per token), scaled up from Coolify's 200 so scenarios stay quick. The daemons of
// a world share the budget through its Redis; a scenario fails if the throttle ever answered.
const chaosRateLimit = 6000

func newWorld(t *testing.T, opts ...coolifytest.Option) *world {
	t.Helper()
	srv := redistest.Start(t)
	w := newWorldAt(t, srv.URL(), opts...)
	w.redis = srv
	return w
}

// newWorldAt is newWorld on the Redis at url (a Sentinel or Cluster topology the test
// started).
func newWorldAt(t *testing.T, url string, opts ...coolifytest.Option) *world {
	t.Helper()
	opts = append([]coolifytest.Option{coolifytest.WithRateLimit(chaosRateLimit, time.Minute)}, opts...)
	w := &world{t: t, url: url, cf: coolifytest.NewServer(t, opts...)}
	// Registered before any daemon, so it runs after every daemon of the scenario is gone.
	t.Cleanup(func() {
		if n := w.cf.Throttled(); n > 0 {
			t.Errorf("the fake Coolify's throttle answered 429 %d times: the daemons did not share its budget", n)
		}
		h := w.cf.History()
		for app, left := range w.leftSynced {
			if left.run == "" || h.Apps[app].LastWriter == left.run {
				t.Logf("%s may end synced but not deployed: %s", app, left.why)
				delete(h.Apps, app)
			}
		}
		runChecks(t, h)
	})
	for i, uuid := range []string{appA, appB, appC} {
		name := fmt.Sprintf("svc-%c", 'a'+i)
		w.cf.AddApplication(coolifytest.Application{UUID: uuid, Name: name, ImageName: "ghcr.io/chaos/" + name, ImageTag: "v1"})
		w.cf.SetEnv(uuid, coolifytest.Env{Key: "BUILD", Value: coolifytest.Str("0"), IsRuntime: true, IsBuildtime: true})
	}
	return w
}

// env is a daemon environment on the world's Redis with pipelines from dir.
func (w *world) env(instance, dir string) map[string]string {
	return map[string]string{
		"ORCH_REDIS_URL": w.url, "ORCH_INSTANCE": instance, "ORCH_PIPELINES_DIR": dir,
		"ORCH_LIVENESS_TTL": "2s", "ORCH_COOLIFY_RATE_LIMIT": strconv.Itoa(chaosRateLimit),
		"ORCH_STATE_DIR": w.t.TempDir(), "COOLIFY_TOKEN": w.cf.Token,
	}
}

// svc describes one service of a pipeline written by pipelineYAML.
type svc struct {
	name, uuid    string
	deployTimeout string // default 60s
	after         string // a service of the same pipeline it deploys after (its wave), if any
}

// pipelineYAML is a pipeline on the world's Coolify: each service gets the trigger's image tag
// and BUILD=<trigger build>; extra is appended verbatim (locks, on_failure, mobile, ...).
func (w *world) pipelineYAML(services []svc, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "coolify: { url: %q, token: \"${COOLIFY_TOKEN}\" }\nservices:\n", w.cf.URL)
	for _, s := range services {
		dt := s.deployTimeout
		if dt == "" {
			dt = "60s"
		}
		fmt.Fprintf(&b, "  - name: %s\n    uuid: %s\n    image_tag: \"${trigger.image_tag}\"\n    deploy_timeout: %s\n", s.name, s.uuid, dt)
		if s.after != "" {
			fmt.Fprintf(&b, "    after: [%s]\n", s.after)
		}
		fmt.Fprintf(&b, "    env:\n      - key: BUILD\n        value: \"${trigger.build}\"\n")
	}
	b.WriteString(extra)
	return b.String()
}

// store opens the run store on the world's Redis, as a daemon sees it.
func (w *world) store() *redisstore.Store {
	w.t.Helper()
	client, err := redislock.NewClient(w.url)
	if err != nil {
		w.t.Fatal(err)
	}
	st := redisstore.New(client, redisstore.Options{})
	w.t.Cleanup(func() { st.Close(); client.Close() })
	return st
}

// locker opens a lock service on the world's Redis, as a daemon does.
func (w *world) locker() *locks.Locker {
	w.t.Helper()
	client, err := redislock.NewClient(w.url)
	if err != nil {
		w.t.Fatal(err)
	}
	l := locks.New(redislock.New(client, redislock.Options{}), locks.Options{})
	w.t.Cleanup(func() { l.Close(); client.Close() })
	return l
}

// heldLocks lists the leases runs hold in Redis right now, read straight from the backend
// (not through a daemon, so a dead or stopped daemon cannot hide them). The daemons' own
// liveness and takeover leases (daemon:) are not counted.
func (w *world) heldLocks() []locks.Info {
	w.t.Helper()
	infos, err := w.locker().List(context.Background(), "")
	if err != nil {
		w.t.Fatalf("list locks in Redis: %v", err)
	}
	return slices.DeleteFunc(infos, func(in locks.Info) bool { return strings.HasPrefix(in.Key, "daemon:") })
}

// requestsOf returns the fake's requests made for run id.
func requestsOf(cf *coolifytest.Server, id string) []coolifytest.Request {
	var out []coolifytest.Request
	for _, r := range cf.Requests() {
		if r.RunID == id {
			out = append(out, r)
		}
	}
	return out
}

// startedDeployment reports whether the fake has a started deployment of app queued by run id.
func startedDeployment(cf *coolifytest.Server, app, id string) (coolifytest.Deployment, bool) {
	for _, d := range cf.Deployments(app) {
		if d.RunID == id && !d.StartedAt.IsZero() {
			return d, true
		}
	}
	return coolifytest.Deployment{}, false
}
