package outbound_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
)

var fast = outbound.Policy{MaxRetries: 3, MinWait: time.Millisecond, MaxWait: 2 * time.Millisecond, MaxRetryAfter: time.Second}

// attempt is one call a metrics hook saw.
type attempt struct {
	system, method, route string
	status                int
}

type recorder struct {
	mu  sync.Mutex
	got []attempt
}

func (r *recorder) metric(system, method, route string, status int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, attempt{system, method, route, status})
}

func (r *recorder) all() []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]attempt(nil), r.got...)
}

// server answers each request with the next status of statuses (the last one repeats) and
// counts requests.
func server(t *testing.T, statuses ...int) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		w.WriteHeader(statuses[min(i, len(statuses)-1)])
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func do(t *testing.T, c *outbound.Client, method, url string, kind outbound.Kind) (int, error) {
	t.Helper()
	r := outbound.Request{Method: method, URL: url, Route: "/things", Body: []byte(`{}`), Kind: kind}
	resp, err := c.Do(context.Background(), r)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode >= 300 {
		return resp.StatusCode, c.Settle(r, resp, errors.New(http.StatusText(resp.StatusCode)))
	}
	return resp.StatusCode, nil
}

// A creating POST is sent once after an ambiguous 5xx and reported as of unknown outcome;
// an idempotent call is retried through the same answers; 503 and 429 are retried for both.
func TestCreatingCallIsNotRetriedBlindly(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     outbound.Kind
		method   string
		statuses []int
		attempts int32
		status   int
		unknown  bool
	}{
		{"POST 502", outbound.Auto, "POST", []int{502, 201}, 1, 502, true},
		{"POST 500", outbound.Creating, "POST", []int{500, 201}, 1, 500, true},
		{"POST 504", outbound.Auto, "POST", []int{504, 201}, 1, 504, true},
		{"POST 503 then 201", outbound.Auto, "POST", []int{503, 201}, 2, 201, false},
		{"POST 429 then 201", outbound.Auto, "POST", []int{429, 201}, 2, 201, false},
		{"POST 400", outbound.Auto, "POST", []int{400}, 1, 400, false},
		{"POST marked idempotent 502 then 200", outbound.Idempotent, "POST", []int{502, 200}, 2, 200, false},
		{"PUT 502 then 200", outbound.Auto, "PUT", []int{502, 200}, 2, 200, false},
		{"GET 502 always", outbound.Auto, "GET", []int{502}, 4, 502, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, n := server(t, tc.statuses...)
			c := outbound.New(outbound.Options{System: "fake", Policy: fast})
			status, err := do(t, c, tc.method, srv.URL, tc.kind)
			if got := n.Load(); got != tc.attempts {
				t.Errorf("attempts: got %d, want %d", got, tc.attempts)
			}
			if status != tc.status {
				t.Errorf("status: got %d, want %d", status, tc.status)
			}
			if got := errors.Is(err, outbound.ErrOutcomeUnknown); got != tc.unknown {
				t.Errorf("outcome unknown: got %v (%v), want %v", got, err, tc.unknown)
			}
		})
	}
}

// A connection broken after the request was sent leaves a creating call's outcome unknown
// (one attempt); a refused connection sent nothing, so it is retried, and is not "unknown".
func TestTransportFailures(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.ReadAll(r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // the request arrived; the answer never leaves
		}
	}))
	defer srv.Close()
	rec := &recorder{}
	c := outbound.New(outbound.Options{System: "fake", Policy: fast, Metrics: rec.metric})
	_, err := do(t, c, "POST", srv.URL, outbound.Auto)
	var oe *outbound.OutcomeUnknownError
	if !errors.As(err, &oe) || oe.System != "fake" || oe.Route != "/things" || n.Load() != 1 {
		t.Errorf("POST, connection dropped: err %v after %d attempts, want OutcomeUnknownError after 1", err, n.Load())
	}
	n.Store(0)
	if _, err := do(t, c, "GET", srv.URL, outbound.Auto); err == nil || errors.Is(err, outbound.ErrOutcomeUnknown) || n.Load() != 4 {
		t.Errorf("GET, connection dropped: err %v after %d attempts, want a transport error after 4", err, n.Load())
	}

	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close()
	rec.mu.Lock()
	rec.got = nil
	rec.mu.Unlock()
	_, err = do(t, c, "POST", url, outbound.Auto)
	if err == nil || errors.Is(err, outbound.ErrOutcomeUnknown) {
		t.Errorf("POST, connection refused: got %v, want a plain transport error (nothing was sent)", err)
	}
	if got := len(rec.all()); got != 4 {
		t.Errorf("POST, connection refused: %d attempts, want 4 (retried: nothing was sent)", got)
	}
}

// Every attempt is reported with its system, method, route and status (0 without answer);
// every request carries the User-Agent and the trace headers.
func TestMetricsAndHeaders(t *testing.T) {
	var mu sync.Mutex
	var headers []http.Header
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers = append(headers, r.Header.Clone())
		mu.Unlock()
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	rec := &recorder{}
	c := outbound.New(outbound.Options{System: "flagsmith", Policy: fast, Metrics: rec.metric, Version: "1.2.3"})
	ctx := trace.With(context.Background(), "run-7", 42)
	resp, err := c.Do(ctx, outbound.Request{Method: "GET", URL: srv.URL + "/x?q=1", Route: "/x/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := []attempt{{"flagsmith", "GET", "/x/{id}", 502}, {"flagsmith", "GET", "/x/{id}", 200}}
	if got := rec.all(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("metrics: got %+v, want %+v", got, want)
	}
	for i, h := range headers {
		if h.Get("User-Agent") != "orchestrator/1.2.3" || h.Get(trace.HeaderRun) != "run-7" || h.Get(trace.HeaderFence) != "42" {
			t.Errorf("attempt %d headers: User-Agent %q, run %q, fence %q", i+1, h.Get("User-Agent"), h.Get(trace.HeaderRun), h.Get(trace.HeaderFence))
		}
	}
}

// limiter records the priorities it was asked with and refuses when told to.
type limiter struct {
	mu     sync.Mutex
	asked  []outbound.Priority
	refuse error
}

func (l *limiter) Wait(_ context.Context, p outbound.Priority) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked = append(l.asked, p)
	return l.refuse
}

// Every attempt waits on the Limiter with the context's priority; a refusal sends nothing
// and is not retried.
func TestLimiterPacesEveryAttempt(t *testing.T) {
	srv, n := server(t, 502, 200)
	l := &limiter{}
	c := outbound.New(outbound.Options{System: "coolify", Policy: fast, Limiter: l})
	ctx := outbound.WithPriority(context.Background(), outbound.PriorityHigh)
	resp, err := c.Do(ctx, outbound.Request{Method: "GET", URL: srv.URL, Route: "/"})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(l.asked) != 2 || l.asked[0] != outbound.PriorityHigh || l.asked[1] != outbound.PriorityHigh {
		t.Errorf("limiter asked %v, want PriorityHigh twice", l.asked)
	}
	l.refuse = errors.New("budget spent")
	n.Store(0)
	_, err = c.Do(context.Background(), outbound.Request{Method: "POST", URL: srv.URL, Route: "/"})
	if err == nil || errors.Is(err, outbound.ErrOutcomeUnknown) || n.Load() != 0 || len(l.asked) != 3 {
		t.Errorf("refused: err %v, %d requests sent, limiter asked %d times; want a plain error, 0 sent, asked once more",
			err, n.Load(), len(l.asked))
	}
}

// A Gate in the context is asked before every attempt, retries included, after the
// Limiter; its refusal ends the call with its error, nothing sent, nothing retried, not
// reported as of unknown outcome (a creating call it stopped was never sent).
func TestGateAsksBeforeEveryAttempt(t *testing.T) {
	srv, n := server(t, 502, 200)
	l := &limiter{}
	c := outbound.New(outbound.Options{System: "coolify", Policy: fast, Limiter: l})
	var asked []string
	var refuse error
	gate := func(_ context.Context, method string) error {
		asked = append(asked, method)
		return refuse
	}
	// A context made from the gated one by WithoutCancel keeps the gate.
	ctx := context.WithoutCancel(outbound.WithGate(context.Background(), gate))
	resp, err := c.Do(ctx, outbound.Request{Method: "GET", URL: srv.URL, Route: "/"})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(asked) != 2 || len(l.asked) != 2 {
		t.Errorf("gate asked %v and limiter %d times for a call retried once; want twice each", asked, len(l.asked))
	}

	refuse = errors.New("run taken over by node-b")
	n.Store(0)
	asked = nil
	_, err = c.Do(ctx, outbound.Request{Method: "POST", URL: srv.URL, Route: "/"})
	if !errors.Is(err, refuse) || errors.Is(err, outbound.ErrOutcomeUnknown) || n.Load() != 0 || len(asked) != 1 || asked[0] != "POST" {
		t.Errorf("refused: err %v, %d requests sent, gate asked %v; want the gate's error (not of unknown outcome), 0 sent, asked once for POST",
			err, n.Load(), asked)
	}
	if resp, err := c.Do(context.Background(), outbound.Request{Method: "POST", URL: srv.URL, Route: "/"}); err != nil {
		t.Errorf("a call without the gate: %v", err)
	} else {
		resp.Body.Close()
	}
}

// A Retry-After beyond the policy's cap ends the call at once with that answer.
func TestRetryAfterOverCapEndsTheCall(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	c := outbound.New(outbound.Options{System: "x", Policy: fast})
	status, _ := do(t, c, "GET", srv.URL, outbound.Auto)
	if status != 429 || n.Load() != 1 {
		t.Errorf("got %d after %d attempts, want 429 after 1", status, n.Load())
	}
}

// Under Background every attempt waits with PriorityLow, even when a client raises the
// context's priority below it (the Coolify client raises every read to PriorityHigh).
func TestBackgroundPriorityIsNotRaised(t *testing.T) {
	srv, _ := server(t, 200)
	l := &limiter{}
	c := outbound.New(outbound.Options{System: "coolify", Policy: fast, Limiter: l})
	ctx := outbound.WithPriority(outbound.Background(context.Background()), outbound.PriorityHigh)
	resp, err := c.Do(ctx, outbound.Request{Method: "GET", URL: srv.URL, Route: "/"})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(l.asked) != 1 || l.asked[0] != outbound.PriorityLow {
		t.Errorf("limiter asked %v, want PriorityLow once", l.asked)
	}
	if p := outbound.PriorityFrom(context.Background()); p != outbound.PriorityNormal {
		t.Errorf("default priority %v, want normal", p)
	}
}

// The last answer of a retried call speaks for its last attempt only: a 4xx after an attempt
// that failed ambiguously (a 5xx but 501 and 503) is a *MaybeAppliedError naming that
// attempt, and still the client's own error underneath; a 4xx after attempts that were only
// turned away (429, 503), or at once, is returned as it is.
func TestRefusalAfterAmbiguousAttemptMayHaveApplied(t *testing.T) {
	for _, tc := range []struct {
		name     string
		statuses []int
		maybe    bool
	}{
		{"PATCH 500 then 409", []int{500, 409}, true},
		{"PATCH 502 then 404", []int{502, 404}, true},
		{"PATCH 503 then 409", []int{503, 409}, false},
		{"PATCH 429 then 409", []int{429, 409}, false},
		{"PATCH 409", []int{409}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := server(t, tc.statuses...)
			c := outbound.New(outbound.Options{System: "fake", Policy: fast})
			_, err := do(t, c, "PATCH", srv.URL, outbound.Auto)
			var me *outbound.MaybeAppliedError
			if got := errors.As(err, &me); got != tc.maybe {
				t.Fatalf("maybe applied: got %v (%v), want %v", got, err, tc.maybe)
			}
			if tc.maybe && (me.Earlier != "attempt answered "+itoa(tc.statuses[0]) || err.Error() == "" ||
				errors.Unwrap(err).Error() != http.StatusText(tc.statuses[1])) {
				t.Errorf("err = %v (earlier %q)", err, me.Earlier)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// Calls that overlap keep their connections: after a burst of concurrent calls to one host,
// the next burst reuses them instead of dialing (and, on HTTPS, handshaking) again. Go's
// default transport keeps only 2 idle connections per host and closes the rest.
func TestConcurrentCallsReuseConnections(t *testing.T) {
	const width, bursts = 8, 4
	var dials atomic.Int32
	var arrived sync.WaitGroup
	arrived.Add(width)
	all := make(chan struct{})
	var mu sync.Mutex
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every call of a burst is in flight at once: each answers when all have arrived.
		mu.Lock()
		wait := all
		mu.Unlock()
		arrived.Done()
		<-wait
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := outbound.New(outbound.Options{System: "test", Policy: fast})
	for range bursts {
		var calls sync.WaitGroup
		for range width {
			calls.Go(func() {
				if _, err := do(t, c, http.MethodGet, srv.URL, outbound.Idempotent); err != nil {
					t.Error(err)
				}
			})
		}
		arrived.Wait()
		mu.Lock()
		arrived.Add(width)
		close(all)
		all = make(chan struct{})
		mu.Unlock()
		calls.Wait()
	}
	if got := dials.Load(); got != width {
		t.Errorf("%d bursts of %d concurrent calls opened %d connections, want %d (one per call in flight)", bursts, width, got, width)
	}
}

// TestRedirectsStayOnTheHost: a redirect to the same scheme, host and port is followed; one
// to another host (here another port of 127.0.0.1) is not: the 3xx is the call's answer and
// the other server sees no request, neither the body nor the headers. With NoRedirects not
// even a redirect on the same host is followed.
func TestRedirectsStayOnTheHost(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/ok", http.StatusTemporaryRedirect)
		case "/away":
			http.Redirect(w, r, other.URL+"/stolen", http.StatusTemporaryRedirect)
		case "/ok":
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name      string
		redirects outbound.Redirects
		path      string
		want      int
	}{
		{"same host, followed", outbound.SameHost, "/same", http.StatusOK},
		{"another host, not followed", outbound.SameHost, "/away", http.StatusTemporaryRedirect},
		{"none at all, same host", outbound.NoRedirects, "/same", http.StatusTemporaryRedirect},
		{"none at all, another host", outbound.NoRedirects, "/away", http.StatusTemporaryRedirect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			elsewhere.Store(0)
			c := outbound.New(outbound.Options{System: "test", Policy: fast, Redirects: tc.redirects})
			got, _ := do(t, c, http.MethodPost, srv.URL+tc.path, outbound.Idempotent)
			if got != tc.want {
				t.Errorf("POST %s: got status %d, want %d", tc.path, got, tc.want)
			}
			if n := elsewhere.Load(); n != 0 {
				t.Errorf("the other host got %d requests, want none", n)
			}
		})
	}

	// The same rule for clients that are not outbound's (the engine's health checks).
	elsewhere.Store(0)
	hc := &http.Client{CheckRedirect: outbound.SameHostRedirect}
	resp, err := hc.Get(srv.URL + "/away")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || elsewhere.Load() != 0 {
		t.Errorf("SameHostRedirect: got status %d and %d requests elsewhere, want 307 and none", resp.StatusCode, elsewhere.Load())
	}
}

// holder is a limiter that records the holds it is told.
type holder struct {
	limiter
	holds []time.Duration
}

func (h *holder) Hold(_ context.Context, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds = append(h.holds, d)
}

// A 429 that Options.Throttled calls the server's throttle holds a Limiter that is a Holder
// for its Retry-After, up to the policy's cap; another 429, or any 429 when there is no
// Throttled, holds nothing.
func TestThrottledAnswerHoldsTheLimiter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", r.URL.Query().Get("after"))
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	policy := fast
	policy.MaxRetries = 0
	for _, c := range []struct {
		name      string
		throttled func(*http.Response) bool
		after     string
		want      []time.Duration
	}{
		{"throttle", func(*http.Response) bool { return true }, "1", []time.Duration{time.Second}},
		{"throttle past the cap", func(*http.Response) bool { return true }, "7200", []time.Duration{policy.MaxRetryAfter}},
		{"another 429", func(*http.Response) bool { return false }, "1", nil},
		{"no Throttled", nil, "1", nil},
		{"no Retry-After", func(*http.Response) bool { return true }, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &holder{}
			cl := outbound.New(outbound.Options{System: "x", Policy: policy, Limiter: h, Throttled: c.throttled})
			if status, _ := do(t, cl, "GET", srv.URL+"?after="+c.after, outbound.Auto); status != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429", status)
			}
			if !slices.Equal(h.holds, c.want) {
				t.Errorf("held %v, want %v", h.holds, c.want)
			}
		})
	}
}
