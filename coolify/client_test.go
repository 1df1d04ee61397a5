package coolify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/coolify/coolifytest"
	"github.com/deploy-orchestrator/orchestrator/coolify/internal/spec"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
)

// fastRetry keeps retry tests quick while still exercising backoff.
var fastRetry = coolify.RetryPolicy{MaxRetries: 3, MinWait: time.Millisecond, MaxWait: 5 * time.Millisecond, MaxRetryAfter: 2 * time.Second}

type env struct {
	srv *coolifytest.Server
	c   *coolify.Client
	app coolifytest.Application
	svc coolifytest.Service
}

// setup starts a fake with one image application and one service, and a client whose every
// request and response is validated against Coolify's OpenAPI spec.
func setup(t *testing.T, fakeOpts []coolifytest.Option, opts ...coolify.Option) *env {
	t.Helper()
	srv := coolifytest.NewServer(t, fakeOpts...)
	return &env{
		srv: srv,
		c:   newClient(t, srv, srv.Token, opts...),
		app: srv.AddApplication(coolifytest.Application{Name: "api", ImageName: "ghcr.io/acme/api", ImageTag: "v1",
			FQDN: "https://api.example.com,https://www.api.example.com", HealthCheckEnabled: true, HealthCheckPath: "/healthz"}),
		svc: srv.AddService(coolifytest.Service{Name: "search", ServiceType: "meilisearch"}),
	}
}

func newClient(t *testing.T, srv *coolifytest.Server, token string, opts ...coolify.Option) *coolify.Client {
	hc := &http.Client{Transport: spec.Load(t).Transport(t, nil), Timeout: 10 * time.Second}
	base := []coolify.Option{coolify.WithHTTPClient(hc), coolify.WithRetry(fastRetry),
		coolify.WithPollInterval(2 * time.Millisecond), coolify.WithVersion("1.2.3")}
	return coolify.New(srv.URL, token, append(base, opts...)...)
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want one matching %v", err, target)
	}
}

func TestGetApplication(t *testing.T) {
	e := setup(t, nil)
	a, err := e.c.GetApplication(context.Background(), e.app.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if a.UUID != e.app.UUID || a.Name != "api" || a.ImageName != "ghcr.io/acme/api" || a.ImageTag != "v1" {
		t.Errorf("got %+v, want the seeded application", a)
	}
	if a.BuildPack != "dockerimage" || a.GitCommitSHA != "HEAD" {
		t.Errorf("got build_pack %q commit %q, want dockerimage HEAD", a.BuildPack, a.GitCommitSHA)
	}
	if a.Status != "running:healthy" || !a.Running() || !a.Healthy() {
		t.Errorf("got status %q, want running:healthy", a.Status)
	}
	if !a.HealthCheck.Enabled || a.HealthCheck.Path != "/healthz" || a.HealthCheck.Retries != 10 || a.HealthCheck.Port != "" {
		t.Errorf("got health check %+v", a.HealthCheck)
	}
	if got := a.URLs(); len(got) != 2 || got[1] != "https://www.api.example.com" {
		t.Errorf("got urls %q", got)
	}
	if a.UpdatedAt.IsZero() {
		t.Error("updated_at not decoded")
	}
}

func TestNotFoundIsTypedAndNotRetried(t *testing.T) {
	e := setup(t, nil)
	_, err := e.c.GetApplication(context.Background(), "nope")
	wantErr(t, err, coolify.ErrNotFound)
	var ae *coolify.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("got %T, want *APIError in the chain", err)
	}
	if ae.Method != "GET" || ae.Path != "/api/v1/applications/nope" || ae.StatusCode != 404 || ae.Message != "Application not found." {
		t.Errorf("got %+v", ae)
	}
	if n := len(e.srv.RequestsTo("GET /applications/{uuid}")); n != 1 {
		t.Errorf("got %d attempts, want 1 (4xx fails at once)", n)
	}
	// A uuid is one path segment, whatever it holds: no traversal to other routes.
	for _, id := range []string{"../deployments", "a/b", "x?y=1", "%2e%2e"} {
		_, err := e.c.GetApplication(context.Background(), id)
		wantErr(t, err, coolify.ErrNotFound)
	}
	if n := len(e.srv.RequestsTo("GET /applications/{uuid}")); n != 5 {
		t.Errorf("got %d requests to the application route, want 5", n)
	}
}

func TestListEnvsDropsPreviewTwinsNotKeys(t *testing.T) {
	e := setup(t, nil)
	e.srv.SetEnv(e.app.UUID, coolifytest.Env{Key: "DB_URL", Value: coolifytest.Str("postgres://prod"), IsRuntime: true})
	// The twin Coolify made diverges: it must not shadow the production row.
	e.srv.SetEnv(e.app.UUID, coolifytest.Env{Key: "DB_URL", Value: coolifytest.Str("postgres://preview"), IsPreview: true})
	e.srv.SetEnv(e.app.UUID, coolifytest.Env{Key: "ONLY_PREVIEW", Value: coolifytest.Str("x"), IsPreview: true})
	e.srv.SetEnv(e.app.UUID, coolifytest.Env{Key: "LOG_LEVEL", Value: coolifytest.Str("info"), IsBuildtime: true, IsLiteral: true})
	if n := len(e.srv.Envs(e.app.UUID)); n != 5 {
		t.Fatalf("fake holds %d rows, want 5 (two vars with twins + one preview-only)", n)
	}
	got, err := e.c.ListEnvs(context.Background(), coolify.AppRef(e.app.UUID))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Key != "DB_URL" || got[0].Value != "postgres://prod" || got[1].Key != "LOG_LEVEL" {
		t.Fatalf("got %v, want DB_URL (production value) and LOG_LEVEL", got)
	}
	if l := got[1]; !l.IsBuildtime || l.IsRuntime || !l.IsLiteral || l.IsPreview || l.UUID == "" || l.ValueHidden() {
		t.Errorf("got LOG_LEVEL %v uuid %q, want buildtime literal non-preview with uuid", l, l.UUID)
	}

	e.srv.SetEnv(e.svc.UUID, coolifytest.Env{Key: "MEILI_KEY", Value: coolifytest.Str("k")})
	svc, err := e.c.ListEnvs(context.Background(), coolify.ServiceRef(e.svc.UUID))
	if err != nil || len(svc) != 1 || svc[0].Value != "k" {
		t.Fatalf("got %v, %v; want MEILI_KEY", svc, err)
	}
}

// Coolify stores an empty value as null and lists it as "value": null even to a token with
// read:sensitive: that is an empty value, not a hidden one (which is absent), so it can be
// compared and written back. What is written is stored trimmed (coolify.Stored).
func TestEmptyValueIsNotHidden(t *testing.T) {
	e := setup(t, nil)
	ref := coolify.AppRef(e.app.UUID)
	ctx := context.Background()
	vars := []coolify.EnvVar{coolify.NewEnvVar("EMPTY", ""), coolify.NewEnvVar("PEM", "-----BEGIN-----\nk\n-----END-----\n")}
	if err := e.c.UpsertEnvs(ctx, ref, vars); err != nil {
		t.Fatal(err)
	}
	got, err := e.c.ListEnvs(ctx, ref)
	if err != nil || len(got) != 2 {
		t.Fatalf("got %v, %v; want EMPTY and PEM", got, err)
	}
	for i, g := range got {
		if g.ValueHidden() {
			t.Errorf("%s read as hidden, want its value", g.Key)
		}
		if want := coolify.Stored(vars[i].Value); g.Value != want || !g.SameAs(vars[i].WithValue(want)) {
			t.Errorf("%s read as %q, want %q", g.Key, g.Value, want)
		}
	}
	if err := e.c.UpsertEnvs(ctx, ref, got); err != nil {
		t.Errorf("writing back what was read: %v", err)
	}
	updated, err := e.c.UpdateEnv(ctx, ref, got[0])
	if err != nil || updated.ValueHidden() || updated.Value != "" {
		t.Errorf("UpdateEnv answered %v, %v; want the empty value, not hidden", updated, err)
	}
}

func TestStored(t *testing.T) {
	for in, want := range map[string]string{
		"":                                    "",
		"  x  ":                               "x",
		"a b":                                 "a b",
		"\ufeff\u200bx\u200e\x00":             "x",
		"\t\n\v\f\r\u00a0\u0085x\u2028\u3000": "x",
		"line1\nline2\n":                      "line1\nline2",
	} {
		if got := coolify.Stored(in); got != want {
			t.Errorf("Stored(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHiddenValuesAreNeverWrittenBack(t *testing.T) {
	e := setup(t, nil)
	e.srv.SetEnv(e.app.UUID, coolifytest.Env{Key: "SECRET", Value: coolifytest.Str("s3cr3t"), IsRuntime: true})
	e.srv.SetEnv(e.app.UUID, coolifytest.Env{Key: "ONCE", Value: coolifytest.Str("shown-once"), IsShownOnce: coolifytest.Bool(true)})
	e.srv.AddToken("2|no-sensitive", coolifytest.AbilityRead, coolifytest.AbilityWrite)
	c := newClient(t, e.srv, "2|no-sensitive")
	got, err := c.ListEnvs(context.Background(), coolify.AppRef(e.app.UUID))
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].ValueHidden() || got[0].Value != "" {
		t.Fatalf("got %v, want the value hidden without read:sensitive", got[0])
	}
	// Even with read:sensitive, a shown-once value stays hidden.
	all, err := e.c.ListEnvs(context.Background(), coolify.AppRef(e.app.UUID))
	if err != nil || all[0].ValueHidden() || !all[1].ValueHidden() {
		t.Fatalf("got %v, %v; want SECRET visible and ONCE hidden", all, err)
	}
	e.srv.ResetRequests()
	err = c.UpsertEnvs(context.Background(), coolify.AppRef(e.app.UUID), got)
	wantErr(t, err, coolify.ErrValueHidden)
	if _, err := c.UpdateEnv(context.Background(), coolify.AppRef(e.app.UUID), got[0]); !errors.Is(err, coolify.ErrValueHidden) {
		t.Fatalf("UpdateEnv: got %v, want ErrValueHidden", err)
	}
	if n := len(e.srv.Requests()); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
	if v, _ := e.srv.EnvValue(e.app.UUID, "SECRET", false); v != "s3cr3t" {
		t.Errorf("value now %q, want it untouched", v)
	}
	// With the value supplied again, the write goes through.
	if err := c.UpsertEnvs(context.Background(), coolify.AppRef(e.app.UUID), []coolify.EnvVar{got[0].WithValue("n3w")}); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.srv.EnvValue(e.app.UUID, "SECRET", false); v != "n3w" {
		t.Errorf("value now %q, want n3w", v)
	}
}

func TestUpsertEnvsKeepsEveryValueAndFlag(t *testing.T) {
	e := setup(t, nil)
	ref := coolify.AppRef(e.app.UUID)
	e.srv.SetEnv(e.app.UUID, coolifytest.Env{Key: "A", Value: coolifytest.Str("1"), IsBuildtime: true, IsLiteral: true,
		IsMultiline: coolifytest.Bool(true), Comment: coolifytest.Str("keep me")})
	e.srv.SetEnv(e.app.UUID, coolifytest.Env{Key: "B", Value: coolifytest.Str("untouched"), IsRuntime: true, IsLiteral: true})
	cur, err := e.c.ListEnvs(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	want := []coolify.EnvVar{cur[0].WithValue("2"), coolify.NewEnvVar("C", "new")}
	if err := e.c.UpsertEnvs(context.Background(), ref, want); err != nil {
		t.Fatal(err)
	}
	after, err := e.c.ListEnvs(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 3 {
		t.Fatalf("got %v, want A, B, C", after)
	}
	if !after[0].SameAs(want[0]) {
		t.Errorf("A: got %#v, want %#v (value changed, flags and comment kept)", after[0], want[0])
	}
	if after[0].Comment != "keep me" || !after[0].IsLiteral || !after[0].IsMultiline || after[0].IsRuntime {
		t.Errorf("A lost a flag: %v comment %q", after[0], after[0].Comment)
	}
	if after[1].Value != "untouched" || !after[1].IsLiteral {
		t.Errorf("B: got %v, want it untouched", after[1])
	}
	if c := after[2]; c.Key != "C" || c.Value != "new" || !c.IsRuntime || !c.IsBuildtime {
		t.Errorf("C: got %v, want new runtime+buildtime", c)
	}
	// Coolify made the new variable's preview twin; the bulk write sent one request.
	if _, ok := e.srv.EnvValue(e.app.UUID, "C", true); !ok {
		t.Error("no preview twin for C")
	}
	if n := len(e.srv.RequestsTo("PATCH /applications/{uuid}/envs/bulk")); n != 1 {
		t.Errorf("got %d bulk requests, want 1", n)
	}

	// Services take the same call (no preview scope).
	sref := coolify.ServiceRef(e.svc.UUID)
	if err := e.c.UpsertEnvs(context.Background(), sref, []coolify.EnvVar{{Key: "S", Value: "v", IsLiteral: true}}); err != nil {
		t.Fatal(err)
	}
	s, err := e.c.ListEnvs(context.Background(), sref)
	if err != nil || len(s) != 1 || s[0].Value != "v" || !s[0].IsLiteral {
		t.Fatalf("got %v, %v", s, err)
	}
}

func TestUpsertEnvsRefusesBadBatchesBeforeSending(t *testing.T) {
	e := setup(t, nil)
	ref := coolify.AppRef(e.app.UUID)
	for name, batch := range map[string][]coolify.EnvVar{
		"bad key":          {coolify.NewEnvVar("OK", "1"), coolify.NewEnvVar("1BAD", "2")},
		"space in key":     {coolify.NewEnvVar("A B", "1")},
		"long comment":     {{Key: "K", Value: "v", Comment: strings.Repeat("x", 257)}},
		"key twice":        {coolify.NewEnvVar("K", "1"), coolify.NewEnvVar("K", "2")},
		"long key":         {coolify.NewEnvVar(strings.Repeat("K", 256), "1")},
		"empty key":        {coolify.NewEnvVar("", "1")},
		"unknown ref kind": nil,
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			if batch == nil {
				err = e.c.UpsertEnvs(context.Background(), coolify.ResourceRef{Kind: "database", UUID: "x"}, []coolify.EnvVar{coolify.NewEnvVar("K", "v")})
				if err == nil {
					t.Fatal("got nil error for an unknown resource kind")
				}
				return
			}
			err = e.c.UpsertEnvs(context.Background(), ref, batch)
			wantErr(t, err, coolify.ErrInvalidEnv)
		})
	}
	if n := len(e.srv.Requests()); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
	// The same key in both scopes is two variables, not a duplicate.
	prev := coolify.NewEnvVar("K", "p")
	prev.IsPreview = true
	if err := e.c.UpsertEnvs(context.Background(), ref, []coolify.EnvVar{coolify.NewEnvVar("K", "1"), prev}); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.srv.EnvValue(e.app.UUID, "K", true); v != "p" {
		t.Errorf("preview K = %q, want p", v)
	}
}

func TestCreateUpdateDeleteEnv(t *testing.T) {
	e := setup(t, nil)
	ctx := context.Background()
	ref := coolify.AppRef(e.app.UUID)
	id, err := e.c.CreateEnv(ctx, ref, coolify.NewEnvVar("K", "1"))
	if err != nil || id == "" {
		t.Fatalf("create: %q, %v", id, err)
	}
	_, err = e.c.CreateEnv(ctx, ref, coolify.NewEnvVar("K", "2"))
	wantErr(t, err, coolify.ErrConflict)

	v := coolify.NewEnvVar("K", "3")
	v.IsLiteral = true
	got, err := e.c.UpdateEnv(ctx, ref, v)
	if err != nil {
		t.Fatal(err)
	}
	if got.Value != "3" || !got.IsLiteral || got.UUID != id {
		t.Errorf("update answered %v uuid %q, want K=3 literal with uuid %q", got, got.UUID, id)
	}
	_, err = e.c.UpdateEnv(ctx, ref, coolify.NewEnvVar("MISSING", "x"))
	wantErr(t, err, coolify.ErrNotFound) // PATCH never creates

	if err := e.c.DeleteEnv(ctx, ref, id); err != nil {
		t.Fatal(err)
	}
	wantErr(t, e.c.DeleteEnv(ctx, ref, id), coolify.ErrNotFound)
	if _, ok := e.srv.EnvValue(e.app.UUID, "K", false); ok {
		t.Error("K still there")
	}
	if _, ok := e.srv.EnvValue(e.app.UUID, "K", true); !ok {
		t.Error("the preview twin went too; Coolify deletes only the row named")
	}

	// Services: create answers the whole row (spec says {uuid}); both decode.
	sid, err := e.c.CreateEnv(ctx, coolify.ServiceRef(e.svc.UUID), coolify.NewEnvVar("S", "1"))
	if err != nil || sid == "" {
		t.Fatalf("service create: %q, %v", sid, err)
	}
}

func TestSetImageTag(t *testing.T) {
	e := setup(t, nil)
	ctx := context.Background()
	if err := e.c.SetImageTag(ctx, e.app.UUID, "v2.0.1-rc_1"); err != nil {
		t.Fatal(err)
	}
	if a, _ := e.srv.App(e.app.UUID); a.ImageTag != "v2.0.1-rc_1" {
		t.Errorf("tag now %q", a.ImageTag)
	}
	for _, bad := range []string{"-lead", ".lead", "has space", "a/b", "x:y", strings.Repeat("a", 129)} {
		wantErr(t, e.c.SetImageTag(ctx, e.app.UUID, bad), coolify.ErrInvalidTag)
	}
	if n := len(e.srv.RequestsTo("PATCH /applications/{uuid}")); n != 1 {
		t.Errorf("got %d PATCH requests, want 1 (bad tags are not sent)", n)
	}
	wantErr(t, e.c.SetImageTag(ctx, "nope", "v3"), coolify.ErrNotFound)

	// An empty tag clears it: Coolify takes null and stores null (docs/outside-systems.md,
	// "Applications and the image tag"), so a tag that was null before a run can be put back.
	e.srv.ResetRequests()
	if err := e.c.SetImageTag(ctx, e.app.UUID, ""); err != nil {
		t.Fatal(err)
	}
	reqs := e.srv.RequestsTo("PATCH /applications/{uuid}")
	if len(reqs) != 1 || string(reqs[0].Body) != `{"docker_registry_image_tag":null}` {
		t.Fatalf("got %d PATCH requests, first body %q, want one with a null tag", len(reqs), firstBody(reqs))
	}
	if a, _ := e.srv.App(e.app.UUID); a.ImageTag != "" {
		t.Errorf("tag now %q, want null", a.ImageTag)
	}
	if a, err := e.c.GetApplication(ctx, e.app.UUID); err != nil || a.ImageTag != "" {
		t.Errorf("read back tag %q (%v), want empty", a.ImageTag, err)
	}
}

func firstBody(reqs []coolifytest.Request) string {
	if len(reqs) == 0 {
		return ""
	}
	return string(reqs[0].Body)
}

func TestListAllEnvsKeepsPreviewTwins(t *testing.T) {
	e := setup(t, nil)
	ctx := context.Background()
	ref := coolify.AppRef(e.app.UUID)
	if err := e.c.UpsertEnvs(ctx, ref, []coolify.EnvVar{coolify.NewEnvVar("NEW", "v")}); err != nil {
		t.Fatal(err)
	}
	all, err := e.c.ListAllEnvs(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	var prod, twin int
	for _, x := range all {
		if x.Key == "NEW" && x.IsPreview {
			twin++
		} else if x.Key == "NEW" {
			prod++
		}
	}
	if prod != 1 || twin != 1 {
		t.Fatalf("got %d production and %d preview rows of NEW, want 1 and 1 (Coolify creates the twin)", prod, twin)
	}
	// Deleting the production row leaves the twin (docs/outside-systems.md, "Preview twins");
	// deleting both leaves nothing.
	for _, x := range all {
		if err := e.c.DeleteEnv(ctx, ref, x.UUID); err != nil {
			t.Fatal(err)
		}
	}
	if rows := e.srv.Envs(e.app.UUID); len(rows) != 0 {
		t.Errorf("got %d rows left, want 0", len(rows))
	}
}

func TestNotApplied(t *testing.T) {
	e := setup(t, nil)
	ctx := context.Background()
	err := e.c.SetImageTag(ctx, e.app.UUID, "bad tag")
	if !coolify.NotApplied(err) {
		t.Errorf("NotApplied(%v) = false, want true (refused before sending)", err)
	}
	err = e.c.SetImageTag(ctx, "nope", "v2")
	if !coolify.NotApplied(err) {
		t.Errorf("NotApplied(%v) = false, want true (404)", err)
	}
	e.srv.FailNext(10, coolifytest.Fault{Method: "PATCH", Status: 500})
	err = e.c.SetImageTag(ctx, e.app.UUID, "v2")
	if err == nil || coolify.NotApplied(err) {
		t.Errorf("NotApplied(%v) = true, want false (a 500 is ambiguous)", err)
	}
	bulk422 := &coolify.APIError{Method: "PATCH", Path: "/api/v1/applications/x/envs/bulk", StatusCode: 422}
	if coolify.NotApplied(bulk422) || coolify.NotApplied(nil) {
		t.Error("NotApplied is true for a bulk 422 (earlier items are saved) or nil")
	}
}

func TestAbilitiesProbeWithoutWriting(t *testing.T) {
	e := setup(t, nil)
	ctx := context.Background()
	cases := []struct {
		token     string
		abilities []string
		missing   []string
	}{
		{"10|all", []string{coolifytest.AbilityRead, coolifytest.AbilityWrite, coolifytest.AbilityDeploy, coolifytest.AbilityReadSensitive}, nil},
		{"11|root", []string{coolifytest.AbilityRoot}, nil},
		{"12|read", []string{coolifytest.AbilityRead}, []string{"write", "deploy", "read:sensitive"}},
		{"13|rw", []string{coolifytest.AbilityRead, coolifytest.AbilityWrite}, []string{"deploy", "read:sensitive"}},
		{"14|rwd", []string{coolifytest.AbilityRead, coolifytest.AbilityWrite, coolifytest.AbilityDeploy}, []string{"read:sensitive"}},
		{"15|deploy", []string{coolifytest.AbilityDeploy}, []string{"read", "write"}},
	}
	for _, c := range cases {
		e.srv.AddToken(c.token, c.abilities...)
		cl := newClient(t, e.srv, c.token)
		for _, ref := range []coolify.ResourceRef{coolify.AppRef(e.app.UUID), coolify.ServiceRef(e.svc.UUID)} {
			a, err := cl.Abilities(ctx, ref)
			if err != nil {
				t.Fatalf("%s %s: %v", c.token, ref, err)
			}
			if got := a.Missing(); !slices.Equal(got, c.missing) {
				t.Errorf("%s %s: missing %v, want %v", c.token, ref, got, c.missing)
			}
		}
	}
	for _, r := range e.srv.Requests() {
		if r.Method != http.MethodGet {
			t.Errorf("probe sent %s %s, want GET only", r.Method, r.Path)
		}
	}
	// The answer is kept: a second call sends nothing.
	e.srv.ResetRequests()
	cl := newClient(t, e.srv, "12|read")
	if _, err := cl.Abilities(ctx, coolify.AppRef(e.app.UUID)); err != nil {
		t.Fatal(err)
	}
	n := len(e.srv.Requests())
	if _, err := cl.Abilities(ctx, coolify.AppRef(e.app.UUID)); err != nil {
		t.Fatal(err)
	}
	if m := len(e.srv.Requests()); m != n {
		t.Errorf("second call sent %d requests, want 0 (cached)", m-n)
	}
	// A failure that names no ability is an error, not a verdict.
	e.srv.SetAPIEnabled(false)
	if _, err := newClient(t, e.srv, "10|all").Abilities(ctx, coolify.AppRef(e.app.UUID)); err == nil {
		t.Error("API disabled: got no error")
	}
}

func TestDeployWaitFinished(t *testing.T) {
	e := setup(t, nil)
	ctx := coolify.WithTrace(context.Background(), "run-42", 7)
	if err := e.c.SetImageTag(ctx, e.app.UUID, "v2"); err != nil {
		t.Fatal(err)
	}
	e.srv.SetEnv(e.app.UUID, coolifytest.Env{Key: "K", Value: coolifytest.Str("deployed")})
	res, err := e.c.Deploy(ctx, e.app.UUID, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.DeploymentUUID == "" || res.ResourceUUID != e.app.UUID || !strings.Contains(res.Message, "deployment queued") {
		t.Errorf("got %+v", res)
	}
	d, err := e.c.WaitDeployment(ctx, res.DeploymentUUID, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != coolify.StatusFinished || d.FinishedAt.IsZero() || d.ApplicationName != "api" || d.Commit != "HEAD" {
		t.Errorf("got %+v", d)
	}
	a, _ := e.srv.App(e.app.UUID)
	if a.DeployedImageTag != "v2" || a.DeployedEnv["K"] != "deployed" {
		t.Errorf("fake ran tag %q env %v, want v2 and K=deployed", a.DeployedImageTag, a.DeployedEnv)
	}
	fd, _ := e.srv.Deployment(res.DeploymentUUID)
	if fd.RunID != "run-42" || fd.Fence != "7" {
		t.Errorf("deployment queued by run %q fence %q, want run-42 7", fd.RunID, fd.Fence)
	}
}

// Once the client knows the application's id, its active deployments come from the team's
// active list: exact, with no ended row sent. A client that does not know it yet reads the
// application's newest row to learn it, not a page of rows, which 25 newer ended ones
// (canceled here) would hide an older active one behind.
func TestActiveDeploymentsOnceTheAppIDIsKnown(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := setup(t, []coolifytest.Option{coolifytest.WithClock(clock),
		coolifytest.WithTiming(coolifytest.Timing{RunMin: time.Hour, RunMax: time.Hour})})
	ctx := context.Background()
	fresh := newClient(t, e.srv, e.srv.Token) // knows no application id yet
	if active, err := fresh.ActiveDeployments(ctx, e.app.UUID); err != nil || len(active) != 0 {
		t.Fatalf("no deployment yet: got %+v, %v", active, err)
	}
	first, err := e.c.Deploy(ctx, e.app.UUID, false) // its confirming read shows the id
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Millisecond) // first starts
	for range 25 {
		d, err := e.c.Deploy(ctx, e.app.UUID, true) // queued behind first
		if err != nil {
			t.Fatal(err)
		}
		if err := e.c.CancelDeployment(ctx, d.DeploymentUUID); err != nil {
			t.Fatal(err)
		}
	}
	other := e.srv.AddApplication(coolifytest.Application{Name: "worker", ImageName: "acme/worker", ImageTag: "v1"})
	if _, err := e.c.Deploy(ctx, other.UUID, false); err != nil { // another application's: not ours
		t.Fatal(err)
	}

	e.srv.ResetRequests()
	active, err := e.c.ActiveDeployments(ctx, e.app.UUID)
	if err != nil || len(active) != 1 || active[0].UUID != first.DeploymentUUID || active[0].Status != coolify.StatusInProgress {
		t.Fatalf("got %+v, %v; want only the first deployment, in progress", active, err)
	}
	if n, pages := len(e.srv.RequestsTo("GET /deployments")), len(e.srv.RequestsTo("GET /deployments/applications/{uuid}")); n != 1 || pages != 0 {
		t.Errorf("read GET /deployments %d times and the application's pages %d times, want 1 and 0", n, pages)
	}

	// A client that has not seen the id reads the application's newest row, learns the id
	// from it, and reads the active list, already on its first read.
	for _, read := range []string{"first", "second"} {
		e.srv.ResetRequests()
		active, err = fresh.ActiveDeployments(ctx, e.app.UUID)
		if err != nil || len(active) != 1 || active[0].UUID != first.DeploymentUUID {
			t.Fatalf("%s read of a fresh client: got %+v, %v; want the first deployment behind 25 canceled ones", read, active, err)
		}
		pages := e.srv.RequestsTo("GET /deployments/applications/{uuid}")
		wantPages := map[string]int{"first": 1, "second": 0}[read]
		if len(pages) != wantPages || len(e.srv.RequestsTo("GET /deployments")) != 1 {
			t.Errorf("%s read of a fresh client: %d page reads and %d of GET /deployments, want %d and 1",
				read, len(pages), len(e.srv.RequestsTo("GET /deployments")), wantPages)
		}
		for _, r := range pages {
			if q, _ := url.ParseQuery(r.RawQuery); q.Get("take") != "1" {
				t.Errorf("page read with %q, want the newest row only (take=1)", r.RawQuery)
			}
		}
	}
}

// An application whose only deployment is its newest row needs no second request: that row
// is the answer, and it names the id for the reads after it.
func TestActiveDeploymentsOfAnApplicationWithOneDeployment(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := setup(t, []coolifytest.Option{coolifytest.WithClock(clock),
		coolifytest.WithTiming(coolifytest.Timing{RunMin: time.Hour, RunMax: time.Hour})})
	ctx := context.Background()
	only, err := e.c.Deploy(ctx, e.app.UUID, false)
	if err != nil {
		t.Fatal(err)
	}
	fresh := newClient(t, e.srv, e.srv.Token)
	e.srv.ResetRequests()
	active, err := fresh.ActiveDeployments(ctx, e.app.UUID)
	if err != nil || len(active) != 1 || active[0].UUID != only.DeploymentUUID {
		t.Fatalf("got %+v, %v; want the only deployment", active, err)
	}
	if n := len(e.srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1 (the newest row)", n)
	}
	clock.Advance(2 * time.Hour) // it ends
	e.srv.ResetRequests()
	if active, err := fresh.ActiveDeployments(ctx, e.app.UUID); err != nil || len(active) != 0 {
		t.Fatalf("after its end: got %+v, %v; want none", active, err)
	}
	if n, list := len(e.srv.Requests()), len(e.srv.RequestsTo("GET /deployments")); n != 1 || list != 1 {
		t.Errorf("after its end: %d requests, %d of them GET /deployments; want the active list alone", n, list)
	}
}

// GET /deployments answers a JSON object of rows once a row was written after a newer one
// was created (see coolifytest); the client reads it all the same.
func TestActiveDeploymentsReadTheListAsAnObject(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := setup(t, []coolifytest.Option{coolifytest.WithClock(clock), coolifytest.WithConcurrentBuilds(1),
		coolifytest.WithTiming(coolifytest.Timing{RunMin: 10 * time.Second, RunMax: 10 * time.Second})})
	ctx := context.Background()
	deploy := func(app string) string {
		res, err := e.c.Deploy(ctx, app, false)
		if err != nil {
			t.Fatal(err)
		}
		return res.DeploymentUUID
	}
	b := e.srv.AddApplication(coolifytest.Application{Name: "b", ImageName: "acme/b", ImageTag: "v1"})
	c := e.srv.AddApplication(coolifytest.Application{Name: "c", ImageName: "acme/c", ImageTag: "v1"})
	deploy(e.app.UUID)
	clock.Advance(time.Millisecond)
	onB := deploy(b.UUID) // queued: one build at a time
	clock.Advance(time.Second)
	onC := deploy(c.UUID)
	clock.Advance(10 * time.Second) // the first ends and b's starts, after c's was queued
	for app, want := range map[string]string{b.UUID: onB, c.UUID: onC} {
		active, err := e.c.ActiveDeployments(ctx, app)
		if err != nil || len(active) != 1 || active[0].UUID != want {
			t.Errorf("%s: got %+v, %v; want %s", app, active, err, want)
		}
	}
	if active, err := e.c.ActiveDeployments(ctx, e.app.UUID); err != nil || len(active) != 0 {
		t.Errorf("ended: got %+v, %v; want none", active, err)
	}
}

func TestDeployDeduplicatedIsNeverReportedAsStarted(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := setup(t, []coolifytest.Option{coolifytest.WithClock(clock),
		coolifytest.WithTiming(coolifytest.Timing{Queued: time.Second, RunMin: time.Minute, RunMax: time.Minute})})
	ctx := context.Background()
	first, err := e.c.Deploy(ctx, e.app.UUID, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.c.Deploy(ctx, e.app.UUID, false) // queued
	wantErr(t, err, coolify.ErrDeployDeduplicated)
	clock.Advance(2 * time.Second)
	if d, _ := e.srv.Deployment(first.DeploymentUUID); d.Status != "in_progress" {
		t.Fatalf("first is %q, want in_progress", d.Status)
	}
	_, err = e.c.Deploy(ctx, e.app.UUID, false) // in progress
	wantErr(t, err, coolify.ErrDeployDeduplicated)
	_, err = e.c.Restart(ctx, e.app.UUID)
	wantErr(t, err, coolify.ErrDeployDeduplicated)
	if n := len(e.srv.Deployments(e.app.UUID)); n != 1 {
		t.Fatalf("fake has %d deployments, want 1", n)
	}
	// The dropped requests were answered with uuids the fake never stored.
	for _, r := range e.srv.RequestsTo("POST /deploy")[1:] {
		if _, ok := e.srv.Deployment(r.DeploymentUUID); ok || r.DeploymentUUID == "" {
			t.Errorf("dropped deploy answered %q, want a uuid that was never stored", r.DeploymentUUID)
		}
	}
	active, err := e.c.ActiveDeployments(ctx, e.app.UUID)
	if err != nil || len(active) != 1 || active[0].UUID != first.DeploymentUUID || active[0].Status != coolify.StatusInProgress {
		t.Fatalf("active: got %+v, %v; want the first deployment", active, err)
	}
	// force bypasses the dedup: a second row, queued behind the first.
	forced, err := e.c.Deploy(ctx, e.app.UUID, true)
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.c.GetDeployment(ctx, forced.DeploymentUUID)
	if err != nil || d.Status != coolify.StatusQueued || !d.ForceRebuild {
		t.Fatalf("forced: got %+v, %v; want queued force_rebuild", d, err)
	}
	n, list, err := e.c.ListDeployments(ctx, e.app.UUID, 0, 10)
	if err != nil || n != 2 || list[0].UUID != forced.DeploymentUUID {
		t.Fatalf("list: got %d %+v %v, want 2 newest first", n, list, err)
	}
}

func TestStartOnFullQueueAnswersAGhost(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := setup(t, []coolifytest.Option{coolifytest.WithClock(clock), coolifytest.WithQueueLimit(1, 30*time.Second),
		coolifytest.WithTiming(coolifytest.Timing{Queued: time.Hour, RunMin: time.Minute, RunMax: time.Minute})})
	other := e.srv.AddApplication(coolifytest.Application{Name: "worker", ImageName: "acme/worker", ImageTag: "v1"})
	ctx := context.Background()
	if _, err := e.c.Deploy(ctx, other.UUID, false); err != nil {
		t.Fatal(err)
	}
	// /deploy checks the queue limit: 429 with a Retry-After beyond the budget fails at once.
	_, err := e.c.Deploy(ctx, e.app.UUID, false)
	wantErr(t, err, coolify.ErrRateLimited)
	var ae *coolify.APIError
	if !errors.As(err, &ae) || ae.RetryAfter != 30*time.Second || !strings.Contains(ae.Message, "queue is full") {
		t.Fatalf("got %v, want 429 queue full with Retry-After 30s", err)
	}
	// /start does not: it answers 200 with a uuid that was never stored.
	_, err = e.c.Start(ctx, e.app.UUID, false)
	wantErr(t, err, coolify.ErrDeployDeduplicated)
	if !strings.Contains(err.Error(), "never stored") {
		t.Errorf("got %v, want it to say the uuid was never stored", err)
	}
	if n := len(e.srv.Deployments(e.app.UUID)); n != 0 {
		t.Errorf("fake has %d deployments of the app, want 0", n)
	}
}

func TestWaitDeploymentOutcomes(t *testing.T) {
	ctx := context.Background()
	t.Run("failed", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.SetDeployOutcome(e.app.UUID, coolifytest.Fail)
		res, err := e.c.Deploy(ctx, e.app.UUID, false)
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.c.WaitDeployment(ctx, res.DeploymentUUID, 10*time.Second)
		wantErr(t, err, coolify.ErrDeploymentFailed)
		if d == nil || d.Status != coolify.StatusFailed {
			t.Errorf("got %+v", d)
		}
	})
	t.Run("unhealthy with health check fails, old container kept", func(t *testing.T) {
		e := setup(t, nil)
		if err := e.c.SetImageTag(ctx, e.app.UUID, "v2"); err != nil {
			t.Fatal(err)
		}
		e.srv.SetAppHealthy(e.app.UUID, false)
		a, err := e.c.GetApplication(ctx, e.app.UUID)
		if err != nil || a.Status != "running:unhealthy" || a.Healthy() || !a.Running() {
			t.Fatalf("got %q, %v; want running:unhealthy", a.Status, err)
		}
		res, err := e.c.Deploy(ctx, e.app.UUID, false)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.c.WaitDeployment(ctx, res.DeploymentUUID, 10*time.Second)
		wantErr(t, err, coolify.ErrDeploymentFailed)
		if a, _ := e.srv.App(e.app.UUID); a.DeployedImageTag != "v1" {
			t.Errorf("running tag %q, want v1 kept", a.DeployedImageTag)
		}
	})
	t.Run("hung deployment is cancelled at the deadline", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.SetDeployOutcome(e.app.UUID, coolifytest.Hang)
		res, err := e.c.Deploy(ctx, e.app.UUID, false)
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.c.WaitDeployment(ctx, res.DeploymentUUID, 150*time.Millisecond)
		wantErr(t, err, coolify.ErrDeploymentTimeout)
		if d == nil || d.Status != coolify.StatusCancelledByUser {
			t.Errorf("got %+v, want the deployment as cancelled", d)
		}
		if fd, _ := e.srv.Deployment(res.DeploymentUUID); fd.Status != "cancelled-by-user" {
			t.Errorf("fake says %q, want cancelled-by-user", fd.Status)
		}
		if n := len(e.srv.RequestsTo("POST /deployments/{uuid}/cancel")); n != 1 {
			t.Errorf("got %d cancels, want 1", n)
		}
	})
	t.Run("stuck in queue is cancelled too", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.SetDeployOutcome(e.app.UUID, coolifytest.StuckQueued)
		res, err := e.c.Deploy(ctx, e.app.UUID, false)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.c.WaitDeployment(ctx, res.DeploymentUUID, 100*time.Millisecond)
		wantErr(t, err, coolify.ErrDeploymentTimeout)
	})
	t.Run("cancelled by someone else", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.SetDeployOutcome(e.app.UUID, coolifytest.Hang)
		res, err := e.c.Deploy(ctx, e.app.UUID, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.c.CancelDeployment(ctx, res.DeploymentUUID); err != nil {
			t.Fatal(err)
		}
		_, err = e.c.WaitDeployment(ctx, res.DeploymentUUID, 0)
		wantErr(t, err, coolify.ErrDeploymentCancelled)
		wantErr(t, e.c.CancelDeployment(ctx, res.DeploymentUUID), coolify.ErrBadRequest)
	})
	t.Run("unknown deployment ends the wait", func(t *testing.T) {
		e := setup(t, nil)
		_, err := e.c.WaitDeployment(ctx, "ghost", time.Minute)
		wantErr(t, err, coolify.ErrNotFound)
	})
	t.Run("transient errors while polling are ridden out", func(t *testing.T) {
		e := setup(t, nil)
		res, err := e.c.Deploy(ctx, e.app.UUID, false)
		if err != nil {
			t.Fatal(err)
		}
		// More 502s than one call's budget: the wait keeps polling.
		e.srv.FailNext(6, coolifytest.Fault{Method: "GET", Route: "/deployments/{uuid}", Status: http.StatusBadGateway})
		d, err := e.c.WaitDeployment(ctx, res.DeploymentUUID, 10*time.Second)
		if err != nil || d.Status != coolify.StatusFinished {
			t.Fatalf("got %+v, %v; want finished", d, err)
		}
	})
}

func TestRestartAndQueueOrder(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := setup(t, []coolifytest.Option{coolifytest.WithClock(clock), coolifytest.WithConcurrentBuilds(1),
		coolifytest.WithTiming(coolifytest.Timing{RunMin: 10 * time.Second, RunMax: 10 * time.Second})})
	ctx := context.Background()
	other := e.srv.AddApplication(coolifytest.Application{Name: "worker", ImageName: "acme/worker", ImageTag: "v1"})
	r1, err := e.c.Restart(ctx, e.app.UUID)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := e.c.Deploy(ctx, other.UUID, false)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	d1, _ := e.c.GetDeployment(ctx, r1.DeploymentUUID)
	d2, _ := e.c.GetDeployment(ctx, r2.DeploymentUUID)
	if d1.Status != coolify.StatusInProgress || d2.Status != coolify.StatusQueued {
		t.Fatalf("got %s/%s, want in_progress/queued (one concurrent build)", d1.Status, d2.Status)
	}
	// Image apps restart with a normal deployment (restart_only is for git apps).
	if d1.RestartOnly {
		t.Error("restart_only set for an image app")
	}
	clock.Advance(10 * time.Second)
	d1, _ = e.c.GetDeployment(ctx, r1.DeploymentUUID)
	d2, _ = e.c.GetDeployment(ctx, r2.DeploymentUUID)
	if d1.Status != coolify.StatusFinished || d2.Status != coolify.StatusInProgress {
		t.Fatalf("got %s/%s, want finished/in_progress", d1.Status, d2.Status)
	}
	active, err := e.c.ActiveDeployments(ctx, e.app.UUID)
	if err != nil || len(active) != 0 {
		t.Fatalf("got %+v, %v; want none active for the first app", active, err)
	}
}

func TestServices(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := setup(t, []coolifytest.Option{coolifytest.WithClock(clock),
		coolifytest.WithTiming(coolifytest.Timing{Queued: time.Second, RunMin: 5 * time.Second, RunMax: 5 * time.Second})})
	ctx := context.Background()
	s, err := e.c.GetService(ctx, e.svc.UUID)
	if err != nil || s.Name != "search" || s.ServiceType != "meilisearch" || !s.Running() {
		t.Fatalf("got %+v, %v", s, err)
	}
	msg, err := e.c.DeployService(ctx, e.svc.UUID)
	if err != nil || !strings.Contains(msg, "started") {
		t.Fatalf("got %q, %v", msg, err)
	}
	if s, _ := e.c.GetService(ctx, e.svc.UUID); s.Status != "running:healthy" {
		t.Errorf("got %q, want running:healthy (as before) while the start is queued", s.Status)
	}
	clock.Advance(time.Second)
	if s, _ := e.c.GetService(ctx, e.svc.UUID); s.Status != "starting:unhealthy" {
		t.Errorf("got %q, want starting:unhealthy while the job runs", s.Status)
	}
	clock.Advance(5 * time.Second)
	if s, _ := e.c.GetService(ctx, e.svc.UUID); s.Status != "running:healthy" {
		t.Errorf("got %q, want running:healthy once started", s.Status)
	}
	if _, err := e.c.RestartService(ctx, e.svc.UUID, true); err != nil {
		t.Fatal(err)
	}
	if s, _ := e.c.GetService(ctx, e.svc.UUID); s.Status != "running:healthy" {
		t.Errorf("got %q, want running:healthy (as before) while the restart is queued", s.Status)
	}
	if _, err := e.c.RestartService(ctx, e.svc.UUID, false); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.srv.ServiceState(e.svc.UUID); st.Restarts != 3 {
		t.Errorf("got %d restarts, want 3", st.Restarts)
	}
	_, err = e.c.GetService(ctx, "nope")
	wantErr(t, err, coolify.ErrNotFound)
	_, err = e.c.Deploy(ctx, e.svc.UUID, false)
	wantErr(t, err, coolify.ErrUnexpectedResponse) // a service has no deployment uuid
}

func TestAuthAndAbilities(t *testing.T) {
	e := setup(t, nil)
	ctx := context.Background()
	_, err := newClient(t, e.srv, "9|unknown").GetApplication(ctx, e.app.UUID)
	wantErr(t, err, coolify.ErrUnauthorized)

	e.srv.AddToken("3|read-only", coolifytest.AbilityRead)
	ro := newClient(t, e.srv, "3|read-only")
	if _, err := ro.GetApplication(ctx, e.app.UUID); err != nil {
		t.Fatal(err)
	}
	_, err = ro.Deploy(ctx, e.app.UUID, false)
	wantErr(t, err, coolify.ErrForbidden)
	var ae *coolify.APIError
	if !errors.As(err, &ae) || ae.MissingPermission() != "deploy" {
		t.Fatalf("got %v, want it to name the deploy ability", err)
	}
	err = ro.SetImageTag(ctx, e.app.UUID, "v9")
	if !errors.As(err, &ae) || ae.MissingPermission() != "write" {
		t.Fatalf("got %v, want it to name the write ability", err)
	}

	e.srv.AddToken("4|write-only", coolifytest.AbilityWrite)
	_, err = newClient(t, e.srv, "4|write-only").GetApplication(ctx, e.app.UUID)
	if !errors.As(err, &ae) || ae.MissingPermission() != "read" {
		t.Fatalf("got %v, want read missing (write does not imply read)", err)
	}

	e.srv.AddToken("5|root", coolifytest.AbilityRoot)
	if _, err := newClient(t, e.srv, "5|root").Deploy(ctx, e.app.UUID, false); err != nil {
		t.Fatalf("root: %v", err)
	}

	e.srv.SetAPIEnabled(false)
	_, err = e.c.GetApplication(ctx, e.app.UUID)
	if !errors.As(err, &ae) || ae.StatusCode != 403 || ae.Message != "API is disabled." || ae.MissingPermission() != "" {
		t.Fatalf("got %v, want 403 API is disabled", err)
	}
	if err := e.c.Health(ctx); err != nil {
		t.Errorf("health needs no API: %v", err)
	}
}

func TestRateLimitBeyondBudgetFailsFast(t *testing.T) {
	clock := coolifytest.NewManualClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := setup(t, []coolifytest.Option{coolifytest.WithClock(clock), coolifytest.WithRateLimit(3, time.Minute)})
	ctx := context.Background()
	for range 3 {
		if _, err := e.c.GetApplication(ctx, e.app.UUID); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.c.GetApplication(ctx, e.app.UUID)
	wantErr(t, err, coolify.ErrRateLimited)
	var ae *coolify.APIError
	if !errors.As(err, &ae) || ae.RetryAfter != time.Minute {
		t.Fatalf("got %v, want Retry-After 60s", err)
	}
	clock.Advance(time.Minute)
	if _, err := e.c.GetApplication(ctx, e.app.UUID); err != nil {
		t.Fatalf("after the window: %v", err)
	}
}

func TestRetryAfterIsHonored(t *testing.T) {
	e := setup(t, nil)
	e.srv.FailNext(1, coolifytest.Fault{Route: "/applications/{uuid}", Status: http.StatusTooManyRequests, RetryAfter: time.Second})
	start := time.Now()
	if _, err := e.c.GetApplication(context.Background(), e.app.UUID); err != nil {
		t.Fatal(err)
	}
	reqs := e.srv.RequestsTo("GET /applications/{uuid}")
	if len(reqs) != 2 || reqs[0].Status != 429 || reqs[1].Status != 200 {
		t.Fatalf("got %d attempts, want 429 then 200", len(reqs))
	}
	if gap := reqs[1].Start.Sub(reqs[0].End); gap < 900*time.Millisecond {
		t.Errorf("retried after %s, want about the 1s Retry-After (total %s)", gap, time.Since(start))
	}
}

func TestRetriesAndTheirLimits(t *testing.T) {
	ctx := context.Background()
	t.Run("5xx on a read is retried", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.FailNext(2, coolifytest.Fault{Method: "GET", Route: "/applications/{uuid}", Status: http.StatusInternalServerError})
		if _, err := e.c.GetApplication(ctx, e.app.UUID); err != nil {
			t.Fatal(err)
		}
		if n := len(e.srv.RequestsTo("GET /applications/{uuid}")); n != 3 {
			t.Errorf("got %d attempts, want 3", n)
		}
	})
	t.Run("the budget ends in a typed error", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.FailNext(10, coolifytest.Fault{Status: http.StatusBadGateway, Message: "upstream down"})
		_, err := e.c.ListEnvs(ctx, coolify.AppRef(e.app.UUID))
		wantErr(t, err, coolify.ErrServer)
		var ae *coolify.APIError
		if !errors.As(err, &ae) || ae.StatusCode != 502 || ae.Message != "upstream down" {
			t.Fatalf("got %v", err)
		}
		if n := len(e.srv.Requests()); n != fastRetry.MaxRetries+1 {
			t.Errorf("got %d attempts, want %d", n, fastRetry.MaxRetries+1)
		}
	})
	t.Run("a dropped connection on a read is retried", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.FailNext(1, coolifytest.Fault{Status: coolifytest.DropConnection})
		if _, err := e.c.GetService(ctx, e.svc.UUID); err != nil {
			t.Fatal(err)
		}
		reqs := e.srv.Requests()
		if len(reqs) != 2 || reqs[0].Status != 0 || reqs[0].Fault == "" {
			t.Errorf("got %+v, want a dropped attempt then a good one", reqs)
		}
	})
	t.Run("an env write is retried (it carries the full state)", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.FailNext(1, coolifytest.Fault{Route: "/applications/{uuid}/envs/bulk", Status: http.StatusInternalServerError, AfterEffect: true})
		if err := e.c.UpsertEnvs(ctx, coolify.AppRef(e.app.UUID), []coolify.EnvVar{coolify.NewEnvVar("K", "v")}); err != nil {
			t.Fatal(err)
		}
		if v, _ := e.srv.EnvValue(e.app.UUID, "K", false); v != "v" {
			t.Errorf("K = %q", v)
		}
	})
	t.Run("a delete applied before its answer was lost ends on a 404 that still reads as not found", func(t *testing.T) {
		e := setup(t, nil)
		ref := coolify.AppRef(e.app.UUID)
		uuid, err := e.c.CreateEnv(ctx, ref, coolify.NewEnvVar("GONE", "v"))
		if err != nil {
			t.Fatal(err)
		}
		e.srv.FailNext(1, coolifytest.Fault{Method: http.MethodDelete, Route: "/applications/{uuid}/envs/{env_uuid}", Status: http.StatusBadGateway, AfterEffect: true})
		err = e.c.DeleteEnv(ctx, ref, uuid)
		if !errors.Is(err, coolify.ErrNotFound) || !errors.Is(err, outbound.ErrMaybeApplied) || coolify.NotApplied(err) {
			t.Errorf("got %v; want a not-found that says the first attempt may have taken effect", err)
		}
		if _, ok := e.srv.EnvValue(e.app.UUID, "GONE", false); ok {
			t.Error("GONE is still there")
		}
	})
	t.Run("a deploy is not retried after an ambiguous failure", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.SetDeployOutcome(e.app.UUID, coolifytest.Hang)
		e.srv.FailNext(1, coolifytest.Fault{Route: "/deploy", Status: http.StatusInternalServerError})
		_, err := e.c.Deploy(ctx, e.app.UUID, false)
		wantErr(t, err, coolify.ErrServer)
		e.srv.FailNext(1, coolifytest.Fault{Route: "/deploy", Status: coolifytest.DropConnection, AfterEffect: true})
		_, err = e.c.Deploy(ctx, e.app.UUID, false)
		wantErr(t, err, coolify.ErrUnavailable)
		if n := len(e.srv.RequestsTo("POST /deploy")); n != 2 {
			t.Errorf("got %d deploy requests, want 2 (one each, no retries)", n)
		}
		// The lost answer hid a deployment that was queued: the caller finds it this way.
		active, err := e.c.ActiveDeployments(ctx, e.app.UUID)
		if err != nil || len(active) != 1 {
			t.Fatalf("got %+v, %v; want the deployment the lost answer queued", active, err)
		}
	})
	t.Run("a deploy is retried after 503", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.FailNext(1, coolifytest.Fault{Route: "/deploy", Status: http.StatusServiceUnavailable})
		if _, err := e.c.Deploy(ctx, e.app.UUID, false); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a refused connection is retried, then reported", func(t *testing.T) {
		srv := coolifytest.NewServer(t)
		url := srv.URL
		srv.HTTP.Close()
		c := coolify.New(url, srv.Token, coolify.WithRetry(fastRetry))
		_, err := c.Deploy(ctx, "x", false)
		wantErr(t, err, coolify.ErrUnavailable)
		if strings.Contains(err.Error(), "uuid=") {
			t.Errorf("error repeats the URL's query: %v", err)
		}
	})
}

func TestCancellation(t *testing.T) {
	t.Run("during server latency", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.SetLatency(time.Minute, time.Minute)
		// Cancel once the fake holds the request: it is then sitting in its latency. (The
		// client's WroteRequest trace is too early: it fires before the transport flushes its
		// buffer, and a cancel then can close the connection with the request still unsent.)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := e.c.GetApplication(ctx, e.app.UUID)
			done <- err
		}()
		waitFor(t, func() bool { return e.srv.InFlight() == 1 })
		start := time.Now()
		cancel()
		wantErr(t, <-done, context.Canceled)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("returned %s after the cancel", d)
		}
		// The server logs the request once its handler sees the client gone.
		var got []coolifytest.Request
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			got = e.srv.Requests()
			if len(got) == 1 && got[0].Status == 0 && got[0].Fault == "client went away during latency" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 10s the server logged %+v, want one request the client left during latency", got)
			}
		}
	})
	t.Run("with a deadline", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.SetLatency(time.Minute, time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := e.c.Deploy(ctx, e.app.UUID, false)
		wantErr(t, err, context.DeadlineExceeded)
	})
	t.Run("during retry backoff", func(t *testing.T) {
		e := setup(t, nil, coolify.WithRetry(coolify.RetryPolicy{MaxRetries: 5, MinWait: time.Minute, MaxWait: time.Minute, MaxRetryAfter: time.Minute}))
		e.srv.FailNext(1, coolifytest.Fault{Status: http.StatusBadGateway})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := e.c.GetApplication(ctx, e.app.UUID)
			done <- err
		}()
		waitFor(t, func() bool { return len(e.srv.Requests()) == 1 })
		cancel()
		wantErr(t, <-done, context.Canceled)
	})
	t.Run("while waiting for a deployment", func(t *testing.T) {
		e := setup(t, nil)
		e.srv.SetDeployOutcome(e.app.UUID, coolifytest.Hang)
		res, err := e.c.Deploy(context.Background(), e.app.UUID, false)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := e.c.WaitDeployment(ctx, res.DeploymentUUID, time.Hour)
			done <- err
		}()
		waitFor(t, func() bool { return len(e.srv.RequestsTo("GET /deployments")) >= 3 })
		cancel()
		wantErr(t, <-done, context.Canceled)
		// A cancelled wait leaves the deployment alone.
		if d, _ := e.srv.Deployment(res.DeploymentUUID); d.Status != "queued" && d.Status != "in_progress" {
			t.Errorf("deployment is %q, want it still active", d.Status)
		}
		if n := len(e.srv.RequestsTo("POST /deployments/{uuid}/cancel")); n != 0 {
			t.Errorf("got %d cancels, want none", n)
		}
	})
}

// waitFor polls cond (the fake's request log) until it holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTraceHeaders(t *testing.T) {
	e := setup(t, nil)
	e.srv.FailNext(1, coolifytest.Fault{Method: "GET", Status: http.StatusBadGateway})
	ctx := coolify.WithTrace(context.Background(), "prod#1234", 99)
	if _, err := e.c.GetApplication(ctx, e.app.UUID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.SetImageTag(ctx, e.app.UUID, "v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.GetService(context.Background(), e.svc.UUID); err != nil {
		t.Fatal(err)
	}
	reqs := e.srv.Requests()
	if len(reqs) != 4 {
		t.Fatalf("got %d requests, want 4", len(reqs))
	}
	for _, r := range reqs[:3] { // the retry carries them too
		if r.RunID != "prod#1234" || r.Fence != "99" {
			t.Errorf("%s %s: run %q fence %q, want prod#1234 99", r.Method, r.Path, r.RunID, r.Fence)
		}
	}
	if reqs[3].RunID != "" || reqs[3].Fence != "" {
		t.Errorf("untraced request carries run %q fence %q", reqs[3].RunID, reqs[3].Fence)
	}
	for _, r := range reqs {
		if ua := r.Header.Get("User-Agent"); ua != "orchestrator/1.2.3" {
			t.Errorf("User-Agent %q, want orchestrator/1.2.3", ua)
		}
		if r.TokenID != "1" {
			t.Errorf("token id %q, want 1", r.TokenID)
		}
	}
	if run, fence, ok := coolify.TraceFrom(ctx); !ok || run != "prod#1234" || fence != 99 {
		t.Errorf("TraceFrom: %q %d %v", run, fence, ok)
	}
}

func TestMetricsSeeEveryAttempt(t *testing.T) {
	var mu sync.Mutex
	var got []string
	e := setup(t, nil, coolify.WithMetrics(func(system, method, route string, status int, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%s %s %s %d", system, method, route, status))
		if d <= 0 {
			t.Errorf("duration %s", d)
		}
	}))
	e.srv.FailNext(1, coolifytest.Fault{Status: http.StatusServiceUnavailable})
	if _, err := e.c.ListEnvs(context.Background(), coolify.AppRef(e.app.UUID)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"coolify GET /applications/{uuid}/envs 503", "coolify GET /applications/{uuid}/envs 200"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestSecretsStayOutOfLogsAndErrors(t *testing.T) {
	const secret = "hunter2-very-secret"
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := setup(t, nil, coolify.WithLogger(logger))
	ctx := coolify.WithTrace(context.Background(), "r1", 1)
	v := coolify.NewEnvVar("TOKEN", secret)
	e.srv.FailNext(1, coolifytest.Fault{Route: "/applications/{uuid}/envs/bulk", Status: http.StatusBadGateway})
	if err := e.c.UpsertEnvs(ctx, coolify.AppRef(e.app.UUID), []coolify.EnvVar{v}); err != nil {
		t.Fatal(err)
	}
	e.srv.FailNext(1, coolifytest.Fault{Status: http.StatusUnprocessableEntity, Message: "Validation failed."})
	err := e.c.UpsertEnvs(ctx, coolify.AppRef(e.app.UUID), []coolify.EnvVar{v})
	wantErr(t, err, coolify.ErrValidation)
	_, err2 := e.c.UpdateEnv(ctx, coolify.AppRef(e.app.UUID), coolify.NewEnvVar("BAD KEY", secret))
	logger.Info("env", "var", v)
	for _, s := range []string{
		fmt.Sprint(v), fmt.Sprintf("%v %+v %s %q %#v", v, v, v, v, v), fmt.Sprint([]coolify.EnvVar{v}),
		fmt.Sprintf("%+v", struct{ E coolify.EnvVar }{v}), v.String(), v.GoString(),
		err.Error(), err2.Error(), logs.String(),
	} {
		if strings.Contains(s, secret) {
			t.Errorf("secret leaked: %s", s)
		}
	}
	if !strings.Contains(logs.String(), `"route":"/applications/{uuid}/envs/bulk"`) || !strings.Contains(logs.String(), `"run_id":"r1"`) {
		t.Errorf("debug log lacks route/run_id:\n%s", logs.String())
	}
	if !strings.Contains(fmt.Sprint(v), "TOKEN=<redacted>") {
		t.Errorf("got %q, want the key with a redacted value", fmt.Sprint(v))
	}
}

func TestHealthAndBadBaseURL(t *testing.T) {
	e := setup(t, nil)
	if err := e.c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.c.BaseURL(); got != e.srv.URL+"/api/v1" {
		t.Errorf("base %q", got)
	}
	c := coolify.New("::not a url", "t")
	_, err := c.GetApplication(context.Background(), "x")
	wantErr(t, err, coolify.ErrBadBaseURL)
	if c.BaseURL() != "" {
		t.Errorf("base %q for a bad URL", c.BaseURL())
	}
	if got := coolify.New("https://c.example.com/sub/", "t").BaseURL(); got != "https://c.example.com/sub/api/v1" {
		t.Errorf("got %q", got)
	}
}

func TestWaitDeploymentOnACoolifyWithTheCancelBug(t *testing.T) {
	e := setup(t, []coolifytest.Option{coolifytest.WithCancelBug()})
	e.srv.SetDeployOutcome(e.app.UUID, coolifytest.Hang)
	ctx := context.Background()
	res, err := e.c.Deploy(ctx, e.app.UUID, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.c.WaitDeployment(ctx, res.DeploymentUUID, 50*time.Millisecond)
	wantErr(t, err, coolify.ErrDeploymentTimeout)
	wantErr(t, err, coolify.ErrServer) // the cancel's own failure is reported too
	if n := len(e.srv.RequestsTo("POST /deployments/{uuid}/cancel")); n != 1 {
		t.Errorf("got %d cancels, want 1 (a POST is not retried after a 500)", n)
	}
}

// TestLenientFieldsDecodeEscapedStrings pins the lenient fields' two paths: a plain string
// read as is, and one with escapes or invalid UTF-8 decoded as encoding/json does.
func TestLenientFieldsDecodeEscapedStrings(t *testing.T) {
	for _, tc := range []struct {
		name, port, updated string
		wantPort            string
		wantUpdated         time.Time
	}{
		{"plain", `"8080"`, `"2026-08-22 15:22:50"`, "8080", time.Date(2026, 8, 22, 15, 22, 50, 0, time.UTC)},
		{"escaped", `"80\u00380"`, `"2026-08-22T15:22:50.000000Z"`, "8080", time.Date(2026, 8, 22, 15, 22, 50, 0, time.UTC)},
		{"quote inside", `"80\"80"`, `null`, `80"80`, time.Time{}},
		{"invalid utf-8", "\"80\xff\"", `""`, "80\ufffd", time.Time{}},
		{"number", `8080`, `"not a time"`, "8080", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a coolify.Application
			if err := json.Unmarshal([]byte(`{"health_check_port":`+tc.port+`,"updated_at":`+tc.updated+`}`), &a); err != nil {
				t.Fatal(err)
			}
			if a.HealthCheck.Port != tc.wantPort || !a.UpdatedAt.Equal(tc.wantUpdated) {
				t.Errorf("got port %q, updated %v; want %q, %v", a.HealthCheck.Port, a.UpdatedAt, tc.wantPort, tc.wantUpdated)
			}
		})
	}
}
