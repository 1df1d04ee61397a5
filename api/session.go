package api

import (
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
)

// The dashboard's session.
//
// Browsers cannot send a bearer header from EventSource, so an operator logs in: GET /login
// is a form, POST /login checks the token and opens a session in the cookie
// orchestrator_token (HttpOnly, SameSite=Strict, Path=/, 12 hours, and Secure whenever the
// request came over TLS, directly or through a trusted proxy's X-Forwarded-Proto). The
// cookie holds the token's name, the session's expiry and their HMAC under a key derived
// from the token (auth.go), never the token: the daemon enforces the 12 hours itself, and a
// session ends when its token is rotated. A token never travels in a URL, where it would
// land in browser history and proxy logs. POST /logout clears the cookie.
//
// The session carries exactly the rights of its token (auth.go): a viewer reads, a deployer
// may cancel, an approver may approve, an admin may also release and freeze locks. What keeps another
// site from using a logged-in browser is, besides SameSite=Strict, crossOrigin: every
// request with an unsafe method passes net/http's CrossOriginProtection (Sec-Fetch-Site,
// else Origin against Host), whatever its credential.

const (
	// sessionTTL is how long the dashboard cookie lives.
	sessionTTL = 12 * time.Hour
	// maxLoginBody caps the login form.
	maxLoginBody = 8 << 10
)

// crossOrigin refuses, with 403, any request with an unsafe method (POST, DELETE, …) that a
// browser marks as coming from another origin. Requests without Sec-Fetch-Site and Origin
// (curl, the CLI, CI, webhook senders) pass: they carry no ambient cookie.
func (s *server) crossOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &httpError{status: http.StatusForbidden, code: "cross_origin",
			message: "cross-origin request refused: the dashboard's actions must come from its own pages"})
	}))
	return cop.Handler(next)
}

// overTLS reports whether the client reached the daemon over TLS: the connection itself, or
// a trusted proxy (trusted_proxies) that says so in X-Forwarded-Proto. The header of any
// other peer is ignored.
func (s *server) overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !trustedAddr(s.trusted, peer.Addr().Unmap()) {
		return false
	}
	// Any hop that says https makes the cookie Secure: wrongly so, a browser on plain HTTP
	// only fails to keep its own cookie; the other way round, the cookie would travel in clear.
	for _, v := range r.Header.Values("X-Forwarded-Proto") {
		for p := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), "https") {
				return true
			}
		}
	}
	return false
}

// setSession opens a session of who for sessionTTL in the dashboard cookie; the zero
// principal deletes the cookie.
func (s *server) setSession(w http.ResponseWriter, r *http.Request, who principal) {
	value, maxAge := "", -1
	if who.role != roleNone {
		value, maxAge = s.auth.newSession(who, s.now().Add(sessionTTL)), int(sessionTTL.Seconds())
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.overTLS(r),
	})
}

// session is what a page's header shows and which actions the page offers, from who made
// the request (nobody when reads are public and nobody logged in).
type session struct {
	Name       string // the token's name; "" when not logged in
	Role       string // "viewer", "deployer", "approver", "admin"; "" when not logged in
	CanCancel  bool   // deployer or admin: cancel a run
	CanApprove bool   // approver or admin: approve or reject a run
	CanAdmin   bool   // admin: force-release, freeze, unfreeze
}

func sessionOf(r *http.Request) session {
	who := principalOf(r)
	if who.role == roleNone {
		return session{}
	}
	return session{Name: who.name, Role: who.role.String(),
		CanCancel:  slices.Contains(admits(accessTrigger), who.role),
		CanApprove: slices.Contains(admits(accessApprove), who.role),
		CanAdmin:   slices.Contains(admits(accessAdmin), who.role)}
}

type loginData struct {
	Title   string
	Session session
	Next    string // where to go after logging in
	Error   string
	OIDC    bool // offer the login through the OpenID provider
}

// renderLogin answers the login page with status.
func (s *server) renderLogin(w http.ResponseWriter, r *http.Request, status int, next, problem string) {
	s.render(w, r, status, s.pages.login, loginData{Title: "Log in", Next: safeNext(next), Error: problem, OIDC: s.auth.oidc != nil})
}

// handleLoginPage serves GET /login?next=.
func (s *server) handleLoginPage() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.renderLogin(w, r, http.StatusOK, r.URL.Query().Get("next"), "")
	}
}

// handleLogin serves POST /login (form: token, next): a valid token opens a session of its
// role in the cookie and the browser is sent on to next; anything else shows the form again
// with the reason. Failed attempts take from the client address's own bucket, as failed
// API credentials do.
func (s *server) handleLogin() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
		if err := r.ParseForm(); err != nil {
			s.renderLogin(w, r, http.StatusBadRequest, "", "The form could not be read; send it again.")
			return
		}
		next := r.PostForm.Get("next")
		tok := strings.TrimSpace(r.PostForm.Get("token"))
		if tok == "" {
			s.renderLogin(w, r, http.StatusBadRequest, next, "Enter a token.")
			return
		}
		if err := s.auth.noToken(admits(accessRead)); err != nil {
			// Nothing to log in with: say so rather than that this token is wrong.
			_, detail, _ := toHTTP(err)
			s.renderLogin(w, r, http.StatusForbidden, next, sentence(detail.Message))
			return
		}
		who, valid := s.auth.match(tok)
		if !valid {
			status, detail, retryAfter := toHTTP(authFailed(r, s.tokenFail, &httpError{status: http.StatusForbidden,
				code: "forbidden", message: "That token is not valid for this daemon."}))
			if retryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			}
			s.renderLogin(w, r, status, next, detail.Message)
			return
		}
		s.setSession(w, r, who)
		s.log.InfoContext(r.Context(), "dashboard login",
			slog.String(logkey.RequestID, requestID(r.Context())), slog.String(logkey.Subject, who.name),
			slog.String(logkey.Role, who.role.String()),
			slog.String(logkey.Remote, clientIP(r)))
		http.Redirect(w, r, safeNext(next), http.StatusSeeOther)
	}
}

// handleLogout serves POST /logout: the cookie is deleted, the browser sent to /login.
func (s *server) handleLogout() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.setSession(w, r, principal{})
		http.Redirect(w, r, "/login", http.StatusSeeOther)
	}
}

// requirePage is require for the dashboard's pages: a browser without a (valid) token gets
// the login page, with the status (401, 403 or 429) the API would answer, instead of JSON.
func (s *server) requirePage(acc access, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, err := s.authenticate(r, acc, false)
		if err != nil {
			status, detail, retryAfter := toHTTP(err)
			problem := ""
			switch {
			case detail.Code == "no_token_configured":
				problem = sentence(detail.Message)
			case status == http.StatusUnauthorized:
			case status == http.StatusTooManyRequests:
				w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
				problem = detail.Message
			case strings.HasPrefix(detail.Message, "this route needs the"):
				problem = sentence(detail.Message) + " Log in with a token of that role."
			default:
				problem = "The session is no longer valid (it expired, or the token was rotated): log in again."
			}
			s.renderLogin(w, r, status, r.URL.Path, problem) // not the query: it may hold anything
			return
		}
		next(w, withPrincipal(r, who))
	}
}

// sentence is an API message as a sentence for a page: capitalized, with a full stop.
func sentence(msg string) string {
	if msg == "" {
		return ""
	}
	return strings.ToUpper(msg[:1]) + msg[1:] + "."
}

// safeNext is a local path to send the browser to after logging in: next when it is a path
// of this daemon, else "/". It never names another host ("//evil", "/\evil", "https://…").
func safeNext(next string) string {
	if next == "" || next[0] != '/' || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n\t") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	if u.Path == "/login" {
		return "/"
	}
	return u.RequestURI()
}
