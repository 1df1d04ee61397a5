// Package outbound is the one HTTP layer under the clients of outside systems (Coolify,
// Flagsmith, Infisical). It holds, once, what every call to an outside system needs: the
// retry policy, the server's Retry-After (seconds or HTTP date), jittered exponential
// backoff, the User-Agent, the trace headers of internal/trace, a metric per attempt, and a
// pacing seam (Limiter).
//
// The retry policy depends on what a call does (Kind):
//
//   - An Idempotent call (a read, or a write that carries the whole state, so sending it twice
//     leaves the same result) is retried after a transport error, 429, and 5xx but 501.
//   - A Creating call (a POST that makes something: a version, a variable, a deployment) is
//     retried only when the failure shows the server did not act: a refused connection (no
//     request was sent), 429 and 503 (the server or its proxy turned the request away). After
//     an ambiguous failure (another 5xx, a timeout or a broken connection after the request
//     was sent) it is not retried: the client that made it re-reads to learn whether it took
//     effect, and otherwise reports an *OutcomeUnknownError (errors.Is ErrOutcomeUnknown).
//
// Redirects stay on the host: a Client follows a redirect only to the scheme, host and port of
// the request it answers (Options.Redirects: SameHost, or NoRedirects for none at all), so a
// request, its body and its headers (a token, a signature) reach no host nobody configured.
// SameHostRedirect is that rule for clients that do not send through a Client.
//
// A Retry-After longer than Policy.MaxRetryAfter ends the call at once with that answer, so a
// caller holding a lease does not sleep through it.
//
// A retried call's last answer speaks for its last attempt only: when an earlier attempt of an
// Idempotent call failed ambiguously and the last was refused (a 4xx), Settle says so
// (*MaybeAppliedError, errors.Is ErrMaybeApplied), so that nobody reads the refusal as proof
// that nothing was done.
package outbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
)

// MetricsFunc is told about every HTTP attempt (retries included): the system ("coolify"),
// the method, the route template (e.g. "/applications/{uuid}/envs", so label cardinality stays
// bounded), the response status (0 when no response arrived) and the attempt's duration. It
// must be safe for concurrent use and must not block.
type MetricsFunc func(system, method, route string, status int, d time.Duration)

// Policy bounds the retries of one call: at most 1+MaxRetries attempts; between them an
// exponential backoff from MinWait doubling up to MaxWait, each wait drawn from its upper half
// (jitter), or, after a 429 or 503, the server's Retry-After up to MaxRetryAfter.
type Policy struct {
	MaxRetries    int
	MinWait       time.Duration
	MaxWait       time.Duration
	MaxRetryAfter time.Duration
}

// Backoff is the wait before retry number attempt+1 when the server named none: MinWait·2^attempt
// capped at MaxWait, drawn uniformly from [d/2, d].
func (p Policy) Backoff(attempt int) time.Duration {
	d := p.MaxWait
	if attempt < 30 && p.MinWait > 0 {
		d = min(p.MinWait<<attempt, p.MaxWait)
	}
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// Kind says what a call does, and so after which failures it may be sent again.
type Kind int

const (
	// Auto: Creating for POST, Idempotent for every other method.
	Auto Kind = iota
	// Idempotent: sending the call twice leaves the same result.
	Idempotent
	// Creating: each call may make something new; never sent again after an ambiguous failure.
	Creating
)

func (k Kind) of(method string) Kind {
	if k != Auto {
		return k
	}
	if method == http.MethodPost {
		return Creating
	}
	return Idempotent
}

// Priority orders calls waiting on a Limiter; higher goes first.
type Priority int

// Priorities.
const (
	// PriorityLow is for work no run waits on (a plan's reads): it yields to every other
	// call. Set it with Background, so that nothing below raises it.
	PriorityLow    Priority = -10
	PriorityNormal Priority = 0
	// PriorityHigh is for calls that put things back (restores, cancels) or hold a lease.
	PriorityHigh Priority = 10
)

type priorityKey struct{}

// priority is the value under priorityKey: pinned is set by Background.
type priority struct {
	p      Priority
	pinned bool
}

// WithPriority returns a context whose calls wait on the Limiter with priority p; under
// Background it returns ctx as it is (the calls stay low).
func WithPriority(ctx context.Context, p Priority) context.Context {
	if v, _ := ctx.Value(priorityKey{}).(priority); v.pinned {
		return ctx
	}
	return context.WithValue(ctx, priorityKey{}, priority{p: p})
}

// Background returns a context whose calls all wait with PriorityLow, whatever a client
// does with WithPriority below it (the Coolify client raises its reads to PriorityHigh):
// for work that must never take the budget a run needs, such as a plan.
func Background(ctx context.Context) context.Context {
	return context.WithValue(ctx, priorityKey{}, priority{p: PriorityLow, pinned: true})
}

// PriorityFrom returns the priority set by WithPriority or Background, PriorityNormal by
// default.
func PriorityFrom(ctx context.Context) Priority {
	v, _ := ctx.Value(priorityKey{}).(priority)
	return v.p
}

// Limiter paces the attempts to one outside system: Wait returns when an attempt may be made,
// or an error (ctx's when it ends first); the attempt is then not made. The default never
// waits.
type Limiter interface {
	Wait(ctx context.Context, p Priority) error
}

// A Holder is a Limiter that can hold every attempt it paces: Options.Throttled says an
// answer was the server's refusal for its request budget, and Hold is told to let nothing
// through for the Retry-After the answer asked for (up to Policy.MaxRetryAfter), since the
// server would refuse it too.
type Holder interface {
	Limiter
	Hold(ctx context.Context, d time.Duration)
}

type noLimit struct{}

func (noLimit) Wait(context.Context, Priority) error { return nil }

// A Gate is asked, right before each attempt goes out (after the Limiter's wait, so a
// call that waited for the budget is asked at the moment it would be sent, and again before
// each retry), whether the caller may still send it. An error stops the call with that error,
// the attempt unsent and not retried. The engine puts one in the context of each run's work,
// so that a run another daemon took over sends nothing more (see WithGate).
type Gate func(ctx context.Context, method string) error

type gateKey struct{}

// WithGate returns a context whose calls are each asked of g before they go out. A context
// derived from it keeps g, also one that context.WithoutCancel made.
func WithGate(ctx context.Context, g Gate) context.Context {
	return context.WithValue(ctx, gateKey{}, g)
}

// ErrOutcomeUnknown is matched by every *OutcomeUnknownError.
var ErrOutcomeUnknown = errors.New("outcome unknown")

// OutcomeUnknownError is an ambiguous failure of a Creating call: the request was sent, and
// no answer says whether the server acted on it. Err is the failure (a 5xx error of the
// client's own type, or a transport error); errors.Is and errors.As reach it.
type OutcomeUnknownError struct {
	System string
	Method string
	Route  string
	Err    error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("%s %s %s: sent, but whether it took effect is unknown (not retried, it is not idempotent): %v",
		e.System, e.Method, e.Route, e.Err)
}

// Unwrap returns the failure.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Options configure a Client. System is required.
type Options struct {
	// System names the outside system in metrics, logs and errors ("coolify").
	System string
	// HTTPClient sends the attempts; its Transport and Timeout are used. Default: a client
	// with a 30 s timeout. Without a Transport, a shared one keeps up to 32 idle connections
	// per host (Go's default keeps 2).
	HTTPClient *http.Client
	Policy     Policy
	// Version goes into "User-Agent: orchestrator/<Version>"; "dev" when empty.
	Version string
	// Logger receives a record per retry (never a header or a body). Default: discard.
	Logger  *slog.Logger
	Metrics MetricsFunc
	// Limiter paces attempts. Default: no pacing.
	Limiter Limiter
	// RetryAfter reads the wait a 429 or 503 answer asks for when it has no Retry-After
	// header (Infisical writes it in the message). It may read resp.Body if it puts back what
	// it read. Optional.
	RetryAfter func(resp *http.Response) (time.Duration, bool)
	// Throttled says whether a 429 answer is the server's throttle (the budget of the
	// credentials is spent for now), not a refusal of this request alone; the Limiter, when
	// it is a Holder, is then held for the answer's Retry-After. It may read resp.Body if it
	// puts back what it read. Optional: without it, no answer holds the Limiter.
	Throttled func(resp *http.Response) bool
	// Now is the clock for HTTP-date Retry-After values. Default time.Now.
	Now func() time.Time
	// Redirects says which redirects are followed (default SameHost). It replaces
	// HTTPClient's own CheckRedirect.
	Redirects Redirects
}

// Redirects says which redirects a Client follows. A redirect it does not follow is not an
// error: its 3xx answer is the call's answer, which the client reports as any other status
// it did not expect. Nothing is sent to where it points.
type Redirects int

const (
	// SameHost follows at most 10 redirects, each to the scheme, host and port of the request
	// it answers (SameHostRedirect). A redirect elsewhere would send the request, its body and
	// its headers (a token, a signature) to a host nobody configured.
	SameHost Redirects = iota
	// NoRedirects follows none, on the same host either: for requests whose body and headers
	// must reach the configured URL and nothing else (signed notifications).
	NoRedirects
)

// maxRedirects is how many redirects one attempt follows at most (Go's own default).
const maxRedirects = 10

// SameHostRedirect is the http.Client CheckRedirect of SameHost, for the clients that do not
// send through a Client (the engine's HTTP health checks): a redirect is followed only to the
// scheme, host and port of the request it answers (host names compared without case, default
// ports made explicit), at most 10 in a row. Any other is not followed: the 3xx is the answer.
func SameHostRedirect(req *http.Request, via []*http.Request) error {
	if len(via) == 0 {
		return nil
	}
	if len(via) > maxRedirects || origin(req.URL) != origin(via[len(via)-1].URL) {
		return http.ErrUseLastResponse
	}
	return nil
}

// noRedirect is the CheckRedirect of NoRedirects.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// origin is a URL's scheme, host and port, lower-cased, the port made explicit.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// maxIdlePerHost is how many idle connections to one host the default transport keeps: as
// many as calls to one system overlap (a wave deploying in parallel, several runs, their
// deployment polls). Go's default of 2 closes the others after every burst, and the next
// burst dials, and on HTTPS handshakes, again.
const maxIdlePerHost = 32

// DefaultTransport sends the attempts of the clients built without a Transport of their own:
// Go's default transport, keeping maxIdlePerHost idle connections per host.
var DefaultTransport = func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = maxIdlePerHost
	return t
}()

// Client sends the requests of one outside-system client. It is safe for concurrent use.
type Client struct {
	o  Options
	rc *retryablehttp.Client
}

// New returns a Client for o.
func New(o Options) *Client {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Limiter == nil {
		o.Limiter = noLimit{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	if o.HTTPClient != nil {
		c := *o.HTTPClient
		hc = &c
	}
	hc.CheckRedirect = SameHostRedirect
	if o.Redirects == NoRedirects {
		hc.CheckRedirect = noRedirect
	}
	next := hc.Transport
	if next == nil {
		next = DefaultTransport
	}
	c := &Client{o: o}
	hc.Transport = &attemptTransport{c: c, next: next}
	c.rc = &retryablehttp.Client{
		HTTPClient:   hc,
		RetryWaitMin: o.Policy.MinWait,
		RetryWaitMax: o.Policy.MaxWait,
		RetryMax:     max(o.Policy.MaxRetries, 0),
		CheckRetry:   c.checkRetry,
		Backoff:      c.backoff,
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
	}
	return c
}

// UserAgent is the User-Agent header every request carries.
func (c *Client) UserAgent() string { return "orchestrator/" + c.o.Version }

// Request is one call.
type Request struct {
	Method string
	// URL is the whole URL, query included.
	URL string
	// Route is the path template for metrics and logs ("/applications/{uuid}").
	Route string
	// Header holds the call's own headers (Authorization, Accept, Content-Type); the Client
	// adds User-Agent and the trace headers.
	Header http.Header
	Body   []byte
	Kind   Kind
}

type metaKey struct{}

type meta struct {
	method string
	route  string
	kind   Kind
	// hist collects what the call's attempts showed; shared by them all.
	hist *history
}

// history is what the attempts of one call showed. The attempts run one after another on the
// caller's goroutine (retryablehttp calls CheckRetry between them, Settle comes after), so it
// needs no lock.
type history struct {
	// attempts counts the attempts sent so far (redirects included).
	attempts int
	// ambiguous describes the first attempt that may have been acted on without the caller
	// learning it ("" if none): a 5xx but 501 and 503, or a transport failure after sending.
	ambiguous string
}

func (h *history) noteAmbiguous(what string) {
	if h != nil && h.ambiguous == "" {
		h.ambiguous = what
	}
}

func (h *history) earlierAmbiguous() string {
	if h == nil {
		return ""
	}
	return h.ambiguous
}

func metaOf(ctx context.Context) meta {
	m, _ := ctx.Value(metaKey{}).(meta)
	return m
}

// Do sends r under the retry policy and returns the last answer, whatever its status: the
// caller reads and closes its body. It returns ctx's error when ctx ends; an
// *OutcomeUnknownError when a Creating call failed in transport after it was sent; otherwise
// the transport error of the last attempt (without the URL, which may carry a query).
func (c *Client) Do(ctx context.Context, r Request) (*http.Response, error) {
	kind := r.Kind.of(r.Method)
	ctx = context.WithValue(ctx, metaKey{}, meta{method: r.Method, route: r.Route, kind: kind, hist: &history{}})
	var body any
	if r.Body != nil {
		body = r.Body
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, r.Method, r.URL, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		req.Header[k] = vs
	}
	req.Header.Set("User-Agent", c.UserAgent())
	trace.SetHeaders(ctx, req.Header)

	resp, err := c.rc.Do(req)
	if err == nil {
		return resp, nil
	}
	if resp != nil {
		resp.Body.Close()
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		return nil, ctxErr
	}
	err = stripURL(err)
	if kind == Creating && !notSent(err) {
		return nil, &OutcomeUnknownError{System: c.o.System, Method: r.Method, Route: r.Route, Err: err}
	}
	return nil, err
}

// Settle wraps err, the error a client built from resp, the non-2xx last answer Do returned
// for r: in an *OutcomeUnknownError when r is a Creating call and the status leaves open
// whether the server acted (5xx but 501 and 503); in a *MaybeAppliedError when the answer is a
// 4xx but an earlier attempt of the same call may have been acted on. Otherwise it returns err
// as it is.
func (c *Client) Settle(r Request, resp *http.Response, err error) error {
	status := resp.StatusCode
	if r.Kind.of(r.Method) == Creating && ambiguousStatus(status) {
		return &OutcomeUnknownError{System: c.o.System, Method: r.Method, Route: r.Route, Err: err}
	}
	if status >= 400 && status < 500 && resp.Request != nil {
		if earlier := metaOf(resp.Request.Context()).hist.earlierAmbiguous(); earlier != "" {
			return &MaybeAppliedError{System: c.o.System, Method: r.Method, Route: r.Route, Earlier: earlier, Err: err}
		}
	}
	return err
}

// ambiguousStatus reports whether an answer with this status leaves open whether the server
// acted on the request: a 5xx but 501 (not implemented) and 503 (turned away).
func ambiguousStatus(status int) bool {
	return status >= 500 && status != http.StatusNotImplemented && status != http.StatusServiceUnavailable
}

// ErrMaybeApplied is matched by every *MaybeAppliedError.
var ErrMaybeApplied = errors.New("an earlier attempt may have taken effect")

// MaybeAppliedError is the last answer of a retried call that refused it (a 4xx, Err, of the
// client's own type: errors.Is and errors.As reach it) while an earlier attempt, Earlier,
// failed in a way that leaves open whether the server acted on it. The refusal proves only
// that the last attempt did nothing.
type MaybeAppliedError struct {
	System  string
	Method  string
	Route   string
	Earlier string
	Err     error
}

func (e *MaybeAppliedError) Error() string {
	return fmt.Sprintf("%s %s %s: an earlier attempt may have taken effect (%s), then: %v",
		e.System, e.Method, e.Route, e.Earlier, e.Err)
}

// Unwrap returns the last answer's error.
func (e *MaybeAppliedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrMaybeApplied) true.
func (e *MaybeAppliedError) Is(target error) bool { return target == ErrMaybeApplied }

// checkRetry is the policy of the package comment; it logs each retry it decides on.
func (c *Client) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	retry := c.retryable(ctx, resp, err)
	if retry {
		m := metaOf(ctx)
		attrs := []slog.Attr{slog.String(logkey.System, c.o.System), slog.String(logkey.Method, m.method),
			slog.String(logkey.Route, m.route)}
		if err != nil {
			attrs = append(attrs, slog.String(logkey.Error, stripURL(err).Error()))
		} else {
			attrs = append(attrs, slog.Int(logkey.Status, resp.StatusCode))
		}
		c.o.Logger.LogAttrs(ctx, slog.LevelInfo, "outside request retried", attrs...)
	}
	return retry, nil
}

func (c *Client) retryable(ctx context.Context, resp *http.Response, err error) bool {
	m := metaOf(ctx)
	switch {
	case err != nil && !notSent(err):
		m.hist.noteAmbiguous("attempt failed after it was sent: " + stripURL(err).Error())
	case err == nil && ambiguousStatus(resp.StatusCode):
		m.hist.noteAmbiguous("attempt answered " + strconv.Itoa(resp.StatusCode))
	}
	if err != nil {
		var le *limitError
		var ge *gateError
		if errors.As(err, &le) || errors.As(err, &ge) {
			return false
		}
		return m.kind != Creating || notSent(err)
	}
	switch s := resp.StatusCode; {
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		d, ok := c.retryAfter(resp)
		return !ok || d <= c.o.Policy.MaxRetryAfter
	case s >= 500 && s != http.StatusNotImplemented:
		return m.kind != Creating
	}
	return false
}

// backoff waits the server's Retry-After after a 429 or 503, else the policy's jittered backoff.
func (c *Client) backoff(_, _ time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if d, ok := c.retryAfter(resp); ok {
			return min(d, c.o.Policy.MaxRetryAfter)
		}
	}
	return c.o.Policy.Backoff(attempt)
}

func (c *Client) retryAfter(resp *http.Response) (time.Duration, bool) {
	if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), c.o.Now()); ok {
		return d, true
	}
	if c.o.RetryAfter != nil {
		return c.o.RetryAfter(resp)
	}
	return 0, false
}

// ParseRetryAfter reads a Retry-After value: whole seconds, or an HTTP date (a date in the
// past means now). It reports false for an empty or malformed value.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// notSent reports whether a transport error shows that no request reached the server: the
// connection was refused, the name did not resolve, or the Limiter or the Gate refused the
// attempt.
func notSent(err error) bool {
	var le *limitError
	var ge *gateError
	if errors.As(err, &le) || errors.As(err, &ge) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// stripURL drops the *url.Error wrapper, whose text repeats the URL and its query.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// holdIfThrottled holds the Limiter when resp is the server's throttle (Options.Throttled)
// with a Retry-After, for that wait up to Policy.MaxRetryAfter, and says so in the log.
func (c *Client) holdIfThrottled(ctx context.Context, m meta, resp *http.Response) {
	h, ok := c.o.Limiter.(Holder)
	if !ok || c.o.Throttled == nil || resp.StatusCode != http.StatusTooManyRequests {
		return
	}
	d, ok := c.retryAfter(resp)
	if !ok || d <= 0 || !c.o.Throttled(resp) {
		return
	}
	d = min(d, c.o.Policy.MaxRetryAfter)
	h.Hold(ctx, d)
	c.o.Logger.LogAttrs(ctx, slog.LevelWarn, "outside system throttled the credentials: every call of their budget waits",
		slog.String(logkey.System, c.o.System), slog.String(logkey.Method, m.method), slog.String(logkey.Route, m.route),
		slog.Duration(logkey.Wait, d))
}

// limitError is a Limiter's refusal; the attempt was not made and is not retried.
type limitError struct{ err error }

func (e *limitError) Error() string { return "outbound limiter: " + e.err.Error() }
func (e *limitError) Unwrap() error { return e.err }

// gateError is a Gate's refusal, as it said it; the attempt was not made and is not retried.
type gateError struct{ err error }

func (e *gateError) Error() string { return e.err.Error() }
func (e *gateError) Unwrap() error { return e.err }

// attemptTransport paces each attempt on the Limiter, asks the context's Gate, and reports
// the attempt to Metrics.
type attemptTransport struct {
	c    *Client
	next http.RoundTripper
}

func (t *attemptTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	if err := t.c.o.Limiter.Wait(ctx, PriorityFrom(ctx)); err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, &limitError{err: err}
	}
	if g, _ := ctx.Value(gateKey{}).(Gate); g != nil {
		if err := g(ctx, r.Method); err != nil {
			if r.Body != nil {
				r.Body.Close()
			}
			return nil, &gateError{err: err}
		}
	}
	m := metaOf(ctx)
	span := t.c.startSpan(ctx, r, m)
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	endSpan(span, resp, err)
	if err == nil {
		t.c.holdIfThrottled(ctx, m, resp)
	}
	if t.c.o.Metrics != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.c.o.Metrics(t.c.o.System, r.Method, m.route, status, time.Since(start))
	}
	return resp, err
}
