package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/deploy-orchestrator/orchestrator/config"
)

// role is what a request's token lets it do.
type role int

// Roles, from the least to the most. Each token grants one role; the admin token passes
// every check except the read-only audit rule below, and the trigger token passes read checks.
const (
	roleNone    role = iota // no token (or reads are public)
	roleRead                // the read token
	roleTrigger             // the trigger token
	roleAdmin               // the admin token
)

func (r role) String() string {
	switch r {
	case roleRead:
		return "read"
	case roleTrigger:
		return "trigger"
	case roleAdmin:
		return "admin"
	}
	return "anonymous"
}

// access says which roles a route admits.
type access int

const (
	accessRead    access = iota // public when PublicRead; else read, trigger or admin token
	accessTrigger               // trigger or admin token
	accessAdmin                 // admin token only
	accessAudit                 // read or admin token, even when reads are public
)

// authenticator checks bearer tokens in constant time. It keeps only SHA-256 digests of the
// tokens, so comparisons take the same time whatever the lengths, and every configured token
// is compared on every request.
type authenticator struct {
	tokens     []tokenDigest
	publicRead bool
}

type tokenDigest struct {
	role role
	sum  [sha256.Size]byte
}

// cookieName is the dashboard's session cookie: it holds the token the operator logged in
// with, for browsers, which cannot send bearer headers from EventSource. See session.go.
const cookieName = "orchestrator_token"

func newAuthenticator(t config.Tokens, publicRead bool) *authenticator {
	a := &authenticator{publicRead: publicRead}
	for _, c := range []struct {
		r role
		s config.Secret
	}{{roleRead, t.Read}, {roleTrigger, t.Trigger}, {roleAdmin, t.Admin}} {
		if c.s.IsSet() { // an empty token disables its role: it never matches
			a.tokens = append(a.tokens, tokenDigest{role: c.r, sum: sha256.Sum256([]byte(c.s.Reveal()))})
		}
	}
	return a
}

// identify returns the role of the token presented, whether one was presented, and whether
// it matched a configured token. The dashboard cookie carries exactly the rights of the
// token it holds, no more and no less than the same token as a bearer header: what keeps a
// forged cross-site request from using it is the cookie's SameSite=Strict and the
// cross-origin check every unsafe request passes (see session.go).
func (a *authenticator) identify(r *http.Request) (rl role, presented, valid bool) {
	tok, presented := bearer(r)
	if !presented {
		return roleNone, false, false
	}
	rl, valid = a.match(tok)
	return rl, true, valid
}

// match returns the role of tok and whether it is a configured token. Every configured token
// is compared, in constant time.
func (a *authenticator) match(tok string) (rl role, valid bool) {
	sum := sha256.Sum256([]byte(tok))
	found := 0
	for _, t := range a.tokens {
		if m := subtle.ConstantTimeCompare(sum[:], t.sum[:]); m == 1 {
			found = 1
			rl = max(rl, t.role)
		}
	}
	return rl, found == 1
}

// bearer reads "Authorization: Bearer <token>", or else the dashboard cookie.
func bearer(r *http.Request) (tok string, presented bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			return "", true // presented, but not a bearer token: it matches nothing
		}
		return strings.TrimSpace(tok), true
	}
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		tok, err := base64.RawURLEncoding.DecodeString(c.Value)
		if err != nil {
			return "", true // presented, but not a cookie this daemon set: it matches nothing
		}
		return string(tok), true
	}
	return "", false
}

// cookieValue is how the cookie holds a token: base64url, so that a token with characters a
// cookie may not carry (space, quote, semicolon) survives the trip.
func cookieValue(tok string) string { return base64.RawURLEncoding.EncodeToString([]byte(tok)) }

// check returns nil when the request may use a route of the given access, else the answer:
// 401 when no token was presented, 403 when the token presented is wrong (unknown, or valid
// but its role does not admit the route). Only a caller whose token is valid is told which
// token the route needs.
func (a *authenticator) check(r *http.Request, acc access) (role, error) {
	rl, presented, valid := a.identify(r)
	return a.decide(rl, presented, valid, acc)
}

// decide is check for a token already identified.
func (a *authenticator) decide(rl role, presented, valid bool, acc access) (role, error) {
	if presented && !valid {
		return roleNone, &httpError{status: http.StatusForbidden, code: "forbidden",
			message: "the token is not valid for this daemon; send the trigger, read or admin token it was configured with"}
	}
	ok := false
	switch acc {
	case accessRead:
		ok = rl >= roleRead || a.publicRead
	case accessTrigger:
		ok = rl >= roleTrigger
	case accessAdmin:
		ok = rl == roleAdmin
	case accessAudit:
		ok = rl == roleRead || rl == roleAdmin
	}
	if ok {
		return rl, nil
	}
	if !presented {
		return roleNone, &httpError{status: http.StatusUnauthorized, code: "unauthenticated",
			message: "this route needs a token; send Authorization: Bearer <token>"}
	}
	need := map[access]string{accessRead: "a read", accessTrigger: "the trigger or admin", accessAdmin: "the admin", accessAudit: "the read or admin"}[acc]
	return rl, &httpError{status: http.StatusForbidden, code: "forbidden",
		message: "this route needs " + need + " token; the " + rl.String() + " token is not enough"}
}

type roleKey struct{}

// authenticate is auth.check that charges failed attempts to the client's bucket of
// failures (s.tokenFail, shared by every route that takes a token and the login form): a
// token presented that matches none takes from it, and so does a request without one when
// chargeMissing; once the bucket is empty such a request is answered 429 instead. A valid
// token is never charged nor refused by the bucket, even when its role is not enough.
func (s *server) authenticate(r *http.Request, acc access, chargeMissing bool) (role, error) {
	rl, presented, valid := s.auth.identify(r)
	rl, err := s.auth.decide(rl, presented, valid, acc)
	if err != nil && (presented && !valid || !presented && chargeMissing) {
		return rl, authFailed(r, s.tokenFail, err)
	}
	return rl, err
}

// require wraps a handler with an access check; the role is in the request's context.
// A wrong token counts as a failed attempt (authenticate).
func (s *server) require(acc access, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rl, err := s.authenticate(r, acc, false)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orchestrator"`)
			s.writeError(w, r, err)
			return
		}
		next(w, withRole(r, rl))
	}
}

// withRole is r with the role of its token in its context, for actor and the pages.
func withRole(r *http.Request, rl role) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), roleKey{}, rl))
}

// actor names who made the request, for Trigger.By and the audit trail: "api:<role>".
func actor(r *http.Request) string {
	rl, _ := r.Context().Value(roleKey{}).(role)
	return "api:" + rl.String()
}
