package infisical_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/testutil"
	"github.com/deploy-orchestrator/orchestrator/secrets"
	"github.com/deploy-orchestrator/orchestrator/secrets/infisical"
	"github.com/deploy-orchestrator/orchestrator/secrets/infisical/infisicaltest"
)

// Fixture: what the tests must never find in a log line or an error.
const (
	clientID     = "identity-ci-deployer"
	clientSecret = "cs-4d3c2b1a-very-secret"
	dbPassword   = "pw-9f8e7d6c5b4a"
	mailKey      = "mk-0a1b2c3d4e5f"
	tokenPrefix  = "fake-infisical-token-"
)

var (
	apiFolder    = infisicaltest.Folder{ProjectID: "proj-1", Environment: "prod", Path: "/api"}
	sharedFolder = infisicaltest.Folder{ProjectID: "proj-1", Environment: "prod", Path: "/shared"}
	commonFolder = infisicaltest.Folder{ProjectID: "proj-1", Environment: "prod", Path: "/common"}
	apiScope     = infisical.Scope{ProjectID: "proj-1", Environment: "prod", Path: "/api"}
)

// fixture is a project whose /api folder has its own secrets, a reference, and two imports
// that overlap with it and with each other.
func fixture(extra ...infisicaltest.Option) []infisicaltest.Option {
	return append([]infisicaltest.Option{
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: clientID, ClientSecret: clientSecret}),
		infisicaltest.WithSecrets(apiFolder, map[string]string{
			"DB_PASSWORD":  dbPassword,
			"DATABASE_URL": "postgres://app:${DB_PASSWORD}@db:5432/app",
			"OVERRIDDEN":   "own",
			"CROSS":        "smtp://${staging.MAIL_HOST}",
		}),
		infisicaltest.WithSecrets(infisicaltest.Folder{ProjectID: "proj-1", Environment: "staging"},
			map[string]string{"MAIL_HOST": "mail.staging"}),
		infisicaltest.WithSecrets(sharedFolder, map[string]string{
			"OVERRIDDEN": "from-shared", "IN_BOTH_IMPORTS": "first", "ONLY_SHARED": "s",
		}),
		infisicaltest.WithSecrets(commonFolder, map[string]string{
			"IN_BOTH_IMPORTS": "second", "MAIL_KEY": mailKey,
		}),
		infisicaltest.WithImport(apiFolder, sharedFolder),
		infisicaltest.WithImport(apiFolder, commonFolder),
	}, extra...)
}

// assertNoSecret fails when text holds a secret value, the client secret or a token.
func assertNoSecret(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range []string{clientSecret, dbPassword, mailKey, tokenPrefix} {
		if strings.Contains(text, s) {
			t.Errorf("%s reveals %q: %s", what, s, text)
		}
	}
}

type env struct {
	srv    *infisicaltest.Server
	client *infisical.Client
	logs   *testutil.SyncBuffer
}

// setup starts the fake and a client logging at debug level into a buffer that is searched
// for secrets when the test ends.
func setup(t *testing.T, c clientSpec, opts ...infisicaltest.Option) env {
	t.Helper()
	srv := infisicaltest.NewServer(t, opts...)
	logs := &testutil.SyncBuffer{}
	retry := infisical.RetryPolicy{MaxRetries: infisical.DefaultRetryPolicy.MaxRetries,
		MinWait: time.Millisecond, MaxWait: 5 * time.Millisecond, MaxRetryAfter: 5 * time.Millisecond}
	if c.retry != nil {
		c.retry(&retry)
	}
	client, err := infisical.New(srv.URL, clientID, cmp.Or(c.secret, clientSecret), append([]infisical.Option{
		infisical.WithVersion("1.2.3"),
		infisical.WithLogger(slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		infisical.WithRetry(retry),
	}, c.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { assertNoSecret(t, "log", logs.String()) })
	return env{srv: srv, client: client, logs: logs}
}

// clientSpec is what a test changes in the client setup makes: another client secret, a
// change to the fast retry policy of the tests, more options.
type clientSpec struct {
	secret string
	retry  func(*infisical.RetryPolicy)
	opts   []infisical.Option
}

func statuses(reqs []infisicaltest.Request, path string) []int {
	var out []int
	for _, r := range reqs {
		if r.Path == path {
			out = append(out, r.Status)
		}
	}
	return out
}

const (
	loginPath = "/api/v1/auth/universal-auth/login"
	listPath  = "/api/v3/secrets/raw"
)

func TestListSecretsExpandsReferencesAndMergesImports(t *testing.T) {
	e := setup(t, clientSpec{}, fixture()...)
	l, err := e.client.ListSecrets(context.Background(), apiScope)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"DB_PASSWORD":     dbPassword,
		"DATABASE_URL":    "postgres://app:" + dbPassword + "@db:5432/app", // reference expanded
		"CROSS":           "smtp://mail.staging",                           // cross-environment reference
		"OVERRIDDEN":      "own",                                           // own secret beats imports
		"IN_BOTH_IMPORTS": "second",                                        // the later import wins
		"ONLY_SHARED":     "s",
		"MAIL_KEY":        mailKey,
	}
	if l.Values.Len() != len(want) {
		t.Errorf("got keys %v, want %d keys", l.Values.Keys(), len(want))
	}
	for k, w := range want {
		if got, ok := l.Values.Get(k); !ok || got != w {
			t.Errorf("%s: got %q (present %v), want %q", k, got, ok, w)
		}
	}
	if len(l.Hidden) != 0 {
		t.Errorf("Hidden = %v, want none", l.Hidden)
	}

	reqs := e.srv.Requests()
	if len(reqs) != 2 || reqs[0].Path != loginPath || reqs[1].Path != listPath {
		t.Fatalf("requests = %+v, want login then list", reqs)
	}
	q, _ := url.ParseQuery(reqs[1].Query)
	for k, v := range map[string]string{
		"workspaceId": "proj-1", "environment": "prod", "secretPath": "/api",
		"expandSecretReferences": "true", "include_imports": "true",
	} {
		if q.Get(k) != v {
			t.Errorf("query %s = %q, want %q", k, q.Get(k), v)
		}
	}
	for _, r := range reqs {
		if r.UserAgent != "orchestrator/1.2.3" {
			t.Errorf("%s User-Agent = %q, want orchestrator/1.2.3", r.Path, r.UserAgent)
		}
		if r.ClientID != clientID {
			t.Errorf("%s made by %q, want %s", r.Path, r.ClientID, clientID)
		}
	}
}

func TestRootPathByDefault(t *testing.T) {
	root := infisicaltest.Folder{ProjectID: "proj-1", Environment: "prod"}
	e := setup(t, clientSpec{}, fixture(infisicaltest.WithSecrets(root, map[string]string{"ROOT": "r"}))...)
	l, err := e.client.ListSecrets(context.Background(), infisical.Scope{ProjectID: "proj-1", Environment: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := l.Values.Get("ROOT"); v != "r" || l.Values.Len() != 1 {
		t.Errorf("root listing = %v, want only ROOT", l.Values)
	}
}

func TestOneLoginForConcurrentCalls(t *testing.T) {
	e := setup(t, clientSpec{}, fixture()...)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if _, err := e.client.ListSecrets(context.Background(), apiScope); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := e.srv.Count(http.MethodPost, loginPath); n != 1 {
		t.Errorf("%d logins, want 1", n)
	}
	if n := e.srv.Count(http.MethodGet, listPath); n != 16 {
		t.Errorf("%d lists, want 16", n)
	}
}

func TestReloginWhenTokenExpired(t *testing.T) {
	e := setup(t, clientSpec{}, fixture()...)
	ctx := context.Background()
	if _, err := e.client.ListSecrets(ctx, apiScope); err != nil {
		t.Fatal(err)
	}
	e.srv.ExpireTokens() // the server now answers 403 TokenError "token expired"
	l, err := e.client.ListSecrets(ctx, apiScope)
	if err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	if v, _ := l.Values.Get("DB_PASSWORD"); v != dbPassword {
		t.Errorf("wrong value after re-login")
	}
	reqs := e.srv.Requests()
	if got, want := fmt.Sprint(statuses(reqs, listPath)), "[200 403 200]"; got != want {
		t.Errorf("list statuses = %s, want %s", got, want)
	}
	if got := e.srv.Count(http.MethodPost, loginPath); got != 2 {
		t.Errorf("%d logins, want 2", got)
	}
	if !strings.Contains(e.logs.String(), "infisical token refused, logging in again") {
		t.Errorf("re-login not logged: %s", e.logs.String())
	}
}

func TestRenewsTokenShortlyBeforeExpiry(t *testing.T) {
	clk := testutil.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts := fixture(infisicaltest.WithClock(clk.Now),
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: clientID, ClientSecret: clientSecret, TokenTTL: 10 * time.Minute}))
	e := setup(t, clientSpec{opts: []infisical.Option{infisical.WithClock(clk.Now)}}, opts...)
	ctx := context.Background()
	list := func() {
		t.Helper()
		if _, err := e.client.ListSecrets(ctx, apiScope); err != nil {
			t.Fatal(err)
		}
	}

	list()
	clk.Add(8 * time.Minute) // well inside the token's life: reuse it
	list()
	if got := e.srv.Count(http.MethodPost, loginPath); got != 1 {
		t.Fatalf("%d logins after 8 of 10 minutes, want 1", got)
	}
	clk.Add(90 * time.Second) // 30 s before expiry: inside the refresh margin
	list()
	if got := e.srv.Count(http.MethodPost, loginPath); got != 2 {
		t.Errorf("%d logins 30 s before expiry, want 2 (renewed before it expired)", got)
	}
	if got, want := fmt.Sprint(statuses(e.srv.Requests(), listPath)), "[200 200 200]"; got != want {
		t.Errorf("list statuses = %s, want %s (no request with an expired token)", got, want)
	}
}

func TestInvalidCredentials(t *testing.T) {
	e := setup(t, clientSpec{secret: "wrong-" + clientSecret}, fixture()...)
	_, err := e.client.ListSecrets(context.Background(), apiScope)
	if !errors.Is(err, infisical.ErrUnauthorized) {
		t.Fatalf("err = %v, want ErrUnauthorized", err)
	}
	var apiErr *infisical.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Message != "Invalid credentials" || apiErr.ReqID == "" {
		t.Errorf("APIError = %+v, want 401 Invalid credentials with a reqId", apiErr)
	}
	for _, want := range []string{clientID, loginPath, "Invalid credentials"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	assertNoSecret(t, "error", err.Error())
	if got := e.srv.Count(http.MethodPost, loginPath); got != 1 {
		t.Errorf("%d login attempts, want 1 (a 401 is not retried)", got)
	}
}

func TestHiddenValueIsAnError(t *testing.T) {
	// CROSS is hidden in the folder itself; MAIL_KEY, hidden in an import, is left out of the
	// list (see TestUnreadableImportedSecretIsDropped). Nothing the identity may read
	// references them: that would make the list a 403 (TestReferenceToUnreadableSecretIsForbidden).
	opts := fixture(infisicaltest.WithIdentity(infisicaltest.Identity{
		ClientID: clientID, ClientSecret: clientSecret, HiddenKeys: []string{"CROSS", "MAIL_KEY"},
	}))
	e := setup(t, clientSpec{}, opts...)
	src := e.client.Source(apiScope)
	ctx := context.Background()

	_, err := src.Fetch(ctx, []string{"OVERRIDDEN", "CROSS"})
	var hv *infisical.HiddenValueError
	if !errors.As(err, &hv) || !errors.Is(err, infisical.ErrHiddenValue) {
		t.Fatalf("err = %v, want *HiddenValueError", err)
	}
	if len(hv.Keys) != 1 || hv.Keys[0] != "CROSS" {
		t.Errorf("hidden keys = %v, want [CROSS]", hv.Keys)
	}
	if !strings.Contains(err.Error(), "CROSS") || !strings.Contains(err.Error(), `"/api"`) {
		t.Errorf("error %q does not name the key and the scope", err)
	}

	// A hidden key nobody asks for does not fail the fetch.
	got, err := src.Fetch(ctx, []string{"OVERRIDDEN", "DB_PASSWORD"})
	if err != nil {
		t.Fatalf("fetch of visible keys: %v", err)
	}
	if v, _ := got.Get("OVERRIDDEN"); v != "own" {
		t.Errorf("OVERRIDDEN = %q, want own", v)
	}

	l, err := e.client.ListSecrets(ctx, apiScope)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(l.Hidden, ","); got != "CROSS" {
		t.Errorf("Hidden = %s, want CROSS", got)
	}
	if _, ok := l.Values.Get("CROSS"); ok {
		t.Errorf("a hidden value is in Values")
	}
}

// Infisical refuses the whole list (403 ForbiddenRequestError "Failed to expand one or more
// secret references") when a secret of the folder references one whose value the identity may
// not read. The client then reads the keys asked for one by one: the others resolve, and the
// referencing key fails with the server's refusal (ErrForbidden), naming the secrets involved
// and never the value; no 403 makes it log in again.
func TestReferenceToUnreadableSecretIsForbidden(t *testing.T) {
	opts := fixture(infisicaltest.WithIdentity(infisicaltest.Identity{
		ClientID: clientID, ClientSecret: clientSecret, HiddenKeys: []string{"MAIL_HOST"}, // CROSS references it
	}))
	e := setup(t, clientSpec{}, opts...)
	ctx := context.Background()
	got, err := e.client.Source(apiScope).Fetch(ctx, []string{"OVERRIDDEN", "DATABASE_URL", "IN_BOTH_IMPORTS"})
	if err != nil {
		t.Fatalf("Fetch of keys that reference nothing unreadable: %v", err)
	}
	for k, want := range map[string]string{"OVERRIDDEN": "own", "DATABASE_URL": "postgres://app:" + dbPassword + "@db:5432/app", "IN_BOTH_IMPORTS": "second"} {
		if v, _ := got.Get(k); v != want {
			t.Errorf("%s = %q, want the folder's value (own wins, then the last import)", k, v)
		}
	}

	_, err = e.client.Source(apiScope).Fetch(ctx, []string{"CROSS", "OVERRIDDEN"})
	var apiErr *infisical.APIError
	if !errors.Is(err, infisical.ErrForbidden) || errors.Is(err, infisical.ErrUnauthorized) ||
		!errors.As(err, &apiErr) || apiErr.StatusCode != 403 || apiErr.Code != "ForbiddenError" {
		t.Fatalf("err = %v, want ErrForbidden from a 403 ForbiddenError", err)
	}
	msg := err.Error()
	for _, want := range []string{"'MAIL_HOST'", "'CROSS'", `"/api"`, "read secret CROSS"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "mail.staging") {
		t.Errorf("error shows the value the identity may not read: %s", msg)
	}
	assertNoSecret(t, "error", msg)
	if m, g := e.srv.Count(http.MethodGet, listPath), getCount(e.srv); m != 2 || g != 5 {
		t.Errorf("%d lists and %d single reads, want 2 and 5 (one list per Fetch, one read per key)", m, g)
	}
	if n := e.srv.Count(http.MethodPost, loginPath); n != 1 {
		t.Errorf("%d logins, want 1 (a 403 other than TokenError is final)", n)
	}
}

// getCount counts the reads of one secret by name.
func getCount(srv *infisicaltest.Server) int {
	n := 0
	for _, r := range srv.Requests() {
		if r.Method == http.MethodGet && strings.HasPrefix(r.Path, listPath+"/") {
			n++
		}
	}
	return n
}

// Releases that check read-value permission on the list refuse it whole when the folder holds
// a secret the identity may see but not read. The keys asked for are then read one by one: the
// readable ones resolve (the folder's own, imported, with references expanded), the unreadable
// one is reported hidden, an absent one missing, and no value shows in the error or the log.
func TestListRefusedForUnreadableSecret(t *testing.T) {
	opts := fixture(infisicaltest.WithListRefusingUnreadable(), infisicaltest.WithIdentity(infisicaltest.Identity{
		ClientID: clientID, ClientSecret: clientSecret, HiddenKeys: []string{"OVERRIDDEN"},
	}))
	e := setup(t, clientSpec{}, opts...)
	ctx := context.Background()
	if _, err := e.client.ListSecrets(ctx, apiScope); !errors.Is(err, infisical.ErrForbidden) {
		t.Fatalf("ListSecrets = %v, want the server's 403", err)
	}
	got, err := e.client.Source(apiScope).Fetch(ctx, []string{"DATABASE_URL", "OVERRIDDEN", "MAIL_KEY", "NOPE", "OVERRIDDEN"})
	var hv *infisical.HiddenValueError
	var me *secrets.MissingError
	if !errors.As(err, &hv) || !errors.As(err, &me) || errors.Is(err, infisical.ErrForbidden) {
		t.Fatalf("Fetch = %v, %v; want OVERRIDDEN hidden and NOPE missing, nothing else", got, err)
	}
	if strings.Join(hv.Keys, ",") != "OVERRIDDEN" || strings.Join(me.Keys, ",") != "NOPE" {
		t.Errorf("hidden %v, missing %v; want [OVERRIDDEN] and [NOPE]", hv.Keys, me.Keys)
	}
	assertNoSecret(t, "error", err.Error())
	if strings.Contains(err.Error(), "own") {
		t.Errorf("error shows the hidden value: %s", err)
	}

	got, err = e.client.Source(apiScope).Fetch(ctx, []string{"DATABASE_URL", "MAIL_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := got.Get("DATABASE_URL"); v != "postgres://app:"+dbPassword+"@db:5432/app" {
		t.Errorf("DATABASE_URL is not the expanded value")
	}
	if v, _ := got.Get("MAIL_KEY"); v != mailKey {
		t.Errorf("MAIL_KEY (imported) is not the imported value")
	}
	if g := getCount(e.srv); g != 6 {
		t.Errorf("%d single reads, want 6 (each distinct key asked, once per Fetch)", g)
	}
}

// An imported secret whose references the identity may not read comes back unexpanded (the
// server drops the refusal for imports): its references are left, so it is unresolved.
func TestImportReferencingUnreadableSecretIsUnresolved(t *testing.T) {
	const smtpPass = "sp-5e6f7a8b9c"
	opts := fixture(
		infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: clientID, ClientSecret: clientSecret, HiddenKeys: []string{"SMTP_PASS"}}),
		infisicaltest.WithSecrets(infisicaltest.Folder{ProjectID: "proj-1", Environment: "staging"}, map[string]string{"SMTP_PASS": smtpPass}),
		infisicaltest.WithSecrets(commonFolder, map[string]string{"MAIL_URL": "smtp://u:${staging.SMTP_PASS}@${staging.MAIL_HOST}"}),
	)
	e := setup(t, clientSpec{}, opts...)
	got, err := e.client.Source(apiScope).Fetch(context.Background(), []string{"MAIL_URL", "DB_PASSWORD"})
	if !errors.Is(err, infisical.ErrUnresolvedReference) {
		t.Fatalf("Fetch = %v, %v; want ErrUnresolvedReference for MAIL_URL", got, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "MAIL_URL") || !strings.Contains(msg, "${staging.SMTP_PASS}") ||
		strings.Contains(msg, smtpPass) || strings.Contains(msg, "smtp://") {
		t.Errorf("error = %q, want MAIL_URL and ${staging.SMTP_PASS} named, no value", msg)
	}
}

// Infisical drops an imported secret whose value the identity may not read (fnSecretsV2FromImports
// filters them with hasSecretAccess when values are asked for), rather than returning it
// hidden: the key is then missing, or another import's readable copy wins.
func TestUnreadableImportedSecretIsDropped(t *testing.T) {
	opts := fixture(infisicaltest.WithIdentity(infisicaltest.Identity{
		ClientID: clientID, ClientSecret: clientSecret, HiddenFolders: []infisicaltest.Folder{commonFolder},
	}))
	e := setup(t, clientSpec{}, opts...)
	src := e.client.Source(apiScope)
	ctx := context.Background()

	// IN_BOTH_IMPORTS: /common (the later import) is unreadable, so /shared's copy wins.
	got, err := src.Fetch(ctx, []string{"IN_BOTH_IMPORTS", "ONLY_SHARED"})
	if err != nil {
		t.Fatalf("Fetch: %v, want /shared's readable copy", err)
	}
	if v, _ := got.Get("IN_BOTH_IMPORTS"); v != "first" {
		t.Errorf("IN_BOTH_IMPORTS = %q, want first (from /shared)", v)
	}

	// MAIL_KEY is only in /common: missing, not hidden.
	_, err = src.Fetch(ctx, []string{"MAIL_KEY"})
	var me *secrets.MissingError
	if !errors.As(err, &me) || errors.Is(err, infisical.ErrHiddenValue) || len(me.Keys) != 1 || me.Keys[0] != "MAIL_KEY" {
		t.Errorf("err = %v, want MAIL_KEY missing (and not hidden)", err)
	}
	l, err := e.client.ListSecrets(ctx, apiScope)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Hidden) != 0 {
		t.Errorf("Hidden = %v, want none: unreadable imports are dropped", l.Hidden)
	}
}

func TestAllValuesHidden(t *testing.T) {
	opts := fixture(infisicaltest.WithIdentity(infisicaltest.Identity{ClientID: clientID, ClientSecret: clientSecret, HideValues: true}))
	e := setup(t, clientSpec{}, opts...)
	_, err := e.client.Source(apiScope).Fetch(context.Background(), []string{"DATABASE_URL", "NOPE"})
	if !errors.Is(err, infisical.ErrHiddenValue) || !errors.Is(err, secrets.ErrMissing) {
		t.Fatalf("err = %v, want both ErrHiddenValue (DATABASE_URL) and ErrMissing (NOPE)", err)
	}
	if strings.Contains(err.Error(), infisicaltest.HiddenValue) {
		t.Errorf("error shows the placeholder as if it were a value: %s", err)
	}
}

func TestMissingKey(t *testing.T) {
	e := setup(t, clientSpec{}, fixture()...)
	_, err := e.client.Source(apiScope).Fetch(context.Background(), []string{"DB_PASSWORD", "NOPE"})
	var me *secrets.MissingError
	if !errors.As(err, &me) {
		t.Fatalf("err = %v, want *secrets.MissingError", err)
	}
	if len(me.Keys) != 1 || me.Keys[0] != "NOPE" {
		t.Errorf("missing = %v, want [NOPE]", me.Keys)
	}
	if want := `infisical project "proj-1" environment "prod" path "/api": key NOPE not found`; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

// A reference Infisical could not resolve stays in the value as written ("when the referenced
// secret does not exist, leave the literal ${REF} untouched"); the client must not hand such a
// value on as if it were the secret.
func TestUnresolvedReferenceIsAnError(t *testing.T) {
	e := setup(t, clientSpec{}, fixture(infisicaltest.WithSecrets(apiFolder, map[string]string{
		"BROKEN_URL": "postgres://app:${prod.db.PASSWORD}@db/app", // no folder /db in prod
		"SELF":       "x${SELF}",                                  // a cycle
		// Not Infisical's reference syntax, so never expanded: a legitimate value.
		"SHELL": "echo ${HOME:-/root} ${not a ref} $PATH",
	}))...)
	src := e.client.Source(apiScope)
	ctx := context.Background()

	_, err := src.Fetch(ctx, []string{"BROKEN_URL", "DB_PASSWORD", "SELF"})
	if err == nil {
		t.Fatal("Fetch of values holding unresolved references succeeded, want an error")
	}
	var ue *infisical.UnresolvedReferenceError
	if !errors.As(err, &ue) || !errors.Is(err, infisical.ErrUnresolvedReference) {
		t.Fatalf("err = %v, want *UnresolvedReferenceError", err)
	}
	if got := fmt.Sprint(ue.Refs); got != "map[BROKEN_URL:[prod.db.PASSWORD] SELF:[SELF]]" {
		t.Errorf("Refs = %s, want BROKEN_URL: prod.db.PASSWORD and SELF: SELF", got)
	}
	if errors.Is(err, secrets.ErrMissing) {
		t.Errorf("err = %v, also ErrMissing: nothing asked for is absent", err)
	}
	msg := err.Error()
	for _, want := range []string{"BROKEN_URL", "${prod.db.PASSWORD}", "SELF", "${SELF}", `"/api"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	for _, part := range []string{"postgres", "app:", "@db/app", "xx"} {
		if strings.Contains(msg, part) {
			t.Errorf("error %q shows part of a value (%q)", msg, part)
		}
	}
	assertNoSecret(t, "error", msg)

	// Keys without one are served, and ${...} outside the reference syntax is a value.
	got, err := src.Fetch(ctx, []string{"SHELL", "DATABASE_URL"})
	if err != nil {
		t.Fatalf("fetch of resolved keys: %v", err)
	}
	if v, _ := got.Get("SHELL"); v != "echo ${HOME:-/root} ${not a ref} $PATH" {
		t.Errorf("SHELL = %q, want it untouched", v)
	}

	l, err := e.client.ListSecrets(ctx, apiScope)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"BROKEN_URL", "SELF"} {
		if _, ok := l.Values.Get(k); ok {
			t.Errorf("%s, whose value holds an unresolved reference, is in Values", k)
		}
	}
	if got := fmt.Sprint(l.Unresolved); got != "map[BROKEN_URL:[prod.db.PASSWORD] SELF:[SELF]]" {
		t.Errorf("Unresolved = %s", got)
	}
}

func TestFetchWithoutKeysMakesNoRequest(t *testing.T) {
	e := setup(t, clientSpec{}, fixture()...)
	if v, err := e.client.Source(apiScope).Fetch(context.Background(), nil); err != nil || v.Len() != 0 {
		t.Fatalf("Fetch(nil) = %v, %v", v, err)
	}
	if n := len(e.srv.Requests()); n != 0 {
		t.Errorf("%d requests, want 0", n)
	}
}

func TestRateLimitRetriedWithServerWait(t *testing.T) {
	e := setup(t, clientSpec{}, fixture()...)
	ctx := context.Background()
	if _, err := e.client.ListSecrets(ctx, apiScope); err != nil { // log in first
		t.Fatal(err)
	}
	e.srv.RateLimitNext(2, 0) // "try again in 0 seconds"; a longer wait than MaxRetryAfter ends the call
	if _, err := e.client.ListSecrets(ctx, apiScope); err != nil {
		t.Fatalf("after two 429s: %v", err)
	}
	if got, want := fmt.Sprint(statuses(e.srv.Requests(), listPath)), "[200 429 429 200]"; got != want {
		t.Errorf("list statuses = %s, want %s", got, want)
	}
	if !strings.Contains(e.logs.String(), `"status":429`) {
		t.Errorf("retries not logged: %s", e.logs.String())
	}
}

func TestRateLimitOutlastsRetries(t *testing.T) {
	e := setup(t, clientSpec{retry: func(p *infisical.RetryPolicy) { p.MaxRetries = 2 }}, fixture()...)
	e.srv.RateLimitNext(10, 0)
	_, err := e.client.ListSecrets(context.Background(), apiScope)
	if !errors.Is(err, infisical.ErrRateLimited) {
		t.Fatalf("err = %v, want ErrRateLimited", err)
	}
	var apiErr *infisical.APIError
	if !errors.As(err, &apiErr) || apiErr.Message != "Rate limit exceeded. Please try again in 0 seconds" || apiErr.Code != "RateLimitExceeded" {
		t.Errorf("APIError = %+v, want the server's 429 message", apiErr)
	}
	if got := e.srv.Count(http.MethodPost, loginPath); got != 3 {
		t.Errorf("%d login attempts, want 3 (1 + RetryMax)", got)
	}
}

// A 429 asking for longer than MaxRetryAfter ends the call at once with that answer.
func TestRateLimitLongerThanTheCapEndsTheCall(t *testing.T) {
	e := setup(t, clientSpec{retry: func(p *infisical.RetryPolicy) { p.MaxRetryAfter = time.Second }}, fixture()...)
	e.srv.RateLimitNext(10, 30)
	_, err := e.client.ListSecrets(context.Background(), apiScope)
	if !errors.Is(err, infisical.ErrRateLimited) || !strings.Contains(err.Error(), "30 seconds") {
		t.Fatalf("err = %v, want ErrRateLimited with the server's message", err)
	}
	if got := e.srv.Count(http.MethodPost, loginPath); got != 1 {
		t.Errorf("%d login attempts, want 1", got)
	}
}

func TestServerErrorsRetriedClientErrorsNot(t *testing.T) {
	e := setup(t, clientSpec{}, fixture()...)
	ctx := context.Background()
	e.srv.FailNext(2, http.StatusServiceUnavailable)
	if _, err := e.client.ListSecrets(ctx, apiScope); err != nil {
		t.Fatalf("after two 503s: %v", err)
	}

	e.srv.ResetRequests()
	_, err := e.client.ListSecrets(ctx, infisical.Scope{ProjectID: "proj-1", Environment: "prod", Path: "/nope"})
	if !errors.Is(err, infisical.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if got := len(e.srv.Requests()); got != 1 {
		t.Errorf("%d requests for a 404, want 1 (not retried)", got)
	}
	if !strings.Contains(err.Error(), "Folder with path '/nope'") {
		t.Errorf("error %q lacks the server's message", err)
	}
}

func TestCancellation(t *testing.T) {
	e := setup(t, clientSpec{}, fixture()...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := e.client.ListSecrets(ctx, apiScope); err != nil {
		t.Fatal(err)
	}
	e.srv.SetLatency(time.Hour)
	e.srv.OnRequest(func(infisicaltest.Request) { cancel() }) // cancel while the request is in flight
	_, err := e.client.ListSecrets(ctx, apiScope)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}

	// A canceled context also stops a caller waiting for a login.
	fresh := setup(t, clientSpec{}, fixture()...)
	fresh.srv.SetLatency(time.Hour)
	ctx2, cancel2 := context.WithCancel(context.Background())
	fresh.srv.OnRequest(func(infisicaltest.Request) { cancel2() })
	if _, err := fresh.client.Source(apiScope).Fetch(ctx2, []string{"DB_PASSWORD"}); !errors.Is(err, context.Canceled) {
		t.Errorf("during login: err = %v, want context.Canceled", err)
	}
}

func TestResolverMakesOneListCallPerScope(t *testing.T) {
	e := setup(t, clientSpec{}, fixture()...)
	r := secrets.NewResolver(map[string]secrets.Source{
		"vault": e.client.Source(apiScope),
		"env":   secrets.NewEnv(func(k string) string { return map[string]string{"SENTRY_DSN": "dsn"}[k] }, ""),
	})
	ctx := context.Background()
	// Service by service, each asking for keys of its own.
	res, err := r.Resolve(ctx, secrets.Ref{Source: "vault", Key: "DATABASE_URL"}, secrets.Ref{Source: "env", Key: "SENTRY_DSN"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Get(secrets.Ref{Source: "vault", Key: "DATABASE_URL"}); !strings.Contains(v, dbPassword) {
		t.Errorf("vault:DATABASE_URL not expanded")
	}
	res, err = r.Resolve(ctx, secrets.Ref{Source: "vault", Key: "MAIL_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Get(secrets.Ref{Source: "vault", Key: "MAIL_KEY"}); v != mailKey {
		t.Errorf("vault:MAIL_KEY wrong")
	}
	if _, err := r.Resolve(ctx, secrets.Ref{Source: "vault", Key: "NOPE"}); !errors.Is(err, secrets.ErrMissing) {
		t.Errorf("err = %v, want ErrMissing", err)
	}
	if got := e.srv.Count(http.MethodGet, listPath); got != 1 {
		t.Errorf("%d list calls, want 1 for the whole run", got)
	}
	assertNoSecret(t, "resolved", fmt.Sprintf("%v %+v %#v", res, res, res))

	// The next run sees changes.
	r.Forget()
	e.srv.SetSecret(apiFolder, "MAIL_KEY", "rotated")
	res, err = r.Resolve(ctx, secrets.Ref{Source: "vault", Key: "MAIL_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Get(secrets.Ref{Source: "vault", Key: "MAIL_KEY"}); v != "rotated" {
		t.Errorf("after Forget: MAIL_KEY = %q, want rotated", v)
	}
}

func TestNothingPrintsTheClientSecret(t *testing.T) {
	c, err := infisical.New("https://eu.infisical.com", clientID, clientSecret)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	log.Info("client", "client", c)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		assertNoSecret(t, "Client "+verb, fmt.Sprintf(verb, c))
	}
	assertNoSecret(t, "slog", logs.String())
	if !strings.Contains(fmt.Sprint(c), clientID) {
		t.Errorf("Client prints %q, want the client id in it", fmt.Sprint(c))
	}
}

func TestNewValidates(t *testing.T) {
	for _, c := range []struct{ base, id, secret string }{
		{"", "a", "b"},
		{"eu.infisical.com", "a", "b"},
		{"ftp://x", "a", "b"},
		{"https://x", "", "b"},
		{"https://x", "a", ""},
	} {
		if _, err := infisical.New(c.base, c.id, c.secret); err == nil {
			t.Errorf("New(%q, %q, ...) succeeded, want an error", c.base, c.id)
		} else {
			assertNoSecret(t, "error", err.Error())
		}
	}
}

// An unreachable Infisical fails every service of a run with an error naming the source, and
// a failed listing is not kept: before, the second service called a nil snapshot in a
// goroutine, which killed the process.
func TestResolverWithInfisicalUnreachable(t *testing.T) {
	srv := infisicaltest.NewServer(t, fixture()...)
	base := srv.URL
	srv.Close() // connection refused from now on
	c, err := infisical.New(base, clientID, clientSecret, infisical.WithRetry(infisical.RetryPolicy{}))
	if err != nil {
		t.Fatal(err)
	}
	r := secrets.NewResolver(map[string]secrets.Source{"vault": c.Source(apiScope)})
	for _, key := range []string{"DB_PASSWORD", "MAIL_KEY", "DB_PASSWORD"} {
		_, err := r.Resolve(context.Background(), secrets.Ref{Source: "vault", Key: key})
		if !errors.Is(err, secrets.ErrSource) || !strings.Contains(err.Error(), `source "vault"`) ||
			!strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("resolve %s: got %v, want a secrets source error naming vault and the refused connection", key, err)
		}
		assertNoSecret(t, "error", err.Error())
	}
}

// When the list is refused, the keys are read a few at once: 4 reads are in flight together
// (each waits until the fourth has arrived), never more. The first half is certain: reads one
// by one never reach the fourth. The second depends on when a fifth read would arrive, so a
// looser bound fails it only most of the time.
func TestKeysReadFourAtOnce(t *testing.T) {
	h := infisicaltest.NewHandler(fixture(infisicaltest.WithListRefusingUnreadable(), infisicaltest.WithIdentity(infisicaltest.Identity{
		ClientID: clientID, ClientSecret: clientSecret, HiddenKeys: []string{"CROSS"},
	}))...)
	const width = 4
	var inFlight, most, arrived atomic.Int32
	fourth := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, listPath+"/") {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if arrived.Add(1) == width {
				close(fourth)
			}
			select {
			case <-fourth:
			case <-r.Context().Done():
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := infisical.New(srv.URL, clientID, clientSecret)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds a failure: reads one by one never reach the fourth
	defer cancel()
	keys := []string{"DB_PASSWORD", "DATABASE_URL", "OVERRIDDEN", "IN_BOTH_IMPORTS", "ONLY_SHARED", "MAIL_KEY"}
	got, err := c.Source(apiScope).Fetch(ctx, keys)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if got.Len() != len(keys) {
		t.Errorf("%d values, want %d", got.Len(), len(keys))
	}
	if m := most.Load(); m != width {
		t.Errorf("at most %d reads in flight at once, want %d", m, width)
	}
}
