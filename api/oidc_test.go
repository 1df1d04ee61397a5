package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

const oidcClientSecret = "oidc-client-secret-SENTINEL-0011"

// startOpenIDProvider starts a real OpenID provider (zitadel/oidc's OpenID-certified op
// package with its example storage: users test-user@127.0.0.1 and test-user2, password
// verysecure) that knows the client "orchestrator" with callback redirect, and returns its
// issuer URL.
func startOpenIDProvider(t *testing.T, redirect string) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	issuer := "http://" + srv.Listener.Addr().String()
	storage.RegisterClients(storage.WebClient("orchestrator", oidcClientSecret, redirect))
	store := storage.NewStorage(storage.NewUserStore(issuer))
	srv.Config.Handler = exampleop.SetupServer(issuer, store, slog.New(slog.DiscardHandler), false, op.WithAllowInsecure())
	srv.Start()
	t.Cleanup(srv.Close)
	return issuer
}

// oidcLogin logs in through the daemon at base and the provider as user, following every
// redirect with one cookie jar, and returns the last answer and the jar's client.
func oidcLogin(t *testing.T, base, user, next string) (*http.Response, string, *http.Client) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.Get(base + "/login/oidc?next=" + url.QueryEscape(next))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Request.URL.Query().Get("authRequestID")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("the provider's login form: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	form := url.Values{"id": {id}, "username": {user}, "password": {"verysecure"}}
	loginURL := resp.Request.URL.Scheme + "://" + resp.Request.URL.Host + "/login/username"
	resp, err = c.PostForm(loginURL, form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body), c
}

// Issue 36, item 1: people log in to the dashboard through a real OpenID provider; their
// claims map to a role (here the email, from userinfo, to approver), the session is theirs
// ("oidc:<email>"), and what they do is recorded under that subject; an account no rule
// maps is refused with the reason.
func TestOIDCLoginThroughARealProvider(t *testing.T) {
	ours := httptest.NewUnstartedServer(nil)
	base := "http://" + ours.Listener.Addr().String()
	issuer := startOpenIDProvider(t, base+"/login/oidc/callback")
	f := newFixture(t, withNamedTokens, func(c *config.Daemon) {
		c.OIDC = &config.OIDC{Issuer: issuer, ClientID: "orchestrator", ClientSecret: oidcClientSecret,
			Roles: []config.OIDCRole{{Claim: "email", Value: "test-user@zitadel.ch", Role: config.RoleApprover}}}
	})
	ours.Config.Handler = f.h
	ours.Start()
	t.Cleanup(ours.Close)

	resp, body, c := oidcLogin(t, base, "test-user@127.0.0.1", "/")
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/" || !strings.Contains(body, `<span id="session-role">oidc:test-user@zitadel.ch (approver)</span>`) {
		t.Fatalf("after logging in: %d at %s:\n%s", resp.StatusCode, resp.Request.URL, body)
	}
	// The session acts as the person, with the approver's rights and no more.
	run := f.trigger("demo", map[string]any{"image_tag": "v1"})
	for path, want := range map[string]int{"/v1/runs/" + run.ID + "/approve": 200, "/v1/runs/" + run.ID + "/cancel": 403} {
		resp, err := c.Post(base+path, "application/json", strings.NewReader(`{"digest":"plan-1"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST %s with the OIDC session: %d, want %d", path, resp.StatusCode, want)
		}
	}
	got, err := f.store.Get(t.Context(), run.ID)
	if err != nil || got.Decision == nil || got.Decision.Votes[0].By != "oidc:test-user@zitadel.ch" {
		t.Errorf("the approval's subject: %+v, %v", got.Decision, err)
	}
	recs := decodeJSON[struct{ Records []runs.AuditRecord }](t, f.do("GET", "/v1/audit?action=approve", opsToken, nil)).Records
	if len(recs) != 1 || recs[0].Subject != "oidc:test-user@zitadel.ch" {
		t.Errorf("audit of the approval: %+v", recs)
	}

	// test-user2 has no role here.
	resp, body, _ = oidcLogin(t, base, "test-user2", "/")
	if resp.StatusCode != 403 || !strings.Contains(body, "test-user2@zitadel.ch, but no rule of this daemon gives that account a role") {
		t.Errorf("an account without a role: %d\n%s", resp.StatusCode, body)
	}
	// A callback that did not start here is refused.
	resp2, err := http.Get(base + "/login/oidc/callback?code=x&state=y")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != 400 {
		t.Errorf("a callback without the login's cookie: %d, want 400", resp2.StatusCode)
	}
}
