package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

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

// authenticator checks bearer tokens in constant time, and the dashboard's session cookies.
// It keeps only SHA-256 digests of the tokens, so comparisons take the same time whatever
// the lengths, and every configured token is compared on every request; and, per role, the
// key its sessions are signed with, derived from its token.
type authenticator struct {
	tokens     []tokenDigest
	publicRead bool
	now        func() time.Time
}

type tokenDigest struct {
	role role
	sum  [sha256.Size]byte
	// sessionKey signs the role's dashboard sessions: HMAC-SHA256(token, sessionKeyLabel),
	// so a session is worth nothing once the token is rotated, and shows nothing of it.
	sessionKey [sha256.Size]byte
}

// cookieName is the dashboard's session cookie, for browsers, which cannot send bearer
// headers from EventSource. It holds a session (role, expiry, signature), never the token.
// See session.go.
const cookieName = "orchestrator_token"

// sessionKeyLabel is what a role's token signs to give its session key.
const sessionKeyLabel = "orchestrator dashboard session v1"

func newAuthenticator(t config.Tokens, publicRead bool, now func() time.Time) *authenticator {
	a := &authenticator{publicRead: publicRead, now: now}
	for _, c := range []struct {
		r role
		s config.Secret
	}{{roleRead, t.Read}, {roleTrigger, t.Trigger}, {roleAdmin, t.Admin}} {
		if c.s.IsSet() { // an empty token disables its role: it never matches
			d := tokenDigest{role: c.r, sum: sha256.Sum256([]byte(c.s.Reveal()))}
			m := hmac.New(sha256.New, []byte(c.s.Reveal()))
			m.Write([]byte(sessionKeyLabel))
			copy(d.sessionKey[:], m.Sum(nil))
			a.tokens = append(a.tokens, d)
		}
	}
	return a
}

// admitted lists, per access, the roles whose token passes a route of it: the one table
// decide, closed and the answers' wording read.
var admitted = map[access][]role{
	accessRead:    {roleRead, roleTrigger, roleAdmin},
	accessTrigger: {roleTrigger, roleAdmin},
	accessAdmin:   {roleAdmin},
	accessAudit:   {roleRead, roleAdmin},
}

// admits lists the roles whose token passes a route of the given access.
func admits(acc access) []role { return admitted[acc] }

// has reports whether rl has a configured token.
func (a *authenticator) has(rl role) bool {
	return slices.ContainsFunc(a.tokens, func(t tokenDigest) bool { return t.role == rl })
}

// closed returns the answer to a request for a route that no configured token admits (and
// that public_read does not open), whatever it presents, or nil: the operator has to set a
// token, and the client is told so instead of being told its token is wrong.
func (a *authenticator) closed(acc access) error {
	if acc == accessRead && a.publicRead {
		return nil
	}
	return a.noToken(admits(acc))
}

// noToken returns the no_token_configured answer when none of roles has a token, else nil.
func (a *authenticator) noToken(roles []role) error {
	if slices.ContainsFunc(roles, a.has) {
		return nil
	}
	var names, envs, keys []string
	for _, rl := range roles {
		names = append(names, rl.String())
		keys = append(keys, "tokens."+rl.String())
		envs = append(envs, config.EnvFor("tokens."+rl.String()))
	}
	what := "no " + orList(names) + " token is configured on this daemon"
	if len(a.tokens) == 0 {
		what = "no API token is configured on this daemon"
	}
	return &httpError{status: http.StatusForbidden, code: "no_token_configured",
		message: what + ", so this route is closed; the daemon's operator sets one with " + orList(envs) +
			" (or " + orList(keys) + " in its config file)"}
}

// orList joins words as "a", "a or b", "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// identify returns the role of the credential presented (a bearer token, or else the
// dashboard's session cookie), whether one was presented, and whether it is valid. A
// session carries exactly the rights of the token it was opened with, no more and no less
// than that token as a bearer header: what keeps a forged cross-site request from using it
// is the cookie's SameSite=Strict and the cross-origin check every unsafe request passes
// (see session.go).
func (a *authenticator) identify(r *http.Request) (rl role, presented, valid bool) {
	tok, presented := bearer(r)
	if presented {
		rl, valid = a.match(tok)
		return rl, true, valid
	}
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		rl, valid = a.session(c.Value)
		return rl, true, valid
	}
	return roleNone, false, false
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

// bearer reads "Authorization: Bearer <token>".
func bearer(r *http.Request) (tok string, presented bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", true // presented, but not a bearer token: it matches nothing
	}
	return strings.TrimSpace(tok), true
}

// A session cookie's value is "<role>.<expiry, Unix seconds>.<signature>": the signature is
// the base64url HMAC-SHA256, under the role's session key, of "v1|<role>|<expiry>". The
// daemon checks it and the expiry on every request; it keeps no session state, so a
// session ends when it expires or when its role's token changes (logging out deletes the
// browser's cookie; a copy of it stays valid until it expires).

// newSession returns the cookie value of a session of rl that ends at exp; "" when rl has
// no token.
func (a *authenticator) newSession(rl role, exp time.Time) string {
	for _, t := range a.tokens {
		if t.role == rl {
			payload := rl.String() + "." + strconv.FormatInt(exp.Unix(), 10)
			return payload + "." + base64.RawURLEncoding.EncodeToString(sessionMAC(t.sessionKey, payload))
		}
	}
	return ""
}

// session returns the role of a session cookie's value and whether it is valid: signed by
// its role's current session key and not expired.
func (a *authenticator) session(v string) (role, bool) {
	name, rest, ok1 := strings.Cut(v, ".")
	expText, sigText, ok2 := strings.Cut(rest, ".")
	exp, err := strconv.ParseInt(expText, 10, 64)
	sig, serr := base64.RawURLEncoding.DecodeString(sigText)
	if !ok1 || !ok2 || err != nil || serr != nil {
		return roleNone, false
	}
	for _, t := range a.tokens {
		if t.role.String() != name {
			continue
		}
		if !hmac.Equal(sig, sessionMAC(t.sessionKey, name+"."+expText)) || !a.now().Before(time.Unix(exp, 0)) {
			return roleNone, false
		}
		return t.role, true
	}
	return roleNone, false
}

// sessionMAC is the signature of a session's "<role>.<expiry>" under key.
func sessionMAC(key [sha256.Size]byte, payload string) []byte {
	m := hmac.New(sha256.New, key[:])
	m.Write([]byte("v1|" + strings.Replace(payload, ".", "|", 1)))
	return m.Sum(nil)
}

// decide returns nil when a request with the credential identify found may use a route of
// the given access, else the answer: 401 when none was presented, 403 when the one presented
// is wrong (unknown, or valid but its role does not admit the route). Only a caller whose
// token is valid is told which token the route needs.
func (a *authenticator) decide(rl role, presented, valid bool, acc access) (role, error) {
	if presented && !valid {
		return roleNone, &httpError{status: http.StatusForbidden, code: "forbidden",
			message: "the token is not valid for this daemon; send the trigger, read or admin token it was configured with"}
	}
	if slices.Contains(admits(acc), rl) || acc == accessRead && a.publicRead {
		return rl, nil
	}
	if !presented {
		return roleNone, &httpError{status: http.StatusUnauthorized, code: "unauthenticated",
			message: "this route needs a token; send Authorization: Bearer <token>"}
	}
	var need []string
	for _, r := range admits(acc) {
		need = append(need, r.String())
	}
	return rl, &httpError{status: http.StatusForbidden, code: "forbidden",
		message: "this route needs the " + orList(need) + " token; the " + rl.String() + " token is not enough"}
}

type roleKey struct{}

// authenticate returns nil when the request may use a route of the given access, else the
// answer: 403 no_token_configured when no configured token admits the route (nothing is
// charged: there is no token to guess), else auth.decide's, charging failed attempts to the
// client's bucket of failures (s.tokenFail, shared by every route that takes a token and the
// login form): a token presented that matches none takes from it, and so does a request
// without one when chargeMissing; once the bucket is empty such a request is answered 429
// instead. A valid token is never charged nor refused by the bucket, even when its role is
// not enough.
func (s *server) authenticate(r *http.Request, acc access, chargeMissing bool) (role, error) {
	if err := s.auth.closed(acc); err != nil {
		return roleNone, err
	}
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
