package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/internal/faultproxy"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// cutOffToken is the Coolify token of the daemon the scenario cuts off: the fake records the
// token's id with every request ("2"), which tells its requests from the other daemon's
// (the takeover's) for the same run.
const cutOffToken = "2|chaos-cut-off-daemon-token"

// How a scenario cuts daemon A off from the others: stopped with SIGSTOP (a stop-the-world
// pause, a suspended VM), or its connections to Redis made silent or reset through a fault
// proxy (a network partition).
const (
	freeze        = "frozen"
	silentNetwork = "partitioned, silent"
	resetNetwork  = "partitioned, reset"
)

// Scenario (issue 44, docs/guarantees.md, "Assumptions and limits", Takeover): daemon A runs a three-service pipeline and is cut off from Redis, past its 2 s liveness TTL, in Phase 1, in Phase 2 with a
// deployment in progress, or while rolling back a failed deployment. Daemon B presumes it
// dead and takes the run over: interrupted, with a Left state per service. Then A comes back.
// From the fake Coolify's own log: not one request of A for that run after B's takeover
// (the cut-off daemon stopped the run before B could take it over, and does nothing with it
// after); what B recorded as left matches what each application carries and runs; no lease
// remains in the run's name; A logs that the run was taken over, and serves new runs again.
func TestCutOffDaemonActsOnNothingTakenOver(t *testing.T) {
	for _, tc := range []struct{ fault, at string }{
		{freeze, "phase 1"}, {freeze, "phase 2"}, {freeze, "rolling back"},
		{silentNetwork, "phase 2"}, {resetNetwork, "rolling back"},
	} {
		t.Run(tc.fault+" in "+tc.at, func(t *testing.T) { cutOffScenario(t, tc.fault, tc.at) })
	}
}

func cutOffScenario(t *testing.T, fault, at string) {
	w := newWorld(t, coolifytest.WithTiming(coolifytest.Timing{Queued: 10 * time.Millisecond, RunMin: 2 * time.Second, RunMax: 2 * time.Second}))
	w.cf.AddToken(cutOffToken, coolifytest.AbilityRead, coolifytest.AbilityWrite, coolifytest.AbilityDeploy, coolifytest.AbilityReadSensitive)
	dir := pipelineDir(t, map[string]string{"prod": w.pipelineYAML(
		[]svc{{name: "a", uuid: appA}, {name: "b", uuid: appB}, {name: "c", uuid: appC}},
		"locks: { ttl: 6s }\non_failure: rollback\n")})
	envA := w.env("chaos-cutoff-a", dir)
	envA["COOLIFY_TOKEN"] = cutOffToken
	var proxy *faultproxy.Proxy
	if fault != freeze {
		u, err := url.Parse(w.url)
		if err != nil {
			t.Fatal(err)
		}
		if proxy, err = faultproxy.Start(u.Host); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		envA["ORCH_REDIS_URL"] = "redis://" + proxy.Addr() + u.Path
	}
	a := startDaemon(t, "a", envA)
	b := startDaemon(t, "b", w.env("chaos-cutoff-b", dir))

	if at == "rolling back" {
		w.cf.SetDeployOutcome(appB, coolifytest.Fail) // b fails; the rollback redeploys its previous config
	}
	r := a.trigger("prod", orchestrator.Trigger{Build: "2", ImageTag: "v2"})
	waitFor(t, 60*time.Second, "the run to reach "+at, func() bool {
		switch at {
		case "phase 1":
			return slices.ContainsFunc(a.run(r.ID).Steps, func(s runs.Step) bool {
				return s.Phase == runs.Phase1 && s.Name == "a" && s.Status == runs.StepSynced
			})
		case "phase 2":
			return deploying(w.cf, appA, r.ID, 1)
		}
		return deploying(w.cf, appB, r.ID, 2) // the rollback's redeploy of b's previous config
	})

	cut := time.Now()
	switch fault {
	case freeze:
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	default:
		proxy.Partition(fault == resetNetwork)
	}
	var taken runs.Run
	waitFor(t, 60*time.Second, "daemon b to take the run over", func() bool {
		taken = b.run(r.ID)
		return taken.Status == runs.StatusInterrupted
	})
	t.Logf("daemon b took the run over %s after a was cut off", taken.TakenOverAt.Sub(cut).Round(time.Millisecond))
	switch fault {
	case freeze:
		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	default:
		proxy.Heal()
	}
	// A is back once it says so (the run taken over by b) and serves a new run again: by then
	// its execution of the taken-over run has stopped for good.
	waitFor(t, 60*time.Second, "daemon a to say that b took its run over", func() bool {
		return strings.Contains(a.log.String(), `"msg":"run taken over"`) && strings.Contains(a.log.String(), `"taken_over_by":"chaos-cutoff-b"`)
	})
	w.cf.SetDeployOutcome(appB, coolifytest.Succeed)
	var next struct {
		Run runs.Run `json:"run"`
	}
	waitFor(t, 60*time.Second, "daemon a to accept a run again", func() bool {
		code, body := a.do(http.MethodPost, "/v1/pipelines/prod/runs", map[string]any{"build": "3", "image_tag": "v3"},
			map[string]string{"Authorization": "Bearer " + triggerToken})
		return code == http.StatusAccepted && json.Unmarshal(body, &next) == nil
	})
	if got := a.waitEnded(next.Run.ID, 90*time.Second); got.Status != runs.StatusSucceeded {
		t.Errorf("daemon a's next run: %s (%s), want succeeded", got.Status, got.Reason)
	}

	if taken.TakenOverBy != "chaos-cutoff-b" || taken.Epoch != 2 {
		t.Errorf("the run was taken over by %q at epoch %d, want chaos-cutoff-b at 2", taken.TakenOverBy, taken.Epoch)
	}
	var late []string
	for _, q := range w.cf.Requests() {
		if q.RunID == r.ID && q.TokenID == "2" && !q.Start.Before(taken.TakenOverAt) {
			late = append(late, fmt.Sprintf("%s %s at +%s", q.Method, q.Path, q.Start.Sub(taken.TakenOverAt).Round(time.Millisecond)))
		}
	}
	if len(late) > 0 {
		t.Errorf("daemon a sent %d request(s) for run %s after b took it over: %s", len(late), r.ID, strings.Join(late, "; "))
	}
	// What b recorded matches Coolify as the run left it (the next run has changed it since:
	// read the fake's deployments and writes up to the takeover's end).
	for _, l := range taken.Left {
		checkLeft(t, w, r.ID, l)
	}
	for _, in := range w.heldLocks() {
		if strings.HasPrefix(in.Holder, orchestrator.StepHolderPrefix(r.Pipeline, r.Trigger.Build, r.ID)) {
			t.Errorf("lease %s is still held in run %s's name (%s)", in.Key, r.ID, in.Holder)
		}
	}
}

// deploying reports whether the nth deployment of app queued by run id has started and not
// ended.
func deploying(cf *coolifytest.Server, app, id string, nth int) bool {
	n := 0
	for _, d := range cf.Deployments(app) {
		if d.RunID != id {
			continue
		}
		if n++; n == nth {
			return !d.StartedAt.IsZero() && d.FinishedAt.IsZero()
		}
	}
	return false
}

// checkLeft checks one Left line of the taken-over run id against the fake's records of
// what run id did to the application: the tags its writes set, and how its deployments
// ended.
func checkLeft(t *testing.T, w *world, id string, l runs.Left) {
	t.Helper()
	tag := "v1" // the tag the application carries after run id's writes to it
	for _, q := range w.cf.Requests() {
		if q.RunID == id && q.Method == "PATCH" && strings.HasSuffix(q.Path, "/applications/"+l.UUID) && q.Status < 300 {
			if i := strings.Index(string(q.Body), `"docker_registry_image_tag":"`); i >= 0 {
				rest := string(q.Body)[i+len(`"docker_registry_image_tag":"`):]
				tag = rest[:strings.IndexByte(rest, '"')]
			}
		}
	}
	var ran []string // how run id's deployments of it ended
	for _, d := range w.cf.Deployments(l.UUID) {
		if d.RunID == id {
			ran = append(ran, d.ImageTag+":"+d.Status)
		}
	}
	var ok bool
	switch l.State {
	case runs.LeftDeployed:
		ok = tag == "v2" && len(ran) > 0 && ran[len(ran)-1] == "v2:finished"
	case runs.LeftSyncedNotDeployed, runs.LeftDeployCanceled:
		// A sync that was under way may have written part of the config, or none of it.
		ok = (tag == "v2" || strings.Contains(l.Detail, "part")) && (len(ran) == 0 || !strings.HasSuffix(ran[len(ran)-1], ":finished"))
	case runs.LeftRestored:
		ok = tag == "v1"
	case runs.LeftUntouched:
		ok = tag == "v1" && len(ran) == 0
	}
	if !ok {
		t.Errorf("b recorded %s as %s (%s), but run %s left it carrying %s after deployments %v", l.Service, l.State, l.Detail, id, tag, ran)
	}
}
