package flagsmithtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/mobile/flagsmithtest"
	"github.com/deploy-orchestrator/orchestrator/mobile/internal/flagspec"
)

func newServer(t *testing.T, opts ...flagsmithtest.Option) *flagsmithtest.Server {
	t.Helper()
	return flagsmithtest.NewServer(t, append([]flagsmithtest.Option{flagsmithtest.WithMiddleware(flagspec.Middleware(t))}, opts...)...)
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(a.body), v); err != nil {
		t.Fatalf("decode %s: %v", a.body, err)
	}
}

func call(t *testing.T, srv *flagsmithtest.Server, method, path, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	check(t, err)
	req.Header.Set("Authorization", "Api-Key "+srv.APIKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	check(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	check(t, err)
	return answer{resp.StatusCode, resp.Header, strings.TrimSpace(string(b))}
}

// seed makes an environment with one feature and returns the feature's default state.
func seed(t *testing.T, srv *flagsmithtest.Server, v2 bool, value any) flagsmithtest.StateInfo {
	t.Helper()
	_, err := srv.AddEnvironment(flagsmithtest.Environment{APIKey: "env", V2: v2})
	check(t, err)
	check(t, srv.SetValue("env", "version_state", value))
	st, err := srv.State("env", "version_state")
	check(t, err)
	return st
}

func TestLegacyWriteInfersTheTypeFromJSON(t *testing.T) {
	cases := []struct {
		body     string
		wantType string
		want     any
	}{
		{`"42"`, "unicode", "42"},
		{`42`, "int", int64(42)},
		{`true`, "bool", true},
		{`1.5`, "unicode", "1.5"},
		{`"{\"a\":1}"`, "unicode", `{"a":1}`},
	}
	for _, c := range cases {
		t.Run(c.body, func(t *testing.T) {
			srv := newServer(t)
			st := seed(t, srv, false, "x")
			a := call(t, srv, "PUT", fmt.Sprintf("/api/v1/environments/env/featurestates/%d/", st.ID),
				fmt.Sprintf(`{"feature":%d,"feature_state_value":%s,"enabled":true}`, st.Feature, c.body))
			if a.status != http.StatusOK {
				t.Fatalf("got %d %s, want 200", a.status, a.body)
			}
			got, err := srv.State("env", "version_state")
			check(t, err)
			if got.Type != c.wantType || got.Value != c.want || !got.Enabled || !got.UpdatedAt.After(st.UpdatedAt) {
				t.Fatalf("stored %+v, want %s %#v, enabled, updated_at moved", got, c.wantType, c.want)
			}
		})
	}
}

func TestLegacyWriteValidation(t *testing.T) {
	srv := newServer(t)
	st := seed(t, srv, false, "x")
	path := fmt.Sprintf("/api/v1/environments/env/featurestates/%d/", st.ID)
	for body, want := range map[string]string{
		`{"feature_state_value":2147483648}`:                           `{"integer_value":["Ensure this value is less than or equal to 2147483647."]}`,
		`{"feature_state_value":"` + strings.Repeat("x", 20001) + `"}`: `{"string_value":["Ensure this field has no more than 20000 characters."]}`,
	} {
		if a := call(t, srv, "PATCH", path, body); a.status != http.StatusBadRequest || a.body != want {
			t.Errorf("got %d %s, want 400 %s", a.status, a.body, want)
		}
	}
	if got, _ := srv.Value("env", "version_state"); got != "x" {
		t.Fatalf("value changed to %v", got)
	}
}

func TestV2RefusesLegacyWritesWithFlagsmithsBody(t *testing.T) {
	srv := newServer(t)
	st := seed(t, srv, true, "x")
	a := call(t, srv, "PUT", fmt.Sprintf("/api/v1/environments/env/featurestates/%d/", st.ID),
		fmt.Sprintf(`{"feature":%d,"feature_state_value":"y"}`, st.Feature))
	want := `{"detail":"This environment uses v2 feature versioning. Use the environment feature version endpoint instead."}`
	if a.status != http.StatusBadRequest || a.body != want {
		t.Fatalf("got %d %s, want 400 %s", a.status, a.body, want)
	}
}

func TestVersionsCloneTheLiveVersion(t *testing.T) {
	srv := newServer(t)
	st := seed(t, srv, true, "one")
	envID := func() int64 {
		var env struct{ ID int64 }
		call(t, srv, "GET", "/api/v1/environments/env/", "").decode(t, &env)
		return env.ID
	}()
	versions := fmt.Sprintf("/api/v1/environments/%d/features/%d/versions/", envID, st.Feature)

	// A draft with a new value is not live: the featurestates route still shows "one".
	a := call(t, srv, "POST", versions, `{"feature_states_to_update":[{"feature_segment":null,"enabled":true,"feature_state_value":{"type":"unicode","string_value":"two"}}]}`)
	if a.status != http.StatusCreated {
		t.Fatalf("got %d %s", a.status, a.body)
	}
	if got, _ := srv.Value("env", "version_state"); got != "one" {
		t.Fatalf("a draft went live: %v", got)
	}
	// An empty version published at once clones the live value.
	a = call(t, srv, "POST", versions, `{"publish_immediately":true}`)
	var v struct {
		UUID   string `json:"uuid"`
		IsLive bool   `json:"is_live"`
	}
	a.decode(t, &v)
	if !v.IsLive {
		t.Fatalf("got %s, want a live version", a.body)
	}
	got, err := srv.State("env", "version_state")
	check(t, err)
	if got.Value != "one" || got.Version != v.UUID {
		t.Fatalf("got %+v, want the clone of \"one\" in version %s", got, v.UUID)
	}
	var page struct {
		Count   int `json:"count"`
		Results []struct {
			UUID   string `json:"uuid"`
			IsLive bool   `json:"is_live"`
		} `json:"results"`
	}
	call(t, srv, "GET", versions+"?is_live=true", "").decode(t, &page)
	// Live: the feature's first version, SetValue's, and this one.
	if page.Count != 3 || page.Results[0].UUID != v.UUID {
		t.Fatalf("live versions %+v, want 3, newest %s first", page, v.UUID)
	}
	call(t, srv, "GET", versions+"?is_live=false", "").decode(t, &page)
	if page.Count != 1 || page.Results[0].IsLive {
		t.Fatalf("versions not live %+v, want the draft", page)
	}
}

func TestVersionsOnAV1EnvironmentAreRefused(t *testing.T) {
	srv := newServer(t)
	st := seed(t, srv, false, "x")
	var env struct{ ID int64 }
	call(t, srv, "GET", "/api/v1/environments/env/", "").decode(t, &env)
	a := call(t, srv, "POST", fmt.Sprintf("/api/v1/environments/%d/features/%d/versions/", env.ID, st.Feature), `{"publish_immediately":true}`)
	if a.status != http.StatusBadRequest {
		t.Fatalf("got %d %s, want 400", a.status, a.body)
	}
}

func TestFeatureStatesFilterByNameIgnoringCase(t *testing.T) {
	srv := newServer(t)
	seed(t, srv, false, "x")
	_, err := srv.AddFeature(1, "version_state_old")
	check(t, err)
	var page struct {
		Count   int `json:"count"`
		Results []struct {
			Feature  int64 `json:"feature"`
			Identity any   `json:"identity"`
		} `json:"results"`
	}
	call(t, srv, "GET", "/api/v1/environments/env/featurestates/?feature_name=VERSION_STATE", "").decode(t, &page)
	if page.Count != 1 || page.Results[0].Identity != nil {
		t.Fatalf("got %+v, want the one iexact match with identity null", page)
	}
}

func TestFeaturesSearchIsASubstringMatchWithPages(t *testing.T) {
	srv := newServer(t)
	seed(t, srv, false, "x")
	for i := range 3 {
		_, err := srv.AddFeature(1, fmt.Sprintf("old_version_state_%d", i))
		check(t, err)
	}
	_, err := srv.AddFeature(1, "unrelated")
	check(t, err)
	var page struct {
		Count   int     `json:"count"`
		Next    *string `json:"next"`
		Results []struct {
			Name string `json:"name"`
		} `json:"results"`
	}
	call(t, srv, "GET", "/api/v1/projects/1/features/?search=Version_State&page_size=3", "").decode(t, &page)
	if page.Count != 4 || len(page.Results) != 3 || page.Next == nil {
		t.Fatalf("got %+v, want 4 matches, 3 on the first page and a next link", page)
	}
	next := strings.TrimPrefix(*page.Next, srv.URL)
	call(t, srv, "GET", next, "").decode(t, &page)
	if len(page.Results) != 1 || page.Next != nil {
		t.Fatalf("second page %+v, want the last match", page)
	}
}

func TestAuthentication(t *testing.T) {
	srv := flagsmithtest.NewServer(t) // not validated: the spec requires credentials
	_, err := srv.AddEnvironment(flagsmithtest.Environment{APIKey: "env"})
	check(t, err)
	for auth, want := range map[string]string{
		"":                "Authentication credentials were not provided.",
		"Api-Key wrong":   "Valid Master API Key not found.",
		"Token " + "abcd": "Valid Master API Key not found.",
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/api/v1/environments/env/", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		check(t, err)
		var body struct{ Detail string }
		check(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || body.Detail != want {
			t.Errorf("%q: got %d %q, want 401 %q", auth, resp.StatusCode, body.Detail, want)
		}
	}
	for _, r := range srv.Requests() {
		if r.Authorized {
			t.Errorf("request log marks a bad key as authorized: %+v", r)
		}
	}
}

func TestPathsWithoutTheTrailingSlashRedirect(t *testing.T) {
	srv := flagsmithtest.NewServer(t) // the spec has no such route
	_, err := srv.AddEnvironment(flagsmithtest.Environment{APIKey: "env"})
	check(t, err)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", srv.URL+"/api/v1/environments/env", nil)
	req.Header.Set("Authorization", "Api-Key "+srv.APIKey)
	resp, err := noFollow.Do(req)
	check(t, err)
	resp.Body.Close()
	if resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/api/v1/environments/env/" {
		t.Fatalf("got %d to %q, want a redirect to the path with its slash", resp.StatusCode, resp.Header.Get("Location"))
	}
	if a := call(t, srv, "GET", "/api/v1/nothing/", ""); a.status != http.StatusNotFound || a.body != `{"detail":"Not found."}` {
		t.Fatalf("got %d %s, want DRF's 404", a.status, a.body)
	}
}

func TestFaultKnobs(t *testing.T) {
	srv := newServer(t)
	seed(t, srv, false, "x")

	srv.ThrottleNext(1, 1500*time.Millisecond)
	a := call(t, srv, "GET", "/api/v1/environments/env/", "")
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "2" ||
		a.body != `{"detail":"Request was throttled. Expected available in 2 seconds."}` {
		t.Fatalf("got %d %q %s, want 429 with Retry-After 2 and DRF's body", a.status, a.header.Get("Retry-After"), a.body)
	}
	srv.FailNext(2, http.StatusBadGateway)
	for range 2 {
		if a := call(t, srv, "GET", "/api/v1/environments/env/", ""); a.status != http.StatusBadGateway {
			t.Fatalf("got %d, want 502", a.status)
		}
	}
	if a := call(t, srv, "GET", "/api/v1/environments/env/", ""); a.status != http.StatusOK {
		t.Fatalf("got %d after the faults, want 200", a.status)
	}
	var statuses []int
	for _, r := range srv.Requests() {
		statuses = append(statuses, r.Status)
	}
	if fmt.Sprint(statuses) != "[429 502 502 200]" {
		t.Fatalf("request log statuses %v", statuses)
	}
}

// FailAfterApplyNext applies the write and loses its answer; reads pass untouched and do not
// use it up, and FailNext set meanwhile fails the reads, not the write.
func TestFailAfterApply(t *testing.T) {
	srv := newServer(t)
	st := seed(t, srv, false, "before")
	srv.FailAfterApplyNext(1, http.StatusBadGateway)
	srv.FailNext(1, http.StatusInternalServerError)
	path := fmt.Sprintf("/api/v1/environments/env/featurestates/%d/", st.ID)
	if a := call(t, srv, "PUT", path, fmt.Sprintf(`{"feature":%d,"feature_state_value":"after"}`, st.Feature)); a.status != http.StatusBadGateway {
		t.Fatalf("write: got %d %s, want 502", a.status, a.body)
	}
	if got, _ := srv.Value("env", "version_state"); got != "after" {
		t.Fatalf("value %v after the failed answer, want after (the write took effect)", got)
	}
	if a := call(t, srv, "GET", path, ""); a.status != http.StatusInternalServerError {
		t.Fatalf("read: got %d, want the 500 of FailNext", a.status)
	}
	if a := call(t, srv, "PUT", path, fmt.Sprintf(`{"feature":%d,"feature_state_value":"again"}`, st.Feature)); a.status != http.StatusOK {
		t.Fatalf("second write: got %d, want 200 (one fault only)", a.status)
	}
}

func TestChangeAfterReadLandsBetweenReadAndWrite(t *testing.T) {
	srv := newServer(t)
	st := seed(t, srv, false, "one")
	check(t, srv.ChangeAfterRead("env", "version_state", 1, func(cur any) any { return cur.(string) + "+other" }))
	var page struct {
		Results []struct {
			Value any `json:"feature_state_value"`
		} `json:"results"`
	}
	call(t, srv, "GET", fmt.Sprintf("/api/v1/environments/env/featurestates/?feature=%d", st.Feature), "").decode(t, &page)
	if len(page.Results) != 1 || page.Results[0].Value != "one" {
		t.Fatalf("the read saw %+v, want the value before the change", page)
	}
	if got, _ := srv.Value("env", "version_state"); got != "one+other" {
		t.Fatalf("after the read: %v, want one+other", got)
	}
	call(t, srv, "GET", fmt.Sprintf("/api/v1/environments/env/featurestates/?feature=%d", st.Feature), "")
	if got, _ := srv.Value("env", "version_state"); got != "one+other" {
		t.Fatalf("the knob fired twice: %v", got)
	}
}

func TestHandlerServesWithoutATestingT(t *testing.T) {
	f := flagsmithtest.New(flagsmithtest.WithAPIKey("k"))
	_, err := f.AddEnvironment(flagsmithtest.Environment{APIKey: "env", V2: true})
	check(t, err)
	req := httptest.NewRequest("GET", "/api/v1/environments/env/", nil)
	req.Header.Set("Authorization", "Api-Key k")
	rec := httptest.NewRecorder()
	f.ServeHTTP(rec, req)
	var env struct {
		V2 bool `json:"use_v2_feature_versioning"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &env); rec.Code != http.StatusOK || err != nil || !env.V2 {
		t.Fatalf("got %d %s", rec.Code, rec.Body)
	}
}

func TestLatencyEndsWithTheClientsContext(t *testing.T) {
	srv := flagsmithtest.NewServer(t, flagsmithtest.WithLatency(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/environments/env/", nil)
	_, err := http.DefaultClient.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the client's deadline", err)
	}
	// Close waits for the handler: it returns only because the fake's wait ended with the request.
	srv.Close()
}

func TestSeedersRefuseMistakes(t *testing.T) {
	f := flagsmithtest.New()
	_, err := f.AddEnvironment(flagsmithtest.Environment{APIKey: "env"})
	check(t, err)
	if _, err := f.AddEnvironment(flagsmithtest.Environment{APIKey: "env"}); err == nil {
		t.Error("duplicate environment accepted")
	}
	check(t, f.SetValue("env", "Version_State", "x"))
	if _, err := f.AddFeature(1, "version_state"); err == nil {
		t.Error("feature names must be unique ignoring case")
	}
	if err := f.SetValue("env", "f", 1.5); err == nil {
		t.Error("a fraction was accepted as a value")
	}
	if err := f.SetValue("nope", "f", "x"); err == nil {
		t.Error("unknown environment accepted")
	}
}

func TestAStoppedClockStillOrdersWrites(t *testing.T) {
	stopped := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	srv := newServer(t, flagsmithtest.WithClock(func() time.Time { return stopped }))
	st := seed(t, srv, true, "one")
	check(t, srv.SetValue("env", "version_state", "two"))
	got, err := srv.State("env", "version_state")
	check(t, err)
	if got.Value != "two" || !got.UpdatedAt.After(st.UpdatedAt) {
		t.Fatalf("got %+v, want the newer version live with a later timestamp than %s", got, st.UpdatedAt)
	}
	vs, err := srv.Versions("env", "version_state")
	check(t, err)
	for _, v := range vs {
		if !v.Live {
			t.Fatalf("version %+v published at the stopped instant is not live", v)
		}
	}
}

// The knob publishes an outside version just before the client's POST is handled: the
// client's version clones it, replaces its value, and names it as previous_version_uuid;
// the outside version's feature states still hold its value.
func TestChangeBeforeWriteLandsUnderTheWriteV2(t *testing.T) {
	srv := newServer(t)
	st := seed(t, srv, true, "one")
	var env struct{ ID int64 }
	call(t, srv, "GET", "/api/v1/environments/env/", "").decode(t, &env)
	versions := fmt.Sprintf("/api/v1/environments/%d/features/%d/versions/", env.ID, st.Feature)
	var saw any
	check(t, srv.ChangeBeforeWrite("env", "version_state", 1, func(cur any) any { saw = cur; return "one+other" }))

	// Reads do not fire it.
	call(t, srv, "GET", fmt.Sprintf("/api/v1/environments/env/featurestates/?feature=%d", st.Feature), "")
	if got, _ := srv.Value("env", "version_state"); got != "one" || saw != nil {
		t.Fatalf("a read fired the knob: %v", got)
	}
	a := call(t, srv, "POST", versions, `{"feature_states_to_update":[{"feature_segment":null,"enabled":true,"feature_state_value":{"type":"unicode","string_value":"mine"}}],"publish_immediately":true}`)
	var mine struct{ UUID string }
	a.decode(t, &mine)
	if a.status != http.StatusCreated || saw != "one" {
		t.Fatalf("got %d %s, the knob saw %v", a.status, a.body, saw)
	}
	vs, err := srv.Versions("env", "version_state")
	check(t, err)
	// The feature's first version, SetValue's ("one"), the outside one, ours.
	if len(vs) != 4 || vs[2].Value != "one+other" || vs[3].UUID != mine.UUID || vs[3].Value != "mine" || !vs[3].Live {
		t.Fatalf("versions %+v, want the outside version then ours, live", vs)
	}
	outside := vs[2].UUID
	var detail struct {
		UUID        string  `json:"uuid"`
		Previous    *string `json:"previous_version_uuid"`
		Feature     int64   `json:"feature"`
		Environment int64   `json:"environment"`
	}
	call(t, srv, "GET", "/api/v1/environment-feature-versions/"+mine.UUID+"/", "").decode(t, &detail)
	if detail.UUID != mine.UUID || detail.Previous == nil || *detail.Previous != outside ||
		detail.Feature != st.Feature || detail.Environment != env.ID {
		t.Fatalf("detail %+v, want previous %s", detail, outside)
	}
	// The first version has none before it.
	call(t, srv, "GET", "/api/v1/environment-feature-versions/"+vs[0].UUID+"/", "").decode(t, &detail)
	if detail.Previous != nil {
		t.Fatalf("first version's previous is %v, want null", *detail.Previous)
	}
	var states []struct {
		FeatureSegment *int64 `json:"feature_segment"`
		Enabled        bool   `json:"enabled"`
		Value          struct {
			Type  string  `json:"type"`
			Value *string `json:"string_value"`
		} `json:"feature_state_value"`
	}
	call(t, srv, "GET", versions+outside+"/featurestates/", "").decode(t, &states)
	if len(states) != 1 || states[0].FeatureSegment != nil || states[0].Value.Type != "unicode" ||
		states[0].Value.Value == nil || *states[0].Value.Value != "one+other" {
		t.Fatalf("states of the outside version %+v, want its default holding one+other", states)
	}
	// The knob fired once.
	call(t, srv, "POST", versions, `{"publish_immediately":true}`)
	if got, _ := srv.Value("env", "version_state"); got != "mine" {
		t.Fatalf("the knob fired twice: %v", got)
	}
	for path, want := range map[string]int{
		"/api/v1/environment-feature-versions/" + "00000000-0000-4000-8000-000000000000" + "/": http.StatusNotFound,
		versions + "00000000-0000-4000-8000-000000000000/featurestates/":                       http.StatusNotFound,
	} {
		if a := call(t, srv, "GET", path, ""); a.status != want {
			t.Errorf("GET %s: got %d %s, want %d", path, a.status, a.body, want)
		}
	}
}

// On v1 the outside write lands just before the PUT, which then overwrites it: no trace
// is left but the knob's call.
func TestChangeBeforeWriteLandsUnderTheWriteV1(t *testing.T) {
	srv := newServer(t)
	st := seed(t, srv, false, "one")
	var saw any
	check(t, srv.ChangeBeforeWrite("env", "version_state", 1, func(cur any) any { saw = cur; return "one+other" }))
	a := call(t, srv, "PUT", fmt.Sprintf("/api/v1/environments/env/featurestates/%d/", st.ID),
		fmt.Sprintf(`{"feature":%d,"feature_state_value":"mine"}`, st.Feature))
	if a.status != http.StatusOK || saw != "one" {
		t.Fatalf("got %d %s, the knob saw %v", a.status, a.body, saw)
	}
	if got, _ := srv.Value("env", "version_state"); got != "mine" {
		t.Fatalf("stored %v, want the PUT's value", got)
	}
}
