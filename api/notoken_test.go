package api_test

import (
	"html"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/config"
)

// TestNoTokenConfigured: on a daemon started without any token, a request is not told that
// its token is wrong (there is none it could send): every route that needs one answers 403
// no_token_configured naming the variables that set them, whatever the request presents,
// and the dashboard's pages and login form say the same.
func TestNoTokenConfigured(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.Tokens = config.Tokens{} })
	for _, tok := range []string{"", "some-token-0123456789"} {
		for _, r := range []struct{ method, path, body, vars string }{
			{"GET", "/v1/runs", "", "ORCH_READ_TOKEN, ORCH_TRIGGER_TOKEN or ORCH_ADMIN_TOKEN"},
			{"POST", "/v1/pipelines/demo/runs", `{}`, "ORCH_TRIGGER_TOKEN or ORCH_ADMIN_TOKEN"},
			{"POST", "/v1/locks/coolify:x/freeze", `{"message":"m","for":"1h"}`, "ORCH_ADMIN_TOKEN"},
		} {
			var body any
			if r.body != "" {
				body = r.body
			}
			e := wantError(t, f.do(r.method, r.path, tok, body), 403, "")
			if e.Error.Code != "no_token_configured" || !strings.HasPrefix(e.Error.Message, "no API token is configured on this daemon") ||
				!strings.Contains(e.Error.Message, "sets one with "+r.vars+" (") {
				t.Errorf("%s %s with token %q: got %s: %s", r.method, r.path, tok, e.Error.Code, e.Error.Message)
			}
		}
	}
	page := f.do("GET", "/", "", nil)
	login := f.serve(loginRequest("some-token-0123456789", "/"))
	for what, rec := range map[string]string{"GET /": page.Body.String(), "POST /login": login.Body.String()} {
		if !strings.Contains(html.UnescapeString(rec), "No API token is configured on this daemon") {
			t.Errorf("%s does not say that no token is configured:\n%s", what, rec)
		}
	}
	if page.Code != 403 || login.Code != 403 {
		t.Errorf("GET / answered %d, POST /login %d; want 403 for both", page.Code, login.Code)
	}

	// With some tokens, a route only a missing one opens says which one.
	g := newFixture(t, func(c *config.Daemon) { c.Tokens.Admin = "" })
	e := wantError(t, g.do("POST", "/v1/locks/coolify:x/freeze", triggerToken, `{"message":"m","for":"1h"}`), 403, "")
	if e.Error.Code != "no_token_configured" || !strings.HasPrefix(e.Error.Message, "no token with the admin role is configured on this daemon") ||
		!strings.Contains(e.Error.Message, "ORCH_ADMIN_TOKEN (or tokens.admin, or an entry of tokens.named with the admin role, in its config file)") {
		t.Errorf("freeze without an admin token configured: got %s: %s", e.Error.Code, e.Error.Message)
	}
	// A route a configured token opens still tells a wrong token apart.
	if e := wantError(t, g.do("GET", "/v1/runs", "wrong-token-0123456789", nil), 403, ""); e.Error.Code != "forbidden" {
		t.Errorf("a wrong token on a route with tokens: code %s", e.Error.Code)
	}
}
