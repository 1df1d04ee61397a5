package mobile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
	"github.com/deploy-orchestrator/orchestrator/mobile"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
)

func newLocker(t *testing.T) *locks.Locker {
	t.Helper()
	d, err := sqlitelock.Open(filepath.Join(t.TempDir(), "locks.db"))
	check(t, err)
	l := locks.New(d, locks.Options{})
	t.Cleanup(func() { l.Close() })
	check(t, l.RegisterNamespace("coolify:"))
	check(t, l.RegisterNamespace(orchestrator.NamespaceMobile))
	return l
}

// runLocked runs the step the way the engine does: under a lease on the feature's key, with
// the lease's context and fence.
func runLocked(l *locks.Locker, step *mobile.Step, holder string, r mobile.Request) error {
	ctx := context.Background()
	lease, err := l.Acquire(ctx, locks.Request{Key: orchestrator.MobileLockKey(r.Feature), Holder: holder,
		Budget: locks.Budget{Timeout: 20 * time.Second, MaxRetries: 1}})
	if err != nil {
		return err
	}
	lctx, cancel := lease.Context(ctx)
	r.Fence = lease.Fence()
	_, err = step.Run(lctx, r)
	cancel()
	if rerr := lease.Release(ctx); rerr != nil && !errors.Is(err, locks.ErrLost) {
		err = errors.Join(err, rerr)
	}
	return err
}

// doc decodes a stored version_state document.
func doc(t *testing.T, v any) map[string]map[string]string {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("stored value is a %T, want a string holding the document", v)
	}
	var m map[string]map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("stored value %q: %v", s, err)
	}
	return m
}

func latest(platform, v string) mobile.Change {
	return mobile.Change{Path: platform + ".latest_version", Value: v}
}

func forBoth(t *testing.T, f func(t *testing.T, v2 bool)) {
	t.Run("v1", func(t *testing.T) { f(t, false) })
	t.Run("v2", func(t *testing.T) { f(t, true) })
}

func TestStepWritesThroughTheEnvironmentsPath(t *testing.T) {
	forBoth(t, func(t *testing.T, v2 bool) {
		srv := newFake(t)
		addEnv(t, srv, "env", v2)
		check(t, srv.SetValue("env", "version_state", versionDoc))
		before, err := srv.Versions("env", "version_state")
		check(t, err)
		step := mobile.NewStep(newClient(srv))

		res, err := step.Run(context.Background(), mobile.Request{
			Environment: "env", Feature: "version_state", RunID: "run-1", Fence: 42,
			Changes: []mobile.Change{latest("ios", "2.4.0"), {Path: "ios.min_version", Value: "2.1.0"}},
		})
		check(t, err)
		want := `{"ios":{"min_version":"2.1.0","latest_version":"2.4.0"},"android":{"min_version":"2.0.0","latest_version":"2.3.1"}}`
		if !res.Changed || res.Attempts != 1 || res.V2 != v2 || res.Old != mobile.StringValue(versionDoc) || res.New != mobile.StringValue(want) {
			t.Fatalf("got %+v", res)
		}
		info, err := srv.State("env", "version_state")
		check(t, err)
		// Keys keep their order and the document stays a string value.
		if info.Type != "unicode" || info.Value != want {
			t.Fatalf("stored %s %v, want unicode %s", info.Type, info.Value, want)
		}
		writes := srv.Writes()
		if len(writes) != 1 {
			t.Fatalf("got %d writes, want 1", len(writes))
		}
		wantMethod, wantPath := "PUT", "/featurestates/"
		if v2 {
			wantMethod, wantPath = "POST", "/versions/"
		}
		if w := writes[0]; w.Method != wantMethod || !strings.Contains(w.Path, wantPath) {
			t.Fatalf("wrote with %s %s, want %s …%s", w.Method, w.Path, wantMethod, wantPath)
		}
		after, err := srv.Versions("env", "version_state")
		check(t, err)
		if v2 && (len(after) != len(before)+1 || after[len(after)-1].UUID != res.Version || !after[len(after)-1].Live) {
			t.Fatalf("versions %+v, want one more, live, %s", after, res.Version)
		}
		for _, r := range srv.Requests() {
			if r.Run != "run-1" || r.Fence != "42" || res.Fence != 42 {
				t.Fatalf("%s %s carried run %q fence %q (result %d), want run-1 and 42", r.Method, r.Path, r.Run, r.Fence, res.Fence)
			}
		}
	})
}

func TestStepNoOpWritesNothing(t *testing.T) {
	forBoth(t, func(t *testing.T, v2 bool) {
		srv := newFake(t)
		addEnv(t, srv, "env", v2)
		// Same content, other formatting: still a no-op.
		check(t, srv.SetValue("env", "version_state", "{\n  \"ios\": {\"latest_version\": \"2.3.0\"}\n}"))
		step := mobile.NewStep(newClient(srv))
		res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.3.0")}})
		check(t, err)
		if res.Changed || res.Old != res.New {
			t.Fatalf("got %+v, want no change", res)
		}
		if n := len(srv.Writes()); n != 0 {
			t.Fatalf("got %d writes, want none", n)
		}
	})
}

func TestStepNeverDowngradesAVersion(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	check(t, srv.SetValue("env", "version_state", `{"ios":{"min_version":"2.9.0","latest_version":"2.10.0"}}`))
	step := mobile.NewStep(newClient(srv))
	run := func(changes ...mobile.Change) mobile.Result {
		t.Helper()
		res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: changes})
		check(t, err)
		return res
	}
	// "2.9.9" < "2.10.0" as versions, though not as strings.
	res := run(mobile.Change{Path: "ios.latest_version", Value: "2.9.9", NeverDowngrade: true})
	if res.Changed || len(res.Skipped) != 1 || res.Skipped[0].Current != "2.10.0" || res.Skipped[0].Wanted != "2.9.9" {
		t.Fatalf("got %+v, want the downgrade skipped and nothing written", res)
	}
	if n := len(srv.Writes()); n != 0 {
		t.Fatalf("got %d writes, want none", n)
	}
	// An upgrade next to a skipped downgrade is written.
	res = run(mobile.Change{Path: "ios.latest_version", Value: "2.9.9", NeverDowngrade: true},
		mobile.Change{Path: "ios.min_version", Value: "2.10.0", NeverDowngrade: true})
	if !res.Changed || len(res.Skipped) != 1 {
		t.Fatalf("got %+v", res)
	}
	v, err := srv.Value("env", "version_state")
	check(t, err)
	if d := doc(t, v); d["ios"]["latest_version"] != "2.10.0" || d["ios"]["min_version"] != "2.10.0" {
		t.Fatalf("stored %v", d)
	}
	// Without the rule a lower version is written.
	res = run(latest("ios", "2.9.9"))
	if !res.Changed {
		t.Fatalf("got %+v, want the change written", res)
	}
	// A value that is not a version fails the step instead of guessing.
	_, err = step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state",
		Changes: []mobile.Change{{Path: "ios.latest_version", Value: "latest", NeverDowngrade: true}}})
	if !errors.Is(err, mobile.ErrChange) {
		t.Fatalf("got %v, want ErrChange", err)
	}
}

func TestStepKeepsTheTypeOfAWholeValue(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "min_build", int64(100)))
	step := mobile.NewStep(newClient(srv))
	req := mobile.Request{Environment: "env", Feature: "min_build"}

	req.Changes = []mobile.Change{{Value: 101}}
	res, err := step.Run(context.Background(), req)
	check(t, err)
	if res.New != mobile.IntValue(101) {
		t.Fatalf("got %v, want integer 101", res.New)
	}
	if info, _ := srv.State("env", "min_build"); info.Type != "int" || info.Value != int64(101) {
		t.Fatalf("stored %s %v, want int 101", info.Type, info.Value)
	}
	req.Changes = []mobile.Change{{Value: "102"}}
	if _, err := step.Run(context.Background(), req); !errors.Is(err, mobile.ErrChange) {
		t.Fatalf("string for an integer feature: got %v, want ErrChange", err)
	}
	req.Changes = []mobile.Change{latest("ios", "1.0.0")}
	if _, err := step.Run(context.Background(), req); !errors.Is(err, mobile.ErrChange) {
		t.Fatalf("field change on an integer feature: got %v, want ErrChange", err)
	}
}

func TestStepStartsOverWhenTheValueMovesBeforeTheWrite(t *testing.T) {
	forBoth(t, func(t *testing.T, v2 bool) {
		srv := newFake(t)
		addEnv(t, srv, "env", v2)
		check(t, srv.SetValue("env", "version_state", versionDoc))
		// Another writer bumps android right after the step's first read.
		check(t, srv.ChangeAfterRead("env", "version_state", 1, func(cur any) any {
			return strings.Replace(cur.(string), `"latest_version":"2.3.1"`, `"latest_version":"2.3.2"`, 1)
		}))
		var logs bytes.Buffer
		step := mobile.NewStep(newClient(srv), mobile.WithStepLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
		check(t, err)
		if res.Attempts != 2 || !res.Changed {
			t.Fatalf("got %+v, want 2 attempts and a write", res)
		}
		v, err := srv.Value("env", "version_state")
		check(t, err)
		if d := doc(t, v); d["ios"]["latest_version"] != "2.4.0" || d["android"]["latest_version"] != "2.3.2" {
			t.Fatalf("stored %v, want both the step's and the other writer's change", d)
		}
		if !strings.Contains(logs.String(), "starting over") {
			t.Fatalf("the restart was not logged: %s", logs.String())
		}
	})
}

func TestStepGivesUpWhenTheValueKeepsMoving(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	check(t, srv.SetValue("env", "version_state", `{"n":"0"}`))
	n := 0
	check(t, srv.ChangeAfterRead("env", "version_state", 1000, func(any) any { n++; return fmt.Sprintf(`{"n":"%d"}`, n) }))
	step := mobile.NewStep(newClient(srv), mobile.WithMaxAttempts(3))
	res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	if !errors.Is(err, mobile.ErrConflict) || res.Attempts != 3 {
		t.Fatalf("got %v after %d attempts, want ErrConflict after 3", err, res.Attempts)
	}
	if w := len(srv.Writes()); w != 0 {
		t.Fatalf("got %d writes, want none", w)
	}
}

// TestStepPreventsLostUpdates races several steps on one feature through one Locker, each
// changing another field: every change must be in the final document, and the Flagsmith
// calls of different leases must never interleave.
func TestStepPreventsLostUpdates(t *testing.T) {
	forBoth(t, func(t *testing.T, v2 bool) {
		srv := newFake(t, flagsmithtest.WithLatency(2*time.Millisecond))
		addEnv(t, srv, "env", v2)
		check(t, srv.SetValue("env", "version_state", `{}`))
		step := mobile.NewStep(newClient(srv))
		l := newLocker(t)
		const runs = 6
		var wg sync.WaitGroup
		errs := make([]error, runs)
		for i := range runs {
			wg.Go(func() {
				errs[i] = runLocked(l, step, fmt.Sprintf("prod#%d/mobile", i), mobile.Request{Environment: "env", Feature: "version_state",
					Changes: []mobile.Change{latest(fmt.Sprintf("p%d", i), fmt.Sprintf("1.%d.0", i))}})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
		}
		v, err := srv.Value("env", "version_state")
		check(t, err)
		d := doc(t, v)
		for i := range runs {
			if got, want := d[fmt.Sprintf("p%d", i)]["latest_version"], fmt.Sprintf("1.%d.0", i); got != want {
				t.Errorf("p%d: got %q, want %q (lost update) in %v", i, got, want, d)
			}
		}
		// Mutual exclusion as Flagsmith saw it: once a fence's calls end, it never reappears.
		done := map[string]bool{}
		last := ""
		for _, r := range srv.Requests() {
			if r.Fence != last {
				if done[r.Fence] {
					t.Fatalf("calls of fence %s resumed after fence %s: leases interleaved", r.Fence, last)
				}
				done[last] = true
				last = r.Fence
			}
		}
		if len(done) != runs {
			t.Fatalf("saw %d fences, want %d", len(done), runs)
		}
	})
}

func TestStepStopsWhenTheLeaseIsLost(t *testing.T) {
	arrived := make(chan struct{}, 1)
	notify := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case arrived <- struct{}{}:
			default:
			}
			next.ServeHTTP(w, r)
		})
	}
	// Every answer takes an hour: the step is stuck in its first call when the lease goes.
	srv := flagsmithtest.NewServer(t, flagsmithtest.WithMiddleware(notify), flagsmithtest.WithLatency(time.Hour))
	addEnv(t, srv, "env", false)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	l := newLocker(t)
	step := mobile.NewStep(newClient(srv))
	errc := make(chan error, 1)
	go func() {
		errc <- runLocked(l, step, "prod#1/mobile", mobile.Request{Environment: "env", Feature: "version_state",
			Changes: []mobile.Change{latest("ios", "2.4.0")}})
	}()
	<-arrived
	info, err := l.Get(context.Background(), orchestrator.MobileLockKey("version_state"))
	check(t, err)
	_, err = l.ForceRelease(context.Background(), locks.ForceRequest{Key: info.Key, Fence: info.Fence,
		Reason: "test: the holder is presumed dead", By: "test", LockDelay: time.Millisecond})
	check(t, err)
	err = <-errc
	if !errors.Is(err, locks.ErrLost) || strings.Count(err.Error(), "lease lost") != 1 {
		t.Fatalf("got %v, want ErrLost reported once", err)
	}
	if n := len(srv.Writes()); n != 0 {
		t.Fatalf("got %d writes after the loss, want none", n)
	}
}

func TestStepRefusesEnvironmentsWithChangeRequests(t *testing.T) {
	srv := newFake(t)
	one := 1
	_, err := srv.AddEnvironment(flagsmithtest.Environment{APIKey: "env", MinimumChangeRequestApprovals: &one})
	check(t, err)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	step := mobile.NewStep(newClient(srv))
	_, err = step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	if !errors.Is(err, mobile.ErrChangeRequests) {
		t.Fatalf("got %v, want ErrChangeRequests", err)
	}
	if n := len(srv.Writes()); n != 0 {
		t.Fatalf("got %d writes, want none", n)
	}
}

func TestStepNeverLogsTheAPIKey(t *testing.T) {
	const key = "org-key.s3cr3t-VALUE-that-must-not-leak"
	srv := newFake(t, flagsmithtest.WithAPIKey(key))
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	check(t, srv.ChangeAfterRead("env", "version_state", 1, func(cur any) any { return cur.(string) + " " }))
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client := mobile.New(srv.URL, key, mobile.WithLogger(logger), mobile.WithRetry(mobile.RetryPolicy{MaxRetries: 2, MinWait: time.Millisecond, MaxWait: time.Millisecond, MaxRetryAfter: mobile.DefaultRetryPolicy.MaxRetryAfter}))
	step := mobile.NewStep(client, mobile.WithStepLogger(logger))

	srv.FailNext(1, http.StatusBadGateway)
	res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	check(t, err)
	_, err = step.Run(context.Background(), mobile.Request{Environment: "missing", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	if err == nil {
		t.Fatal("an unknown environment did not fail")
	}
	// The run logged a retry, a restart and its end: there is something to search.
	for _, msg := range []string{"outside request retried", "starting over", "mobile step done"} {
		if !strings.Contains(logs.String(), msg) {
			t.Fatalf("log lacks %q: %s", msg, logs.String())
		}
	}
	out, _ := json.Marshal(res)
	for what, s := range map[string]string{"logs": logs.String(), "error": err.Error(), "result": string(out)} {
		if strings.Contains(s, "s3cr3t") {
			t.Errorf("%s contain the API key: %s", what, s)
		}
	}
}

// Enabling v2 versioning runs in the background on Flagsmith: an environment read as v1 can
// refuse the legacy write a moment later. The step then reads again and publishes a version.
func TestStepFollowsAnEnvironmentSwitchedToV2(t *testing.T) {
	var fake *flagsmithtest.Fake
	var once sync.Once
	switchOnFirstStateRead := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r)
			if strings.HasSuffix(r.URL.Path, "/featurestates/") {
				once.Do(func() { check(t, fake.EnableV2("env")) })
			}
		})
	}
	srv := newFake(t, flagsmithtest.WithMiddleware(switchOnFirstStateRead))
	fake = srv.Fake
	addEnv(t, srv, "env", false)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	step := mobile.NewStep(newClient(srv))
	res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	check(t, err)
	if !res.V2 || res.Version == "" || res.Attempts != 2 {
		t.Fatalf("got %+v, want a v2 write on the second attempt", res)
	}
	var methods []string
	for _, w := range srv.Writes() {
		methods = append(methods, fmt.Sprintf("%s %d", w.Method, w.Status))
	}
	if fmt.Sprint(methods) != "[PUT 400 POST 201]" {
		t.Fatalf("writes %v, want the refused PUT then the version", methods)
	}
	v, err := srv.Value("env", "version_state")
	check(t, err)
	if d := doc(t, v); d["ios"]["latest_version"] != "2.4.0" {
		t.Fatalf("stored %v", d)
	}
}

// outsideSet is an outside writer setting platform.field to v in the document.
func outsideSet(platform, field, v string) func(cur any) any {
	return func(cur any) any {
		var m map[string]map[string]string
		if err := json.Unmarshal([]byte(cur.(string)), &m); err != nil {
			panic(err)
		}
		m[platform][field] = v
		b, _ := json.Marshal(m)
		return string(b)
	}
}

// bumpAndroid is an outside writer raising android.latest_version to v in the document.
func bumpAndroid(v string) func(cur any) any { return outsideSet("android", "latest_version", v) }

// An outside version published between the step's last re-read and its POST is cloned by
// the step's version, whose value then replaces the outside one: no read can see it coming.
// The step learns it from its version's previous_version_uuid, reads the outside version's
// value, applies its changes on top and publishes again: both changes survive.
func TestStepRedoesItsWriteOnAnOutsideVersionPublishedBeforeIt(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	check(t, srv.ChangeBeforeWrite("env", "version_state", 1, bumpAndroid("2.3.2")))
	var logs bytes.Buffer
	step := mobile.NewStep(newClient(srv), mobile.WithStepLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	check(t, err)
	v, err := srv.Value("env", "version_state")
	check(t, err)
	if d := doc(t, v); d["ios"]["latest_version"] != "2.4.0" || d["android"]["latest_version"] != "2.3.2" {
		t.Fatalf("stored %v, want both the step's and the outside version's change", d)
	}
	if !res.Changed || res.Attempts != 2 || res.New != mobile.StringValue(v.(string)) {
		t.Fatalf("got %+v, want a write redone on the second attempt", res)
	}
	info, err := srv.State("env", "version_state")
	check(t, err)
	if info.Version != res.Version {
		t.Fatalf("live version %s, result says %s", info.Version, res.Version)
	}
	if !strings.Contains(logs.String(), "outside version") || strings.Contains(logs.String(), "2.3.2") {
		t.Fatalf("the redo was not logged, or a value was: %s", logs.String())
	}
}

// Two outside versions published one after the other before the step's POST: the step's
// version replaced the newer, which holds the older's change too; writing again on top of
// it keeps all three changes.
func TestStepRedoKeepsAChainOfOutsideVersions(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	check(t, srv.ChangeBeforeWrite("env", "version_state", 1, bumpAndroid("2.3.2")))
	check(t, srv.ChangeBeforeWrite("env", "version_state", 1, outsideSet("ios", "min_version", "2.1.0")))
	step := mobile.NewStep(newClient(srv))
	res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	check(t, err)
	v, err := srv.Value("env", "version_state")
	check(t, err)
	if d := doc(t, v); d["ios"]["latest_version"] != "2.4.0" || d["android"]["latest_version"] != "2.3.2" || d["ios"]["min_version"] != "2.1.0" {
		t.Fatalf("stored %v, want the step's and both outside changes", d)
	}
	if res.Attempts != 2 {
		t.Fatalf("got %+v, want the write redone once", res)
	}
}

// When the outside version's change is wholly overridden by the step's changes, the value
// written already is the right one: nothing is written again.
func TestStepRedoIsSkippedWhenTheChangesOverrideTheOutsideOne(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	check(t, srv.ChangeBeforeWrite("env", "version_state", 1, func(cur any) any {
		return strings.Replace(cur.(string), `"latest_version":"2.3.0"`, `"latest_version":"2.3.9"`, 1)
	}))
	step := mobile.NewStep(newClient(srv))
	res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	check(t, err)
	want := strings.Replace(versionDoc, `"latest_version":"2.3.0"`, `"latest_version":"2.4.0"`, 1)
	if v, _ := srv.Value("env", "version_state"); v != want {
		t.Fatalf("stored %v, want %s", v, want)
	}
	if n := len(srv.Writes()); n != 1 || res.Attempts != 2 || res.New != mobile.StringValue(want) {
		t.Fatalf("%d writes, result %+v; want one write, 2 attempts", n, res)
	}
}

// The redo counts as an attempt: with none left the step fails, saying its value is
// written and the outside change is not.
func TestStepRedoNeedsAnAttemptLeft(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	check(t, srv.ChangeBeforeWrite("env", "version_state", 1, bumpAndroid("2.3.2")))
	step := mobile.NewStep(newClient(srv), mobile.WithMaxAttempts(1))
	res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	if !errors.Is(err, mobile.ErrOutsideChangeLost) || !errors.Is(err, mobile.ErrConflict) || !res.Changed || res.Version == "" {
		t.Fatalf("got %v, %+v; want ErrOutsideChangeLost and ErrConflict, the step's version written", err, res)
	}
	vs, _ := srv.Versions("env", "version_state")
	if outside := vs[len(vs)-2].UUID; !strings.Contains(err.Error(), outside) || !strings.Contains(err.Error(), res.Version) {
		t.Fatalf("the error %q names neither outside version %s nor the step's %s", err, outside, res.Version)
	}
}

// A version published on top of the step's own, before the step could write again, was
// built on a value that lacks the outside change: the step does not guess, it fails.
func TestStepRedoStopsWhenTheFeatureMovesAgain(t *testing.T) {
	var fake *flagsmithtest.Fake
	publishAfterOurs := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r)
			if r.Method == http.MethodPost {
				v, _ := fake.Value("env", "version_state")
				check(t, fake.SetValue("env", "version_state", outsideSet("ios", "min_version", "2.1.0")(v)))
			}
		})
	}
	srv := newFake(t, flagsmithtest.WithMiddleware(publishAfterOurs))
	fake = srv.Fake
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	check(t, srv.ChangeBeforeWrite("env", "version_state", 1, bumpAndroid("2.3.2")))
	step := mobile.NewStep(newClient(srv))
	res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	if !errors.Is(err, mobile.ErrOutsideChangeLost) || !strings.Contains(err.Error(), "published on top") || !res.Changed {
		t.Fatalf("got %v, %+v; want ErrOutsideChangeLost (moved again)", err, res)
	}
	if n := len(srv.Writes()); n != 1 {
		t.Fatalf("got %d writes, want the first one only", n)
	}
}

// A second outside version published before the step's second write was built on the
// step's first version: writing again cannot keep both, and the step says so.
func TestStepRedoReplacingAnotherOutsideVersionFails(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	check(t, srv.ChangeBeforeWrite("env", "version_state", 2, bumpAndroid("2.3.2")))
	step := mobile.NewStep(newClient(srv))
	res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	if !errors.Is(err, mobile.ErrOutsideChangeLost) || !strings.Contains(err.Error(), "replaced in turn") || res.Attempts != 2 {
		t.Fatalf("got %v, %+v; want ErrOutsideChangeLost after the second write", err, res)
	}
}

// When the step cannot read its version back, its value is written but whether it replaced
// an outside change is unknown: the step fails and says both.
func TestStepFailsWhenItCannotLearnWhatItsVersionReplaced(t *testing.T) {
	failDetail := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/api/v1/environment-feature-versions/") {
				http.Error(w, "bad gateway", http.StatusBadGateway)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := newFake(t, flagsmithtest.WithMiddleware(failDetail))
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	step := mobile.NewStep(newClient(srv))
	res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}})
	if !errors.Is(err, mobile.ErrOutsideChangeUnknown) || !errors.Is(err, mobile.ErrServer) || !res.Changed ||
		!strings.Contains(err.Error(), res.Version) {
		t.Fatalf("got %v, %+v; want ErrOutsideChangeUnknown naming the written version", err, res)
	}
	if v, _ := srv.Value("env", "version_state"); doc(t, v)["ios"]["latest_version"] != "2.4.0" {
		t.Fatalf("stored %v, want the step's value written", v)
	}
}

// A revert puts back what a step wrote, field by field, as long as each field still holds
// what the step wrote: a field a person changed since keeps the person's value (reported as
// skipped), a field the step created is removed, the others go back.
func TestStepRevertKeepsEditsMadeSince(t *testing.T) {
	forBoth(t, func(t *testing.T, v2 bool) {
		srv := newFake(t)
		addEnv(t, srv, "env", v2)
		check(t, srv.SetValue("env", "version_state", `{"ios":{"latest_version":"2.3.0"},"android":{"latest_version":"2.3.1"}}`))
		step := mobile.NewStep(newClient(srv))
		changes := []mobile.Change{latest("ios", "2.4.0"), latest("android", "2.4.0"), {Path: "ios.min_version", Value: "2.1.0"}}
		res, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state", Changes: changes})
		check(t, err)
		// A person raises android by hand after the run wrote it.
		check(t, srv.SetValue("env", "version_state", `{"ios":{"latest_version":"2.4.0","min_version":"2.1.0"},"android":{"latest_version":"2.5.0"}}`))

		back, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state",
			Revert: &mobile.Revert{Old: res.Old, New: res.New, Paths: []string{"ios.latest_version", "android.latest_version", "ios.min_version"}}})
		check(t, err)
		info, err := srv.State("env", "version_state")
		check(t, err)
		want := `{"ios":{"latest_version":"2.3.0"},"android":{"latest_version":"2.5.0"}}`
		if info.Value != want || !back.Changed {
			t.Errorf("after the revert: %v (changed %v), want %s", info.Value, back.Changed, want)
		}
		if len(back.Skipped) != 1 || back.Skipped[0].Path != "android.latest_version" || back.Skipped[0].Current != `"2.5.0"` {
			t.Errorf("skipped %+v, want android.latest_version kept at the person's 2.5.0", back.Skipped)
		}
		// Reverting again finds nothing of the step's left: no write.
		writes := len(srv.Writes())
		again, err := step.Run(context.Background(), mobile.Request{Environment: "env", Feature: "version_state",
			Revert: &mobile.Revert{Old: res.Old, New: res.New, Paths: []string{"ios.latest_version", "android.latest_version", "ios.min_version"}}})
		check(t, err)
		if again.Changed || len(srv.Writes()) != writes {
			t.Errorf("a second revert wrote again: %+v", again)
		}
	})
}

// Preview works out what Run would write, from the value read, and writes nothing; a wrong
// environment key, a missing feature and a change that does not fit the value are the errors
// Run would fail with.
func TestStepPreviewWritesNothing(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	step := mobile.NewStep(newClient(srv))
	res, err := step.Preview(context.Background(), mobile.Request{Environment: "env", Feature: "version_state",
		Changes: []mobile.Change{latest("ios", "2.4.0"), {Path: "android.latest_version", Value: "2.0.0", NeverDowngrade: true}}})
	check(t, err)
	if !res.Changed || res.Old != mobile.StringValue(versionDoc) || !strings.Contains(res.New.Str, `"latest_version":"2.4.0"`) ||
		len(res.Skipped) != 1 || res.Skipped[0].Path != "android.latest_version" {
		t.Errorf("preview %+v, want ios raised and android's downgrade skipped", res)
	}
	if n := len(srv.Writes()); n != 0 {
		t.Errorf("preview wrote %d times", n)
	}
	for name, r := range map[string]mobile.Request{
		"unknown environment key": {Environment: "nope", Feature: "version_state", Changes: []mobile.Change{latest("ios", "2.4.0")}},
		"unknown feature":         {Environment: "env", Feature: "nope", Changes: []mobile.Change{latest("ios", "2.4.0")}},
		"a path through a string": {Environment: "env", Feature: "version_state", Changes: []mobile.Change{{Path: "ios.latest_version.x", Value: 1}}},
	} {
		if _, err := step.Preview(context.Background(), r); err == nil {
			t.Errorf("%s: preview succeeded, want the error Run would fail with", name)
		}
	}
}
