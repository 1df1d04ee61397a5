package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
)

// The dashboard's login through an OpenID Connect provider (config.OIDC), with coreos/go-oidc:
// GET /login/oidc sends the browser to the provider with a fresh state and nonce (kept,
// signed, in the short-lived cookie orchestrator_oidc); GET /login/oidc/callback checks the
// state, exchanges the code, verifies the ID token (issuer, audience, expiry, signature,
// nonce), reads the claims (the ID token's, then userinfo's), maps them to a role and opens
// a session as for a token (session.go), its subject "oidc:<email>" (or "oidc:<sub>"). The
// provider is discovered on first use, so the daemon starts while it is down.

const (
	// oidcCookie holds the login's state, nonce and next page, signed, for oidcFlowTTL.
	oidcCookie  = "orchestrator_oidc"
	oidcFlowTTL = 10 * time.Minute
	// oidcSessionPrefix starts the name part of an OIDC session's cookie value.
	oidcSessionPrefix = "oidc~"
	// oidcKeyLabel is what the client secret signs to give the OIDC sessions' key.
	oidcKeyLabel = "orchestrator oidc session v1"
)

// oidcLogin is the OIDC side of the authenticator.
type oidcLogin struct {
	cfg   *config.OIDC
	key   [sha256.Size]byte // signs OIDC sessions and the flow cookie
	roles []role            // the roles its rules can give

	mu       sync.Mutex
	provider *oidc.Provider // discovered on first use
}

func newOIDCLogin(cfg *config.OIDC) *oidcLogin {
	if cfg == nil {
		return nil
	}
	o := &oidcLogin{cfg: cfg}
	m := hmac.New(sha256.New, []byte(cfg.ClientSecret.Reveal()))
	m.Write([]byte(oidcKeyLabel))
	copy(o.key[:], m.Sum(nil))
	for _, r := range cfg.Roles {
		o.roles = append(o.roles, roleOf(r.Role))
	}
	return o
}

// discover returns the provider, reading its discovery document the first time.
func (o *oidcLogin) discover(ctx context.Context) (*oidc.Provider, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, nil
	}
	p, err := oidc.NewProvider(ctx, o.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover the OpenID provider %s: %w", o.cfg.Issuer, err)
	}
	o.provider = p
	return p, nil
}

// oauth is the OAuth 2 client of the provider, with the callback of this request's host
// unless redirect_url says otherwise.
func (s *server) oauth(r *http.Request, p *oidc.Provider) *oauth2.Config {
	cfg := s.auth.oidc.cfg
	redirect := cfg.RedirectURL
	if redirect == "" {
		scheme := "http"
		if s.overTLS(r) {
			scheme = "https"
		}
		redirect = scheme + "://" + r.Host + "/login/oidc/callback"
	}
	scopes := cfg.Scopes
	if len(scopes) == 0 {
		scopes = []string{"profile", "email"}
	}
	return &oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret.Reveal(), Endpoint: p.Endpoint(),
		RedirectURL: redirect, Scopes: append([]string{oidc.ScopeOpenID}, scopes...)}
}

// handleOIDCStart serves GET /login/oidc?next=: to the provider, with a fresh state and nonce.
func (s *server) handleOIDCStart() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.auth.oidc.discover(r.Context())
		if err != nil {
			s.log.WarnContext(r.Context(), "oidc login unavailable", slog.String(logkey.RequestID, requestID(r.Context())),
				slog.String(logkey.Error, err.Error()))
			s.renderLogin(w, r, http.StatusBadGateway, r.URL.Query().Get("next"), "The identity provider cannot be reached; try again, or log in with a token.")
			return
		}
		state, nonce := rand.Text(), rand.Text()
		next := safeNext(r.URL.Query().Get("next"))
		exp := strconv.FormatInt(s.now().Add(oidcFlowTTL).Unix(), 10)
		payload := state + "." + nonce + "." + base64.RawURLEncoding.EncodeToString([]byte(next)) + "." + exp
		http.SetCookie(w, &http.Cookie{Name: oidcCookie, Value: payload + "." + s.auth.oidc.sign(payload), Path: "/login/oidc",
			MaxAge: int(oidcFlowTTL.Seconds()), HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.overTLS(r)})
		http.Redirect(w, r, s.oauth(r, p).AuthCodeURL(state, oidc.Nonce(nonce)), http.StatusFound)
	}
}

// sign is the base64url HMAC of payload under the OIDC key.
func (o *oidcLogin) sign(payload string) string {
	m := hmac.New(sha256.New, o.key[:])
	m.Write([]byte("flow|" + payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// flow reads the login's cookie: its state, nonce and next page, when signed and current.
func (s *server) oidcFlow(r *http.Request) (state, nonce, next string, ok bool) {
	c, err := r.Cookie(oidcCookie)
	if err != nil {
		return "", "", "", false
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 5 {
		return "", "", "", false
	}
	payload := strings.Join(parts[:4], ".")
	exp, err := strconv.ParseInt(parts[3], 10, 64)
	nb, nerr := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || nerr != nil || !hmac.Equal([]byte(parts[4]), []byte(s.auth.oidc.sign(payload))) || !s.now().Before(time.Unix(exp, 0)) {
		return "", "", "", false
	}
	return parts[0], parts[1], string(nb), true
}

// handleOIDCCallback serves GET /login/oidc/callback?code=&state=.
func (s *server) handleOIDCCallback() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, problem string, err error) {
			s.log.WarnContext(r.Context(), "oidc login refused", slog.String(logkey.RequestID, requestID(r.Context())),
				slog.String(logkey.Reason, problem), slog.Any(logkey.Error, err))
			s.renderLogin(w, r, status, "/", problem)
		}
		state, nonce, next, ok := s.oidcFlow(r)
		q := r.URL.Query()
		switch {
		case !ok:
			fail(http.StatusBadRequest, "The login took too long or did not start here; log in again.", nil)
			return
		case subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(state)) != 1:
			fail(http.StatusBadRequest, "The identity provider's answer does not belong to this login; log in again.", nil)
			return
		case q.Get("error") != "":
			fail(http.StatusForbidden, "The identity provider refused the login: "+truncate(q.Get("error"), 100)+".", nil)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: oidcCookie, Value: "", Path: "/login/oidc", MaxAge: -1, HttpOnly: true})
		p, err := s.auth.oidc.discover(r.Context())
		if err != nil {
			fail(http.StatusBadGateway, "The identity provider cannot be reached; try again.", err)
			return
		}
		conf := s.oauth(r, p)
		tok, err := conf.Exchange(r.Context(), q.Get("code"))
		if err != nil {
			fail(http.StatusBadGateway, "The identity provider did not exchange the login code.", err)
			return
		}
		raw, _ := tok.Extra("id_token").(string)
		idt, err := p.Verifier(&oidc.Config{ClientID: conf.ClientID, Now: s.now}).Verify(r.Context(), raw)
		if err != nil || subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
			fail(http.StatusForbidden, "The identity provider's ID token did not verify.", err)
			return
		}
		claims := map[string]any{}
		if err := idt.Claims(&claims); err != nil {
			fail(http.StatusForbidden, "The ID token's claims could not be read.", err)
			return
		}
		if ui, err := p.UserInfo(r.Context(), oauth2.StaticTokenSource(tok)); err == nil && ui.Subject == idt.Subject {
			extra := map[string]any{}
			if ui.Claims(&extra) == nil {
				for k, v := range extra {
					if _, ok := claims[k]; !ok {
						claims[k] = v
					}
				}
			}
		}
		name := "oidc:" + idt.Subject
		if email, _ := claims["email"].(string); email != "" {
			name = "oidc:" + email
		}
		rl := s.auth.oidc.roleFor(claims)
		if rl == roleNone {
			fail(http.StatusForbidden, "You are logged in at the identity provider as "+strings.TrimPrefix(name, "oidc:")+
				", but no rule of this daemon gives that account a role.", nil)
			return
		}
		who := principal{name: name, role: rl}
		s.setSession(w, r, who)
		s.log.InfoContext(r.Context(), "dashboard login",
			slog.String(logkey.RequestID, requestID(r.Context())), slog.String(logkey.Subject, who.name),
			slog.String(logkey.Role, who.role.String()), slog.String(logkey.Remote, clientIP(r)))
		http.Redirect(w, r, safeNext(next), http.StatusSeeOther)
	}
}

// roleFor is the highest role the rules give the claims (roleNone: none).
func (o *oidcLogin) roleFor(claims map[string]any) role {
	best := roleNone
	for _, rule := range o.cfg.Roles {
		if claimHas(claims[rule.Claim], rule.Value) {
			best = max(best, roleOf(rule.Role))
		}
	}
	return best
}

// claimHas reports whether a claim's value is want, or a list holding it.
func claimHas(v any, want string) bool {
	switch x := v.(type) {
	case string:
		return x == want
	case []any:
		return slices.ContainsFunc(x, func(e any) bool { s, _ := e.(string); return s == want })
	case bool:
		return strconv.FormatBool(x) == want
	}
	return false
}

// oidcSession returns the cookie value of an OIDC session of who until exp:
// "oidc~<base64url name>~<role>.<expiry>.<signature>".
func (o *oidcLogin) newSession(who principal, exp time.Time) string {
	payload := oidcSessionPrefix + base64.RawURLEncoding.EncodeToString([]byte(who.name)) + "~" + who.role.String() +
		"." + strconv.FormatInt(exp.Unix(), 10)
	return payload + "." + base64.RawURLEncoding.EncodeToString(sessionMAC(o.key, payload))
}

// session checks an OIDC session's name part (after oidc~), expiry and signature.
func (o *oidcLogin) session(name, expText string, sig []byte, now time.Time) (principal, bool) {
	b64, roleName, ok := strings.Cut(strings.TrimPrefix(name, oidcSessionPrefix), "~")
	nb, err := base64.RawURLEncoding.DecodeString(b64)
	exp, eerr := strconv.ParseInt(expText, 10, 64)
	if !ok || err != nil || eerr != nil || !hmac.Equal(sig, sessionMAC(o.key, name+"."+expText)) || !now.Before(time.Unix(exp, 0)) {
		return principal{}, false
	}
	rl := roleOf(config.Role(roleName))
	if rl == roleNone {
		return principal{}, false
	}
	return principal{name: string(nb), role: rl}, true
}
