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

// role is what a request's credential lets it do: config.Role as a number, from the least
// to the most.
type role int

// Roles (config.Roles). Which routes each may use is the table admitted.
const (
	roleNone     role = iota // no credential (or reads are public)
	roleViewer               // reads
	roleDeployer             // reads, triggers, plans, cancels
	roleApprover             // reads, approves and rejects
	roleAdmin                // everything
)

// roleOf maps a configured role to its number; roleNone for an unknown one.
func roleOf(r config.Role) role {
	for i, c := range config.Roles {
		if c == r {
			return role(i + 1)
		}
	}
	return roleNone
}

func (r role) String() string {
	if r > roleNone && int(r) <= len(config.Roles) {
		return string(config.Roles[r-1])
	}
	return "anonymous"
}

// principal is who made a request: the name of the token (or of the session's token) and
// its role. The zero principal is anonymous (public reads).
type principal struct {
	name string
	role role
}

// access says which roles a route admits.
type access int

const (
	accessRead    access = iota // public when PublicRead; else any role
	accessTrigger               // deployer or admin
	accessApprove               // approver or admin
	accessAdmin                 // admin only
	accessAudit                 // viewer or admin, even when reads are public
)

// authenticator checks bearer tokens in constant time, and the dashboard's session cookies.
// It keeps only SHA-256 digests of the tokens, so comparisons take the same time whatever
// the lengths, and every configured token is compared on every request; and, per token, the
// key its sessions are signed with, derived from the token.
type authenticator struct {
	tokens     []tokenDigest
	publicRead bool
	now        func() time.Time
	// oidc is the login through an OpenID provider (nil: none configured).
	oidc *oidcLogin
}

type tokenDigest struct {
	who principal
	sum [sha256.Size]byte
	// sessionKey signs the token's dashboard sessions: HMAC-SHA256(token, sessionKeyLabel),
	// so a session is worth nothing once the token is rotated, and shows nothing of it.
	sessionKey [sha256.Size]byte
}

// cookieName is the dashboard's session cookie, for browsers, which cannot send bearer
// headers from EventSource. It holds a session (token name, expiry, signature), never the
// token. See session.go.
const cookieName = "orchestrator_token"

// sessionKeyLabel is what a token signs to give its session key.
const sessionKeyLabel = "orchestrator dashboard session v1"

func newAuthenticator(t config.Tokens, o *config.OIDC, publicRead bool, now func() time.Time) *authenticator {
	a := &authenticator{publicRead: publicRead, now: now, oidc: newOIDCLogin(o)}
	for _, n := range t.All() { // an empty token is left out: it never matches
		d := tokenDigest{who: principal{name: n.Name, role: roleOf(n.Role)}, sum: sha256.Sum256([]byte(n.Token.Reveal()))}
		m := hmac.New(sha256.New, []byte(n.Token.Reveal()))
		m.Write([]byte(sessionKeyLabel))
		copy(d.sessionKey[:], m.Sum(nil))
		a.tokens = append(a.tokens, d)
	}
	return a
}

// admitted lists, per access, the roles that pass a route of it: the one table decide,
// closed and the answers' wording read.
var admitted = map[access][]role{
	accessRead:    {roleViewer, roleDeployer, roleApprover, roleAdmin},
	accessTrigger: {roleDeployer, roleAdmin},
	accessApprove: {roleApprover, roleAdmin},
	accessAdmin:   {roleAdmin},
	accessAudit:   {roleViewer, roleAdmin},
}

// admits lists the roles that pass a route of the given access.
func admits(acc access) []role { return admitted[acc] }

// has reports whether a token of role rl is configured, or an OIDC rule gives it.
func (a *authenticator) has(rl role) bool {
	return slices.ContainsFunc(a.tokens, func(t tokenDigest) bool { return t.who.role == rl }) ||
		a.oidc != nil && slices.Contains(a.oidc.roles, rl)
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

// noToken returns the no_token_configured answer when no token of any of roles is
// configured, else nil. It names the ORCH_* variables of the shared tokens of those roles
// and the config keys.
func (a *authenticator) noToken(roles []role) error {
	if slices.ContainsFunc(roles, a.has) {
		return nil
	}
	var names, envs, keys []string
	for _, rl := range roles {
		names = append(names, rl.String())
		for _, k := range []string{"read", "trigger", "admin"} { // the order of the variables' docs
			if config.LegacyRoles[k] == config.Roles[rl-1] {
				keys = append(keys, "tokens."+k)
				envs = append(envs, config.EnvFor("tokens."+k))
			}
		}
	}
	what := "no token with the " + orList(names) + " role is configured on this daemon"
	if len(a.tokens) == 0 && a.oidc == nil {
		what = "no API token is configured on this daemon"
	}
	named := "an entry of tokens.named with the " + orList(names) + " role"
	how := named + " in its config file"
	if len(envs) > 0 {
		how = orList(envs) + " (or " + strings.Join(keys, ", ") + ", or " + named + ", in its config file)"
	}
	return &httpError{status: http.StatusForbidden, code: "no_token_configured",
		message: what + ", so this route is closed; the daemon's operator sets one with " + how}
}

// orList joins words as "a", "a or b", "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// identify returns who presented the credential (a bearer token, or else the dashboard's
// session cookie), whether one was presented, and whether it is valid. A session carries
// exactly the rights of the token it was opened with, no more and no less than that token
// as a bearer header: what keeps a forged cross-site request from using it is the cookie's
// SameSite=Strict and the cross-origin check every unsafe request passes (see session.go).
func (a *authenticator) identify(r *http.Request) (who principal, presented, valid bool) {
	tok, presented := bearer(r)
	if presented {
		who, valid = a.match(tok)
		return who, true, valid
	}
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		who, valid = a.session(c.Value)
		return who, true, valid
	}
	return principal{}, false, false
}

// match returns who tok belongs to and whether it is a configured token. Every configured
// token is compared, in constant time (the config keeps tokens distinct, so at most one
// matches).
func (a *authenticator) match(tok string) (who principal, valid bool) {
	sum := sha256.Sum256([]byte(tok))
	found := 0
	for _, t := range a.tokens {
		if m := subtle.ConstantTimeCompare(sum[:], t.sum[:]); m == 1 {
			found = 1
			who = t.who
		}
	}
	return who, found == 1
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

// A session cookie's value is "<token name>.<expiry, Unix seconds>.<signature>": the
// signature is the base64url HMAC-SHA256, under the token's session key, of
// "v1|<name>|<expiry>". (The shared tokens' names are the role names of earlier versions,
// so their sessions survive the upgrade.) The daemon checks it and the expiry on every
// request; it keeps no session state, so a session ends when it expires or when its token
// changes (logging out deletes the browser's cookie; a copy of it stays valid until it
// expires).

// newSession returns the cookie value of a session of who that ends at exp; "" when no
// token has who's name.
func (a *authenticator) newSession(who principal, exp time.Time) string {
	if a.oidc != nil && strings.HasPrefix(who.name, "oidc:") {
		return a.oidc.newSession(who, exp)
	}
	for _, t := range a.tokens {
		if t.who.name == who.name {
			payload := who.name + "." + strconv.FormatInt(exp.Unix(), 10)
			return payload + "." + base64.RawURLEncoding.EncodeToString(sessionMAC(t.sessionKey, payload))
		}
	}
	return ""
}

// session returns who a session cookie's value belongs to and whether it is valid: signed
// by its token's current session key and not expired.
func (a *authenticator) session(v string) (principal, bool) {
	name, rest, ok1 := strings.Cut(v, ".")
	expText, sigText, ok2 := strings.Cut(rest, ".")
	exp, err := strconv.ParseInt(expText, 10, 64)
	sig, serr := base64.RawURLEncoding.DecodeString(sigText)
	if !ok1 || !ok2 || err != nil || serr != nil {
		return principal{}, false
	}
	if strings.HasPrefix(name, oidcSessionPrefix) {
		if a.oidc == nil {
			return principal{}, false
		}
		return a.oidc.session(name, expText, sig, a.now())
	}
	for _, t := range a.tokens {
		if t.who.name != name {
			continue
		}
		if !hmac.Equal(sig, sessionMAC(t.sessionKey, name+"."+expText)) || !a.now().Before(time.Unix(exp, 0)) {
			return principal{}, false
		}
		return t.who, true
	}
	return principal{}, false
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
// token is valid is told which role the route needs.
func (a *authenticator) decide(who principal, presented, valid bool, acc access) (principal, error) {
	if presented && !valid {
		return principal{}, &httpError{status: http.StatusForbidden, code: "forbidden",
			message: "the token is not valid for this daemon; send one of the tokens it was configured with"}
	}
	if slices.Contains(admits(acc), who.role) || acc == accessRead && a.publicRead {
		return who, nil
	}
	if !presented {
		return principal{}, &httpError{status: http.StatusUnauthorized, code: "unauthenticated",
			message: "this route needs a token; send Authorization: Bearer <token>"}
	}
	var need []string
	for _, r := range admits(acc) {
		need = append(need, r.String())
	}
	return who, &httpError{status: http.StatusForbidden, code: "forbidden",
		message: "this route needs the " + orList(need) + " role; token " + strconv.Quote(who.name) +
			" has the " + who.role.String() + " role, which is not enough"}
}

type principalKey struct{}

// authenticate returns who made the request when it may use a route of the given access,
// else the answer: 403 no_token_configured when no configured token admits the route
// (nothing is charged: there is no token to guess), else auth.decide's, charging failed
// attempts to the client's bucket of failures (s.tokenFail, shared by every route that takes
// a token and the login form): a token presented that matches none takes from it, and so
// does a request without one when chargeMissing; once the bucket is empty such a request is
// answered 429 instead. A valid token is never charged nor refused by the bucket, even when
// its role is not enough.
func (s *server) authenticate(r *http.Request, acc access, chargeMissing bool) (principal, error) {
	if err := s.auth.closed(acc); err != nil {
		return principal{}, err
	}
	who, presented, valid := s.auth.identify(r)
	who, err := s.auth.decide(who, presented, valid, acc)
	if err != nil && (presented && !valid || !presented && chargeMissing) {
		return who, authFailed(r, s.tokenFail, err)
	}
	return who, err
}

// require wraps a handler with an access check; who made the request is in its context.
// A wrong token counts as a failed attempt (authenticate).
func (s *server) require(acc access, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, err := s.authenticate(r, acc, false)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orchestrator"`)
			s.writeError(w, r, err)
			return
		}
		next(w, withPrincipal(r, who))
	}
}

// withPrincipal is r with who made it in its context, for actor and the pages.
func withPrincipal(r *http.Request, who principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, who))
}

// principalOf returns who made the request (the zero principal when anonymous).
func principalOf(r *http.Request) principal {
	who, _ := r.Context().Value(principalKey{}).(principal)
	return who
}

// actor names who made the request, for Trigger.By, cancels and the audit log:
// "api:<token name>", "oidc:<email>" for a session opened through the OpenID provider
// ("api:anonymous" for a public read).
func actor(r *http.Request) string {
	who := principalOf(r)
	switch {
	case who.name == "":
		return "api:anonymous"
	case strings.HasPrefix(who.name, "oidc:"):
		return who.name
	}
	return "api:" + who.name
}
