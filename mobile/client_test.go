package mobile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
	"github.com/deploy-orchestrator/orchestrator/mobile"
	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/mobile/internal/flagspec"
)

const versionDoc = `{"ios":{"min_version":"2.0.0","latest_version":"2.3.0"},"android":{"min_version":"2.0.0","latest_version":"2.3.1"}}`

// newFake starts the fake with every exchange validated against Flagsmith's openapi.yaml.
func newFake(t *testing.T, opts ...flagsmithtest.Option) *flagsmithtest.Server {
	t.Helper()
	return flagsmithtest.NewServer(t, append([]flagsmithtest.Option{flagsmithtest.WithMiddleware(flagspec.Middleware(t))}, opts...)...)
}

func newClient(srv *flagsmithtest.Server, opts ...mobile.Option) *mobile.Client {
	base := []mobile.Option{mobile.WithRetry(mobile.RetryPolicy{MaxRetries: 3, MinWait: time.Millisecond, MaxWait: 5 * time.Millisecond, MaxRetryAfter: mobile.DefaultRetryPolicy.MaxRetryAfter}), mobile.WithVersion("1.2.3")}
	return mobile.New(srv.URL, srv.APIKey, append(base, opts...)...)
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func addEnv(t testing.TB, srv *flagsmithtest.Server, key string, v2 bool) {
	t.Helper()
	_, err := srv.AddEnvironment(flagsmithtest.Environment{APIKey: key, V2: v2})
	check(t, err)
}

// resolve reads environment, feature and state the way the step does.
func resolve(t *testing.T, ctx context.Context, c *mobile.Client, envKey, name string) (mobile.Environment, mobile.Feature, mobile.FeatureState) {
	t.Helper()
	env, err := c.Environment(ctx, envKey)
	check(t, err)
	ft, err := c.Feature(ctx, env.Project, name)
	check(t, err)
	st, err := c.FeatureState(ctx, env.APIKey, ft.ID)
	check(t, err)
	return env, ft, st
}

func TestReadSendsAuthTraceAndTrailingSlash(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env-prod", false)
	check(t, srv.SetValue("env-prod", "version_state", versionDoc))
	c := newClient(srv)

	ctx := trace.With(context.Background(), "run-42", 7)
	env, ft, st := resolve(t, ctx, c, "env-prod", "version_state")
	if env.V2Versioning || env.APIKey != "env-prod" {
		t.Fatalf("got environment %+v, want v1 env-prod", env)
	}
	if ft.Name != "version_state" {
		t.Fatalf("got feature %q, want version_state", ft.Name)
	}
	if st.Value != mobile.StringValue(versionDoc) {
		t.Fatalf("got value %v, want the document as a string", st.Value)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("got %d requests, want 3", len(reqs))
	}
	for _, r := range reqs {
		if !r.Authorized || r.UserAgent != "orchestrator/1.2.3" || r.Run != "run-42" || r.Fence != "7" {
			t.Errorf("%s %s: authorized=%v ua=%q run=%q fence=%q", r.Method, r.Path, r.Authorized, r.UserAgent, r.Run, r.Fence)
		}
		if !strings.HasSuffix(r.Path, "/") {
			t.Errorf("path %q lost its trailing slash", r.Path)
		}
	}
}

func TestFeatureMatchesTheExactNameAcrossPages(t *testing.T) {
	srv := newFake(t, flagsmithtest.WithPageSizeLimit(2))
	addEnv(t, srv, "env", false)
	// Features whose names contain "version_state" fill the first pages; the exact one
	// comes last.
	for i := range 5 {
		_, err := srv.AddFeature(1, fmt.Sprintf("version_state_%04d", i))
		check(t, err)
	}
	id, err := srv.AddFeature(1, "version_state")
	check(t, err)
	c := newClient(srv)
	ft, err := c.Feature(context.Background(), 1, "version_state")
	check(t, err)
	if ft.ID != id {
		t.Fatalf("got feature %d (%q), want %d", ft.ID, ft.Name, id)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("got %d requests, want 3 pages of 2", n)
	}
	if _, err := c.Feature(context.Background(), 1, "VERSION_STATE"); !errors.Is(err, mobile.ErrNotFound) {
		t.Fatalf("case-different name: got %v, want ErrNotFound", err)
	}
}

func TestV1WriteKeepsTheJSONType(t *testing.T) {
	cases := []struct {
		name     string
		seed     any
		write    mobile.Value
		wantType string
		want     any
	}{
		{"document stays a string", versionDoc, mobile.StringValue(`{"a":1}`), "unicode", `{"a":1}`},
		{"numeric-looking string stays a string", "1234", mobile.StringValue("1235"), "unicode", "1235"},
		{"integer stays an integer", int64(41), mobile.IntValue(42), "int", int64(42)},
		{"boolean stays a boolean", false, mobile.BoolValue(true), "bool", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFake(t)
			addEnv(t, srv, "env", false)
			check(t, srv.SetValue("env", "f", tc.seed))
			c := newClient(srv)
			ctx := context.Background()
			_, ft, st := resolve(t, ctx, c, "env", "f")
			got, err := c.UpdateFeatureState(ctx, "env", st.ID, ft.ID, tc.write, st.Enabled)
			check(t, err)
			if got.Value != tc.write {
				t.Fatalf("answer value: got %v, want %v", got.Value, tc.write)
			}
			info, err := srv.State("env", "f")
			check(t, err)
			if info.Type != tc.wantType || info.Value != tc.want {
				t.Fatalf("stored: got %s %#v, want %s %#v", info.Type, info.Value, tc.wantType, tc.want)
			}
		})
	}
}

func TestV2WritePublishesAVersion(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	check(t, srv.SetValue("env", "min_build", int64(10)))
	c := newClient(srv)
	ctx := context.Background()

	env, ft, st := resolve(t, ctx, c, "env", "version_state")
	if !env.V2Versioning || st.Version == "" {
		t.Fatalf("got v2=%v version=%q, want a v2 environment and a versioned state", env.V2Versioning, st.Version)
	}
	v, err := c.PublishVersion(ctx, env.ID, ft.ID, mobile.StringValue(`{"x":1}`), true)
	check(t, err)
	if !v.Published || !v.IsLive {
		t.Fatalf("got %+v, want a published live version", v)
	}
	live, err := c.LiveVersion(ctx, env.ID, ft.ID)
	check(t, err)
	if live.UUID != v.UUID {
		t.Fatalf("live version %s, want %s", live.UUID, v.UUID)
	}
	info, err := srv.State("env", "version_state")
	check(t, err)
	if info.Type != "unicode" || info.Value != `{"x":1}` || !info.Enabled || info.Version != v.UUID {
		t.Fatalf("stored %+v", info)
	}

	// An integer feature stays an integer through a version.
	_, ftInt, _ := resolve(t, ctx, c, "env", "min_build")
	_, err = c.PublishVersion(ctx, env.ID, ftInt.ID, mobile.IntValue(11), false)
	check(t, err)
	info, err = srv.State("env", "min_build")
	check(t, err)
	if info.Type != "int" || info.Value != int64(11) {
		t.Fatalf("stored %s %#v, want int 11", info.Type, info.Value)
	}
}

// A version's detail names the version it replaced; a version's default state comes back
// with its value typed as stored.
func TestVersionDetailAndVersionState(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", true)
	c := newClient(srv)
	ctx := context.Background()
	for _, want := range []mobile.Value{mobile.StringValue(`{"x":1}`), mobile.IntValue(-7), mobile.BoolValue(false)} {
		check(t, srv.SetValue("env", "f", nil))
		env, ft, before := resolve(t, ctx, c, "env", "f")
		if st, err := c.VersionState(ctx, env.ID, ft.ID, before.Version); err != nil || st.Value != (mobile.Value{}) {
			t.Fatalf("state of a version holding no value: %+v, %v; want null", st, err)
		}
		v, err := c.PublishVersion(ctx, env.ID, ft.ID, want, true)
		check(t, err)
		d, err := c.VersionDetail(ctx, v.UUID)
		check(t, err)
		if d.UUID != v.UUID || d.Previous != before.Version || d.Feature != ft.ID || d.Environment != env.ID || !d.IsLive {
			t.Fatalf("detail %+v, want version %s replacing %s", d, v.UUID, before.Version)
		}
		st, err := c.VersionState(ctx, env.ID, ft.ID, v.UUID)
		check(t, err)
		if st.Value != want || !st.Enabled || st.Version != v.UUID || st.Feature != ft.ID || st.Environment != env.ID {
			t.Fatalf("state %+v, want %v enabled in version %s", st, want, v.UUID)
		}
	}
	env, ft, _ := resolve(t, ctx, c, "env", "f")
	const missing = "00000000-0000-4000-8000-000000000000"
	if _, err := c.VersionDetail(ctx, missing); !errors.Is(err, mobile.ErrNotFound) {
		t.Errorf("unknown version detail: got %v, want ErrNotFound", err)
	}
	if _, err := c.VersionState(ctx, env.ID, ft.ID, missing); !errors.Is(err, mobile.ErrNotFound) {
		t.Errorf("unknown version states: got %v, want ErrNotFound", err)
	}
}

func TestLegacyWriteOnV2IsRefused(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	c := newClient(srv)
	ctx := context.Background()
	_, ft, st := resolve(t, ctx, c, "env", "version_state")
	_, err := c.UpdateFeatureState(ctx, "env", st.ID, ft.ID, mobile.StringValue("{}"), true)
	var apiErr *mobile.APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, mobile.ErrLegacyWrite) {
		t.Fatalf("got %v, want an *APIError matching ErrLegacyWrite", err)
	}
	if apiErr.StatusCode != http.StatusBadRequest || apiErr.Method != "PUT" || apiErr.Message != flagsmithtest.LegacyWriteDetail {
		t.Fatalf("got %+v", apiErr)
	}
	if len(srv.Writes()) != 1 {
		t.Fatalf("got %d writes, want 1 (a 400 is not retried)", len(srv.Writes()))
	}
	if v, _ := srv.Value("env", "version_state"); v != versionDoc {
		t.Fatalf("value changed to %v", v)
	}
}

func TestValidationErrorKeepsTheFieldMessage(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	check(t, srv.SetValue("env", "f", "x"))
	c := newClient(srv)
	ctx := context.Background()
	_, ft, st := resolve(t, ctx, c, "env", "f")
	// The client refuses values Flagsmith cannot store before sending them.
	_, err := c.UpdateFeatureState(ctx, "env", st.ID, ft.ID, mobile.StringValue(strings.Repeat("x", 20001)), true)
	if err == nil || !strings.Contains(err.Error(), "limit of 20000") {
		t.Fatalf("got %v, want the 20000-character limit", err)
	}
	_, err = c.UpdateFeatureState(ctx, "env", st.ID, ft.ID, mobile.IntValue(1<<31), true)
	if err == nil || !strings.Contains(err.Error(), "32-bit") {
		t.Fatalf("got %v, want the 32-bit limit", err)
	}
	if n := len(srv.Writes()); n != 0 {
		t.Fatalf("got %d writes, want none", n)
	}
}

func TestRetryAfterIsHonored(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	c := newClient(srv)
	srv.ThrottleNext(1, time.Second)
	start := time.Now()
	_, err := c.Environment(context.Background(), "env")
	check(t, err)
	// A correctness bound, not a performance goal: the retry must not come before Retry-After.
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("retried after %s, want at least the 1s of Retry-After", waited)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Status != http.StatusTooManyRequests || reqs[1].Status != http.StatusOK {
		t.Fatalf("got %+v, want a 429 then a 200", reqs)
	}
}

func TestRateLimitBudgetRunsOut(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	c := newClient(srv, mobile.WithRetry(mobile.RetryPolicy{MaxRetries: 2, MinWait: time.Millisecond, MaxWait: time.Millisecond, MaxRetryAfter: mobile.DefaultRetryPolicy.MaxRetryAfter}))
	srv.ThrottleNext(5, 0)
	_, err := c.Environment(context.Background(), "env")
	var apiErr *mobile.APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, mobile.ErrRateLimited) || !strings.Contains(apiErr.Message, "throttled") {
		t.Fatalf("got %v, want ErrRateLimited with DRF's message", err)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("got %d requests, want 3 (1 + 2 retries)", n)
	}
}

func TestServerErrorsAreRetriedWithinTheBudget(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	c := newClient(srv)

	srv.FailNext(2, http.StatusBadGateway)
	if _, err := c.Environment(context.Background(), "env"); err != nil {
		t.Fatalf("two 502s then 200: got %v", err)
	}
	srv.ResetRequests()
	srv.FailNext(10, http.StatusServiceUnavailable)
	_, err := c.Environment(context.Background(), "env")
	var apiErr *mobile.APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, mobile.ErrServer) || apiErr.StatusCode != 503 {
		t.Fatalf("got %v, want a 503 *APIError matching ErrServer", err)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Fatalf("got %d requests, want 4 (1 + 3 retries)", n)
	}
}

func TestClientErrorsFailAtOnce(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	c := newClient(srv)
	_, err := c.Environment(context.Background(), "missing")
	if !errors.Is(err, mobile.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	wrong := mobile.New(srv.URL, "not-the-key", mobile.WithRetry(mobile.RetryPolicy{MaxRetries: 3, MinWait: time.Millisecond, MaxWait: time.Millisecond, MaxRetryAfter: mobile.DefaultRetryPolicy.MaxRetryAfter}))
	_, err = wrong.Environment(context.Background(), "env")
	if !errors.Is(err, mobile.ErrUnauthorized) || !strings.Contains(err.Error(), "Valid Master API Key not found.") {
		t.Fatalf("got %v, want ErrUnauthorized with the server's message", err)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Fatalf("got %d requests, want 2 (no retries on 4xx)", n)
	}
}

func TestContextCancelStopsRetries(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	c := newClient(srv)
	srv.ThrottleNext(1, time.Minute) // under DefaultRetryPolicy.MaxRetryAfter: the client waits it out
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Environment(ctx, "env"); errc <- err }()
	// Cancel once the 429 has been answered: the client is then waiting out Retry-After.
	for len(srv.Requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestAPIKeyNeverLogged(t *testing.T) {
	const key = "org-key.s3cr3t-VALUE-that-must-not-leak"
	srv := newFake(t, flagsmithtest.WithAPIKey(key))
	addEnv(t, srv, "env", false)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := mobile.New(srv.URL, key, mobile.WithLogger(logger), mobile.WithRetry(mobile.RetryPolicy{MaxRetries: 2, MinWait: time.Millisecond, MaxWait: time.Millisecond, MaxRetryAfter: mobile.DefaultRetryPolicy.MaxRetryAfter}))

	srv.FailNext(1, http.StatusBadGateway)
	_, err := c.Environment(context.Background(), "env")
	check(t, err)
	srv.FailNext(5, http.StatusInternalServerError)
	_, err1 := c.Environment(context.Background(), "env")
	_, err2 := c.Environment(context.Background(), "missing")
	if logs.Len() == 0 {
		t.Fatal("no log output: the test would prove nothing")
	}
	for what, s := range map[string]string{
		"logs": logs.String(), "error 1": fmt.Sprint(err1), "error 2": fmt.Sprint(err2),
		"String()": c.String(), "%+v": fmt.Sprintf("%+v", c), "%#v": fmt.Sprintf("%#v", c),
	} {
		if strings.Contains(s, "s3cr3t") {
			t.Errorf("%s contain the API key: %s", what, s)
		}
	}
}

// publishSetup is a v2 environment with version_state, and the ids PublishVersion needs.
func publishSetup(t *testing.T) (*flagsmithtest.Server, *mobile.Client, mobile.Environment, mobile.Feature) {
	t.Helper()
	srv := newFake(t)
	addEnv(t, srv, "env", true)
	check(t, srv.SetValue("env", "version_state", versionDoc))
	c := newClient(srv)
	env, ft, _ := resolve(t, context.Background(), c, "env", "version_state")
	srv.ResetRequests()
	return srv, c, env, ft
}

func countVersions(t *testing.T, srv *flagsmithtest.Server) int {
	t.Helper()
	vs, err := srv.Versions("env", "version_state")
	check(t, err)
	return len(vs)
}

func posts(srv *flagsmithtest.Server) int {
	n := 0
	for _, r := range srv.Requests() {
		if r.Method == http.MethodPost {
			n++
		}
	}
	return n
}

// The version POST is never sent twice: when Flagsmith created the version but the answer was
// lost (a proxy's 502 after the commit), the client finds it by its description and returns
// it. Before, the POST was retried and published the value twice.
func TestPublishVersionLearnsTheOutcomeByReadingBack(t *testing.T) {
	srv, c, env, ft := publishSetup(t)
	before := countVersions(t, srv)
	srv.FailAfterApplyNext(1, http.StatusBadGateway)
	ctx := trace.With(context.Background(), "run-9", 77)
	v, err := c.PublishVersion(ctx, env.ID, ft.ID, mobile.StringValue(`{"x":2}`), true)
	check(t, err)
	if got := countVersions(t, srv); got != before+1 {
		t.Errorf("versions: got %d, want %d (exactly one created)", got, before+1)
	}
	if n := posts(srv); n != 1 {
		t.Errorf("POSTs: got %d, want 1 (never retried after an ambiguous failure)", n)
	}
	info, err := srv.State("env", "version_state")
	check(t, err)
	if v.UUID == "" || info.Version != v.UUID || info.Value != `{"x":2}` {
		t.Errorf("got version %q, live state %+v; want the created version, live with the value", v.UUID, info)
	}
	if v.Description == nil || !strings.Contains(*v.Description, "run run-9 fence 77 write ") {
		t.Errorf("description %v, want the run, the fence and a token", v.Description)
	}
}

// A 502 before anything was created: one POST, the read-back finds nothing, and the error says
// so (a server error, not "outcome unknown").
func TestPublishVersionNotCreated(t *testing.T) {
	srv, c, env, ft := publishSetup(t)
	before := countVersions(t, srv)
	srv.FailNext(1, http.StatusBadGateway)
	_, err := c.PublishVersion(context.Background(), env.ID, ft.ID, mobile.StringValue(`{"x":3}`), true)
	if !errors.Is(err, mobile.ErrServer) || errors.Is(err, outbound.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "not created") {
		t.Errorf("got %v, want a server error saying the version was not created", err)
	}
	if got, n := countVersions(t, srv), posts(srv); got != before || n != 1 {
		t.Errorf("versions %d (want %d), POSTs %d (want 1)", got, before, n)
	}
}

// When the read-back fails too, the error says that the outcome is unknown, and names both
// failures.
func TestPublishVersionOutcomeUnknown(t *testing.T) {
	srv, c, env, ft := publishSetup(t)
	srv.FailAfterApplyNext(1, http.StatusGatewayTimeout)
	srv.FailNext(10, http.StatusInternalServerError) // the reads that follow
	_, err := c.PublishVersion(context.Background(), env.ID, ft.ID, mobile.StringValue(`{"x":4}`), true)
	var oe *outbound.OutcomeUnknownError
	if !errors.As(err, &oe) || !errors.Is(err, mobile.ErrServer) ||
		!strings.Contains(err.Error(), "504") || !strings.Contains(err.Error(), "500") {
		t.Errorf("got %v, want ErrOutcomeUnknown naming the 504 and the failed read-back", err)
	}
	if n := posts(srv); n != 1 {
		t.Errorf("POSTs: got %d, want 1", n)
	}
}

// The other calls are idempotent: a PUT of the whole state is retried through a 502.
func TestLegacyWriteIsRetried(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	check(t, srv.SetValue("env", "min_build", int64(1)))
	c := newClient(srv)
	ctx := context.Background()
	env, ft, st := resolve(t, ctx, c, "env", "min_build")
	srv.ResetRequests()
	srv.FailNext(1, http.StatusBadGateway)
	_, err := c.UpdateFeatureState(ctx, env.APIKey, st.ID, ft.ID, mobile.IntValue(2), true)
	check(t, err)
	if n := len(srv.Writes()); n != 2 {
		t.Errorf("PUTs: got %d, want 2 (one 502, one retry)", n)
	}
}

// Every attempt is reported to the metrics hook as system "flagsmith" with a route template.
func TestFlagsmithMetrics(t *testing.T) {
	srv := newFake(t)
	addEnv(t, srv, "env", false)
	var mu sync.Mutex
	var got []string
	c := newClient(srv, mobile.WithMetrics(func(system, method, route string, status int, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%s %s %s %d", system, method, route, status))
	}))
	srv.FailNext(1, http.StatusBadGateway)
	_, err := c.Environment(context.Background(), "env")
	check(t, err)
	want := []string{"flagsmith GET /api/v1/environments/{api_key}/ 502", "flagsmith GET /api/v1/environments/{api_key}/ 200"}
	if !slices.Equal(got, want) {
		t.Errorf("metrics: got %q, want %q", got, want)
	}
}
