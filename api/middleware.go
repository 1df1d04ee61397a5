package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/panics"
)

// requestIDHeader carries the request ID both ways: a client may send one, the answer
// always carries the one used in the daemon's log.
const requestIDHeader = "X-Request-ID"

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

type requestIDKey struct{}

// requestID returns the request's ID ("" outside a request).
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// routePattern is the chi route pattern that matched ("/v1/runs/{id}"), or "unmatched".
// Logs and metrics use it instead of the raw path, which may hold anything a client sent.
func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		if p := rc.RoutePattern(); p != "" {
			return p
		}
	}
	return "unmatched"
}

// statusWriter records the status of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
	stream bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.stream = w.Header().Get("Content-Type") == "text/event-stream"
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and SetWriteDeadline.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe gives every request an ID and writes one access-log line
// and the HTTP metrics when the request ends. Query strings are never logged: a client may
// put anything there, a token included.
func (s *server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get(requestIDHeader)
		if !requestIDPattern.MatchString(id) {
			id = newRequestID()
		}
		w.Header().Set(requestIDHeader, id)
		ctx := context.WithValue(r.Context(), requestIDKey{}, id)
		r = r.WithContext(context.WithValue(ctx, clientCtxKey{}, s.client(r)))
		sw := &statusWriter{ResponseWriter: w}
		d := bodyTimeout
		if strings.HasPrefix(r.URL.Path, "/v1/webhooks/") {
			d = webhookBodyTimeout
		}
		bodyDeadline(sw, r, d)

		defer func() { // runs during a panic too (recoverPanics re-panics only to abort a stream)
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			d := time.Since(start)
			route := routePattern(r)
			s.metrics.HTTPRequest(route, r.Method, status, d, sw.stream)
			level := slog.LevelInfo
			if route == "/healthz" || route == "/readyz" || route == "/metrics" {
				level = slog.LevelDebug
			}
			s.log.LogAttrs(r.Context(), level, "http request",
				slog.String(logkey.RequestID, id),
				slog.String(logkey.Method, r.Method),
				slog.String(logkey.Route, route),
				slog.Int(logkey.Status, status),
				slog.Duration(logkey.Duration, d),
				slog.String(logkey.Remote, clientIP(r)))
		}()
		next.ServeHTTP(sw, r)
	})
}

// recoverPanics turns a panic of a handler into a 500 JSON answer and logs it once, with its
// stack; the daemon goes on serving. When the answer had already begun (an event stream), the
// response is aborted instead (http.ErrAbortHandler), so a client never takes a cut-off body
// for a whole one.
func (s *server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := panics.Call(func() error { next.ServeHTTP(w, r); return nil })
		if err == nil {
			return
		}
		if sw, ok := w.(*statusWriter); ok && sw.status != 0 {
			s.logPanic(r, "handler panicked", err)
			panic(http.ErrAbortHandler)
		}
		s.writeError(w, r, err) // logs the stack
	})
}

// goRequest runs fn in a goroutine that belongs to request r: wg waits for it, and a panic in
// fn is logged with its stack and cancels the request's work (cancel) instead of killing the
// process. Every goroutine a handler starts goes through here.
func (s *server) goRequest(r *http.Request, wg *sync.WaitGroup, cancel context.CancelFunc, fn func()) {
	wg.Go(func() {
		if err := panics.Call(func() error { fn(); return nil }); err != nil {
			s.logPanic(r, "request goroutine panicked", err)
			cancel()
		}
	})
}

// logPanic logs a recovered panic of request r with its stack.
func (s *server) logPanic(r *http.Request, msg string, err error) {
	panics.Log(r.Context(), s.log, msg, err,
		slog.String(logkey.RequestID, requestID(r.Context())), slog.String(logkey.Route, routePattern(r)))
}

// limitBody caps the request body at n bytes.
func limitBody(n int64, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, n)
		next(w, r)
	}
}

type clientCtxKey struct{}

// clientAddr is a request's client: its address, and what per-client caps count it as.
type clientAddr struct{ ip, key string }

// clientIP is the client's address without its port: the peer's, or, when the peer is one
// of trusted_proxies, the one its X-Forwarded-For names (see forwardedClient). Behind a
// proxy that is not listed, every client shares the proxy's address, which errs on the safe
// side. Logs name it; per-client caps and buckets count by clientKey.
func clientIP(r *http.Request) string {
	if c, ok := r.Context().Value(clientCtxKey{}).(clientAddr); ok {
		return c.ip
	}
	return remoteHost(r)
}

// clientKey is the client as per-client caps and buckets count it: its address, or for
// IPv6 its /64 (addrKey).
func clientKey(r *http.Request) string {
	if c, ok := r.Context().Value(clientCtxKey{}).(clientAddr); ok {
		return c.key
	}
	return clientKeyOf(remoteHost(r))
}

// client works out clientIP and clientKey for a request entering the server.
func (s *server) client(r *http.Request) clientAddr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		host := remoteHost(r)
		return clientAddr{ip: host, key: clientKeyOf(host)}
	}
	a := forwardedClient(r, ap.Addr().Unmap(), s.trusted)
	return clientAddr{ip: a.String(), key: addrKeyString(a)}
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// limiter is a token bucket per key (a client, a credential). Buckets idle for longer than
// it takes them to refill are dropped as new keys arrive, so memory stays bounded by the
// active keys.
type limiter struct {
	rate  config.Rate
	now   func() time.Time
	mu    sync.Mutex
	by    map[string]*bucket
	sweep time.Time
}

// bucket holds tokens, refilled at the limiter's rate up to its burst. It may go into debt
// (below zero) through charge: the next tokens then pay the debt first.
type bucket struct {
	tokens float64
	last   time.Time // of the last refill
}

func newLimiter(r config.Rate, now func() time.Time) *limiter {
	if r.Burst < 1 {
		r.Burst = 1
	}
	return &limiter{rate: r, now: now, by: map[string]*bucket{}}
}

// bucketAt returns key's bucket refilled up to now (l.mu held).
func (l *limiter) bucketAt(key string, now time.Time) *bucket {
	idle := time.Duration(float64(l.rate.Burst)/l.rate.PerSecond*float64(time.Second)) + time.Minute
	if now.Sub(l.sweep) > idle {
		for k, b := range l.by {
			if now.Sub(b.last) > idle {
				delete(l.by, k)
			}
		}
		l.sweep = now
	}
	b := l.by[key]
	if b == nil {
		b = &bucket{tokens: float64(l.rate.Burst), last: now}
		l.by[key] = b
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(l.rate.Burst), b.tokens+d.Seconds()*l.rate.PerSecond)
		b.last = now
	}
	return b
}

// wait is how long until b holds a whole token (0 when it does).
func (l *limiter) wait(b *bucket) time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / l.rate.PerSecond * float64(time.Second))
}

// allow takes a token for key; when none is left it takes nothing and returns how long
// until one is.
func (l *limiter) allow(key string) (bool, time.Duration) {
	if l.rate.PerSecond <= 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketAt(key, now)
	if d := l.wait(b); d > 0 {
		return false, d
	}
	b.tokens--
	return true, 0
}

// ready reports whether key's bucket holds a token, without taking it; when it does not, it
// returns how long until it will.
func (l *limiter) ready(key string) (bool, time.Duration) {
	if l.rate.PerSecond <= 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.wait(l.bucketAt(key, now))
	return d == 0, d
}

// charge takes a token from key's bucket whatever it holds: for work that ready allowed
// and that turned out to count (it may leave the bucket in debt when several such went
// ahead at once).
func (l *limiter) charge(key string) {
	if l.rate.PerSecond <= 0 {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bucketAt(key, now).tokens--
}

// tooMany is the 429 answer: Retry-After in whole seconds, at least 1.
func tooMany(wait time.Duration, what string) error {
	secs := max(int(math.Ceil(wait.Seconds())), 1)
	return &httpError{status: http.StatusTooManyRequests, code: "rate_limited",
		message: what + "; retry after " + strconv.Itoa(secs) + "s", retryAfter: secs}
}

// limitCredential takes a token from the bucket of a credential that checked out (a named
// token, a webhook provider's secret): genuine callers share their bucket with no one who
// lacks the credential.
func limitCredential(l *limiter, credential string) error {
	if ok, wait := l.allow(credential); !ok {
		return tooMany(wait, "too many requests with this credential")
	}
	return nil
}

// authFailed is the answer to a request whose credentials did not check out: err, or 429
// once the client address has used up its own bucket of failed attempts (fail).
func authFailed(r *http.Request, fail *limiter, err error) error {
	if ok, wait := fail.allow(clientKey(r)); !ok {
		return tooMany(wait, "too many failed attempts from this address")
	}
	return err
}

// requireLimited is require with rate limits in the right order: the token is checked
// first (constant time), then a valid one takes a token from its credential's bucket in ok,
// and an invalid or missing one from the client address's bucket of failures.
func (s *server) requireLimited(acc access, ok *limiter, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, err := s.authenticate(r, acc, true)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orchestrator"`)
			s.writeError(w, r, err)
			return
		}
		if err := limitCredential(ok, "token:"+who.name); err != nil {
			s.writeError(w, r, err)
			return
		}
		next(w, withPrincipal(r, who))
	}
}
