package api_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/testutil"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// loginRequest is the browser's POST of the login form.
func loginRequest(token, next string) *http.Request {
	form := url.Values{"token": {token}, "next": {next}}
	req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return req
}

// login logs in with token through the form and returns the session cookie.
func (f *fixture) login(token string) *http.Cookie {
	f.t.Helper()
	rec := f.serve(loginRequest(token, "/"))
	if rec.Code != http.StatusSeeOther {
		f.t.Fatalf("login: got %d, want 303: %s", rec.Code, rec.Body)
	}
	for _, c := range rec.Result().Cookies() {
		if c.Name == "orchestrator_token" {
			return c
		}
	}
	f.t.Fatalf("login set no session cookie: %v", rec.Result().Cookies())
	return nil
}

// withCookie is request with the session cookie instead of a bearer header, sent by the
// dashboard's own page (Sec-Fetch-Site: same-origin).
func withCookie(c *http.Cookie, method, path string, body any) *http.Request {
	req := request(method, path, "", body)
	req.AddCookie(c)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return req
}

func TestLoginForm(t *testing.T) {
	f := newFixture(t)

	// A token in the URL is no way in any more: the page answers the login form.
	rec := f.do("GET", "/?token="+readToken, "", nil)
	if rec.Code != http.StatusUnauthorized || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("/?token=: got %d with cookies %v, want 401 and no cookie", rec.Code, rec.Result().Cookies())
	}

	rec = f.serve(loginRequest(readToken, "/runs/abc?x=1"))
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/runs/abc?x=1" {
		t.Fatalf("login: got %d Location %q, want 303 to /runs/abc?x=1", rec.Code, rec.Header().Get("Location"))
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies: got %v, want one", cookies)
	}
	c := cookies[0]
	if !strings.HasPrefix(c.Value, "read.") {
		t.Errorf("cookie value %q is not a session of the read token's role", c.Value)
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge <= 0 {
		t.Fatalf("cookie over plain HTTP: got %+v, want HttpOnly, SameSite=Strict, Path=/, not Secure, with a lifetime", c)
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.AddCookie(c)
	if rec := f.serve(req); rec.Code != 200 || !strings.Contains(rec.Body.String(), "Recent runs") {
		t.Fatalf("dashboard with the cookie: got %d", rec.Code)
	}

	// next never leads off the daemon.
	for _, next := range []string{"//evil.example/x", "https://evil.example/", "/\\evil.example", "", "/login"} {
		if rec := f.serve(loginRequest(readToken, next)); rec.Header().Get("Location") != "/" {
			t.Errorf("next %q: Location %q, want /", next, rec.Header().Get("Location"))
		}
	}

	// A wrong token shows the form again, with the reason, and sets nothing.
	rec = f.serve(loginRequest("bogus-token-xxxxxxxx", "/"))
	if rec.Code != http.StatusForbidden || len(rec.Result().Cookies()) != 0 ||
		!strings.Contains(rec.Body.String(), "not valid for this daemon") || !strings.Contains(rec.Body.String(), `action="/login"`) {
		t.Fatalf("wrong token: got %d cookies %v body %s", rec.Code, rec.Result().Cookies(), rec.Body)
	}

	// Logging out deletes the cookie.
	req = httptest.NewRequest("POST", "/logout", nil)
	req.AddCookie(c)
	rec = f.serve(req)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/login" {
		t.Fatalf("logout: got %d Location %q", rec.Code, rec.Header().Get("Location"))
	}
	if out := rec.Result().Cookies(); len(out) != 1 || out[0].MaxAge >= 0 || out[0].Value != "" {
		t.Fatalf("logout cookie: got %+v, want it deleted", out)
	}
}

func TestLoginCookieSecureOverTLS(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.TrustedProxies = []string{"10.0.0.0/8"} })
	secure := func(req *http.Request) bool {
		t.Helper()
		rec := f.serve(req)
		cs := rec.Result().Cookies()
		if rec.Code != http.StatusSeeOther || len(cs) != 1 {
			t.Fatalf("login: got %d cookies %v", rec.Code, cs)
		}
		return cs[0].Secure
	}
	direct := loginRequest(readToken, "/")
	direct.TLS = &tls.ConnectionState{}
	if !secure(direct) {
		t.Error("login over TLS: the cookie is not Secure")
	}
	proxied := loginRequest(readToken, "/")
	proxied.RemoteAddr = "10.1.2.3:4567"
	proxied.Header.Set("X-Forwarded-Proto", "https")
	if !secure(proxied) {
		t.Error("login through a trusted proxy that says https: the cookie is not Secure")
	}
	chain := loginRequest(readToken, "/") // a second proxy appended its own hop
	chain.RemoteAddr = "10.1.2.3:4567"
	chain.Header.Set("X-Forwarded-Proto", "https, http")
	if !secure(chain) {
		t.Error("X-Forwarded-Proto: https, http from a trusted proxy: the cookie is not Secure")
	}
	spoofed := loginRequest(readToken, "/")
	spoofed.RemoteAddr = "192.0.2.7:4567"
	spoofed.Header.Set("X-Forwarded-Proto", "https")
	if secure(spoofed) {
		t.Error("X-Forwarded-Proto from a peer that is not a trusted proxy was believed")
	}
	plain := loginRequest(readToken, "/")
	plain.RemoteAddr = "10.1.2.3:4567"
	plain.Header.Set("X-Forwarded-Proto", "http")
	if secure(plain) {
		t.Error("a trusted proxy that says http: the cookie is Secure")
	}
}

// TestCookieCarriesItsTokensRights: the session cookie grants what its token grants as a
// bearer header, no more (the trigger token cannot read the audit) and no less (the
// admin's cookie acts from the dashboard's own pages).
func TestCookieCarriesItsTokensRights(t *testing.T) {
	f := newFixture(t)
	read, trigger, admin := f.login(readToken), f.login(triggerToken), f.login(adminToken)

	wantError(t, f.do("GET", "/v1/locks/audit", triggerToken, nil), 403, "")
	wantError(t, f.serve(withCookie(trigger, "GET", "/v1/locks/audit", nil)), 403, "")
	if rec := f.serve(withCookie(read, "GET", "/v1/locks/audit", nil)); rec.Code != 200 {
		t.Errorf("audit with the read cookie: got %d", rec.Code)
	}

	r := f.trigger("demo", map[string]string{"build": "1"})
	wantError(t, f.serve(withCookie(read, "POST", "/v1/runs/"+r.ID+"/cancel", nil)), 403, "")
	wantError(t, f.serve(withCookie(trigger, "POST", "/v1/locks/coolify:x/freeze", `{"message":"m","for":"1h"}`)), 403, "")
	if rec := f.serve(withCookie(trigger, "POST", "/v1/runs/"+r.ID+"/cancel", nil)); rec.Code != 200 {
		t.Fatalf("cancel with the trigger cookie: got %d: %s", rec.Code, rec.Body)
	}
	if rec := f.serve(withCookie(admin, "POST", "/v1/locks/coolify:x/freeze", `{"message":"m","for":"1h"}`)); rec.Code != 200 {
		t.Fatalf("freeze with the admin cookie: got %d: %s", rec.Code, rec.Body)
	}
	if got := f.lockInfo("coolify:x"); !got.Frozen {
		t.Fatalf("coolify:x after the freeze: %+v", got)
	}
}

// TestCrossOriginActionsRefused: another site's page cannot make a logged-in browser act,
// whatever the cookie's SameSite does in that browser; clients that send no Origin pass.
func TestCrossOriginActionsRefused(t *testing.T) {
	f := newFixture(t)
	admin := f.login(adminToken)
	body := `{"message":"m","for":"1h"}`

	req := withCookie(admin, "POST", "/v1/locks/coolify:x/freeze", body)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if e := wantError(t, f.serve(req), 403, ""); e.Error.Code != "cross_origin" {
		t.Errorf("cross-site: code %q, want cross_origin", e.Error.Code)
	}
	req = withCookie(admin, "POST", "/v1/locks/coolify:x/freeze", body)
	req.Header.Del("Sec-Fetch-Site") // an older browser: Origin only
	req.Header.Set("Origin", "http://evil.example")
	wantError(t, f.serve(req), 403, "")
	req = withCookie(admin, "DELETE", "/v1/locks/coolify:x/freeze", nil)
	req.Header.Set("Sec-Fetch-Site", "same-site")
	wantError(t, f.serve(req), 403, "")
	login := loginRequest(triggerToken, "/") // login CSRF: signing the victim in as someone else
	login.Header.Set("Sec-Fetch-Site", "cross-site")
	if rec := f.serve(login); rec.Code != 403 || len(rec.Result().Cookies()) != 0 {
		t.Errorf("cross-site login: got %d cookies %v", rec.Code, rec.Result().Cookies())
	}
	if got := f.lockInfo("coolify:x"); got.Frozen {
		t.Fatal("a cross-origin request froze coolify:x")
	}

	// Same origin by Origin (no Sec-Fetch-Site), and the CLI (neither header), pass.
	req = withCookie(admin, "POST", "/v1/locks/coolify:x/freeze", body)
	req.Header.Del("Sec-Fetch-Site")
	req.Header.Set("Origin", "http://example.com")
	if rec := f.serve(req); rec.Code != 200 {
		t.Fatalf("same-origin freeze: got %d: %s", rec.Code, rec.Body)
	}
	if rec := f.do("DELETE", "/v1/locks/coolify:x/freeze", adminToken, nil); rec.Code != 204 {
		t.Fatalf("unfreeze with the bearer token: got %d: %s", rec.Code, rec.Body)
	}
}

// TestDashboardPagesAnswerHTML: a browser gets pages, never JSON: the login form where a
// token is needed, an HTML 404 for what does not exist. The API keeps answering JSON.
func TestDashboardPagesAnswerHTML(t *testing.T) {
	f := newFixture(t)
	page := func(path string, c *http.Cookie) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
		if c != nil {
			req.AddCookie(c)
		}
		rec := f.serve(req)
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Fatalf("GET %s: Content-Type %q, want text/html (body %s)", path, ct, rec.Body)
		}
		return rec
	}
	r := f.trigger("demo", map[string]string{"build": "1"})
	rec := page("/runs/"+r.ID, nil)
	if rec.Code != 401 || !strings.Contains(rec.Body.String(), `action="/login"`) ||
		!strings.Contains(rec.Body.String(), `name="next" value="/runs/`+r.ID+`"`) {
		t.Fatalf("run page without a token: got %d %s", rec.Code, rec.Body)
	}
	rotated := &http.Cookie{Name: "orchestrator_token", Value: "an-old-token-xxxxxxxx"}
	if rec := page("/", rotated); rec.Code != 403 || !strings.Contains(rec.Body.String(), "log in again") {
		t.Fatalf("page with a stale cookie: got %d %s", rec.Code, rec.Body)
	}
	read := f.login(readToken)
	if rec := page("/no/such/page", read); rec.Code != 404 || !strings.Contains(rec.Body.String(), "Back to the dashboard") {
		t.Fatalf("unknown page: got %d %s", rec.Code, rec.Body)
	}
	if rec := page("/logout", read); rec.Code != 405 {
		t.Fatalf("GET /logout: got %d, want a 405 page", rec.Code)
	}
	if rec := page("/runs/no-such-run", read); rec.Code != 404 || !strings.Contains(rec.Body.String(), "no-such-run") {
		t.Fatalf("unknown run: got %d %s", rec.Code, rec.Body)
	}
	if rec := page("/runs/..%2Fsecret", read); rec.Code != 400 || !strings.Contains(rec.Body.String(), "invalid id") {
		t.Fatalf("bad run id: got %d %s", rec.Code, rec.Body)
	}
	// Pages offer what the token may do, and no more.
	if body := page("/runs/"+r.ID, read).Body.String(); strings.Contains(body, "cancel-form") || !strings.Contains(body, "read (viewer)") {
		t.Error("the read token's run page offers to cancel, or does not say who is logged in")
	}
	if body := page("/runs/"+r.ID, f.login(triggerToken)).Body.String(); !strings.Contains(body, "cancel-form") {
		t.Error("the trigger token's run page does not offer to cancel")
	}
	if body := page("/", f.login(triggerToken)).Body.String(); strings.Contains(body, "freeze-form") {
		t.Error("the trigger token's index offers to freeze")
	}
	if body := page("/", f.login(adminToken)).Body.String(); !strings.Contains(body, "freeze-form") {
		t.Error("the admin token's index does not offer to freeze")
	}

	wantError(t, f.do("GET", "/v1/no-such-route", readToken, nil), 404, "")
}

// TestSupersededStepExplained: the run page says why a superseded step was not deployed,
// with its event's message, as the CLI prints it.
func TestSupersededStepExplained(t *testing.T) {
	f := newFixture(t)
	r := f.trigger("demo", map[string]string{"build": "1"})
	msg := "not deployed: run 0000-newer re-synced it at fence 31"
	_, err := f.store.Update(context.Background(), r.ID, func(run *runs.Run) error {
		s := run.Step(runs.Phase2, "api")
		s.Status, s.EndedAt = runs.StepSuperseded, time.Now().UTC()
		return nil
	}, runs.Event{Type: runs.EventServiceSuperseded, Phase: runs.Phase2, Service: "api", Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	rec := f.do("GET", "/runs/"+r.ID, readToken, nil)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), msg) {
		t.Fatalf("run page: got %d, want the superseded step's reason %q: %s", rec.Code, msg, rec.Body)
	}
}

// lockInfo is the current lease of key (zero when none).
func (f *fixture) lockInfo(key string) locks.Info {
	f.t.Helper()
	infos, err := f.locker.List(context.Background(), key)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, l := range infos {
		if l.Key == key {
			return l
		}
	}
	return locks.Info{}
}

// TestLoginTokenWithAwkwardCharacters: a token holding characters a cookie may not carry
// (space, semicolon, quote, backslash, comma) still logs in and is still recognized.
func TestLoginTokenWithAwkwardCharacters(t *testing.T) {
	const awkward = `read token; "quoted" \ back, slash`
	f := newFixture(t, func(c *config.Daemon) { c.Tokens.Read = awkward })
	req := httptest.NewRequest("GET", "/", nil)
	req.AddCookie(f.login(awkward))
	if rec := f.serve(req); rec.Code != 200 || !strings.Contains(rec.Body.String(), "read (viewer)") {
		t.Fatalf("dashboard with the awkward token's cookie: got %d: %s", rec.Code, rec.Body)
	}
}

// Item 7 of the attacker probe: the session cookie is not the token. It holds the role, the
// expiry and a signature under a key derived from the token: a copied cookie neither shows
// the token nor outlives the session, and a changed cookie is worth nothing.
func TestSessionCookieIsNotTheToken(t *testing.T) {
	f := newFixture(t)
	for _, tok := range []string{readToken, triggerToken, adminToken} {
		c := f.login(tok)
		for _, enc := range []string{tok, base64.RawURLEncoding.EncodeToString([]byte(tok)),
			base64.StdEncoding.EncodeToString([]byte(tok)), base64.URLEncoding.EncodeToString([]byte(tok))} {
			if strings.Contains(c.Value, enc) {
				t.Errorf("the session cookie %q holds the token (as %q)", c.Value, enc)
			}
		}
		if rec := f.serve(withCookie(c, "GET", "/v1/runs", nil)); rec.Code != 200 {
			t.Errorf("the session of %s: got %d", tok[:8], rec.Code)
		}
	}
	read := f.login(readToken)
	role, rest, _ := strings.Cut(read.Value, ".")
	exp, sig, ok := strings.Cut(rest, ".")
	if !ok || len(sig) < 4 {
		t.Fatalf("the session cookie %q is not <role>.<expiry>.<signature>", read.Value)
	}
	forged := []string{
		"admin." + rest,                                  // another role, the read session's signature
		role + "." + exp + "0." + sig,                    // a later expiry
		role + "." + exp + "." + sig[:len(sig)-2] + "AA", // another signature
		role + "." + exp,                                 // no signature
	}
	for _, v := range forged {
		c := &http.Cookie{Name: read.Name, Value: v}
		wantError(t, f.serve(withCookie(c, "GET", "/v1/runs", nil)), 403, "")
	}
}

// The session's 12 hours are the daemon's, not only the browser's: a cookie sent after its
// session ended (a copy, a browser that kept it) is refused.
func TestSessionExpiresServerSide(t *testing.T) {
	f := newFixture(t)
	clock := testutil.NewClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	h := api.NewServer(api.Deps{Config: f.cfg, Engine: f.engine, Runs: f.store, Locks: f.locker, Now: clock.Now})
	serve := func(req *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := serve(loginRequest(adminToken, "/"))
	cs := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || len(cs) != 1 || cs[0].MaxAge != int((12*time.Hour).Seconds()) {
		t.Fatalf("login: got %d, cookies %+v, want 303 and a cookie of 12 hours", rec.Code, cs)
	}
	clock.Add(12*time.Hour - time.Second)
	if rec := serve(withCookie(cs[0], "GET", "/v1/locks/audit", nil)); rec.Code != 200 {
		t.Fatalf("a second before the session ends: got %d", rec.Code)
	}
	clock.Add(time.Second)
	if rec := serve(withCookie(cs[0], "GET", "/v1/locks/audit", nil)); rec.Code != 403 {
		t.Errorf("the API once the session ended: got %d, want 403", rec.Code)
	}
	if rec := serve(withCookie(cs[0], "GET", "/", nil)); rec.Code != 403 || !strings.Contains(rec.Body.String(), "log in again") {
		t.Errorf("the dashboard once the session ended: got %d, want 403 and the login form", rec.Code)
	}
}

// Rotating a token ends its sessions: a daemon restarted with another read token refuses
// the read sessions opened before, and keeps the others.
func TestSessionEndsWhenTokenRotated(t *testing.T) {
	f := newFixture(t)
	read, trigger := f.login(readToken), f.login(triggerToken)
	cfg := *f.cfg
	cfg.Tokens.Read = "read-token-rotated-0007"
	h := api.NewServer(api.Deps{Config: &cfg, Engine: f.engine, Runs: f.store, Locks: f.locker})
	for _, c := range []struct {
		cookie *http.Cookie
		want   int
	}{{read, 403}, {trigger, 200}} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, withCookie(c.cookie, "GET", "/v1/runs", nil))
		if rec.Code != c.want {
			t.Errorf("session %s after the read token was rotated: got %d, want %d", c.cookie.Value[:5], rec.Code, c.want)
		}
	}
}
