package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/config"
)

// 40 unauthenticated trigger POSTs from one address (twice the default burst) must not lock
// the real trigger token out, even from that same address: the token is checked first, and
// only failed attempts take from the address's bucket of failures.
func TestFailedTriggerAttemptsDoNotLockOutToken(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) {
		c.RateLimits = config.RateLimits{Trigger: config.DefaultTriggerRate, Webhook: config.DefaultWebhookRate}
	})
	limited := 0
	for i := range 40 {
		tok := ""
		if i%2 == 1 {
			tok = "wrong-token-xxxxxxxxxxxx"
		}
		rec := f.do("POST", "/v1/pipelines/demo/runs", tok, map[string]string{})
		switch rec.Code {
		case 401, 403:
		case 429:
			limited++
		default:
			t.Fatalf("attempt %d: got %d, want 401, 403 or 429: %s", i, rec.Code, rec.Body)
		}
	}
	if limited == 0 {
		t.Errorf("40 failed attempts from one address: none was rate limited (the failures' bucket does not work)")
	}
	f.trigger("demo", map[string]string{}) // fails the test unless 202
}

// 400 unsigned POSTs to the GitHub webhook must not make the next genuine, signed delivery
// (from GitHub's address, not the attacker's) get 429: GitHub does not redeliver by itself.
// The attacker's own address is refused before its bodies are read once its bucket of
// failures is empty (TestRateLimitedAddressCostsNoBodyRead).
func TestUnsignedWebhooksDoNotStarveSignedDelivery(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) {
		c.RateLimits = config.RateLimits{Trigger: config.DefaultTriggerRate, Webhook: config.DefaultWebhookRate}
	})
	body := payload(t, "github-workflow-run.json")
	limited := 0
	for i := range 400 {
		req := delivery("github", "workflow_run", fmt.Sprintf("x-%d", i), body, "")
		if i%2 == 0 {
			req.Header.Del("X-Hub-Signature-256")
		}
		switch rec := f.serve(req); rec.Code {
		case 401:
		case 429:
			limited++
		default:
			t.Fatalf("unsigned delivery %d: got %d, want 401 or 429: %s", i, rec.Code, rec.Body)
		}
	}
	if limited == 0 {
		t.Errorf("400 unsigned deliveries from one address: none was rate limited")
	}
	genuine := delivery("github", "workflow_run", "genuine-1", body, githubSecret)
	genuine.RemoteAddr = "140.82.115.10:40000"
	wantHook(t, f, genuine, 202, "triggered")
}

// X-Forwarded-For names the client only when the peer is a trusted proxy; the client is
// the right-most address that is not a trusted proxy, so a client cannot pick its own.
func TestForwardedForOnlyFromTrustedProxies(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) {
		c.RateLimits.Trigger = config.Rate{PerSecond: 0.001, Burst: 1}
		c.TrustedProxies = []string{"10.0.0.0/24"}
	})
	fail := func(peer, xff string) int {
		req := request("POST", "/v1/pipelines/demo/runs", "", `{}`)
		req.RemoteAddr = peer + ":5555"
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		return f.serve(req).Code
	}
	// An untrusted peer: the header is ignored, both attempts share the peer's bucket.
	if got := fail("192.0.2.5", "198.51.100.1"); got != 401 {
		t.Fatalf("first failure from an untrusted peer: got %d, want 401", got)
	}
	if got := fail("192.0.2.5", "198.51.100.2"); got != 429 {
		t.Errorf("second failure from the same untrusted peer with another X-Forwarded-For: got %d, want 429", got)
	}
	// Through the trusted proxy: each forwarded client has its own bucket.
	if got := fail("10.0.0.7", "198.51.100.1"); got != 401 {
		t.Errorf("client 1 via the proxy: got %d, want 401", got)
	}
	if got := fail("10.0.0.7", "198.51.100.2"); got != 401 {
		t.Errorf("client 2 via the proxy: got %d, want 401 (its own bucket)", got)
	}
	// Client 1 again, prepending a made-up address: the right-most untrusted one counts.
	if got := fail("10.0.0.7", "203.0.113.9, 198.51.100.1, 10.0.0.3"); got != 429 {
		t.Errorf("client 1 via two proxies with a forged left-most entry: got %d, want 429", got)
	}
}

// Made-up methods must not grow /metrics: labels take only known values.
func TestMetricsLabelsAreBounded(t *testing.T) {
	f := newFixture(t)
	for i := range 2000 {
		req := request("GET", "/healthz", "", nil)
		req.Method = fmt.Sprintf("M%05d", i)
		f.serve(req)
		req = request("GET", fmt.Sprintf("/nowhere/%d", i), "", nil)
		req.Method = fmt.Sprintf("X%05d", i)
		f.serve(req)
	}
	f.do("GET", "/healthz", "", nil)
	body := f.do("GET", "/metrics", readToken, nil).Body.String()
	series, bad := 0, 0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "orchestrator_http_requests_total{") {
			continue
		}
		series++
		if !strings.Contains(line, `method="GET"`) && !strings.Contains(line, `method="other"`) {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d series have a method label other than GET and other", bad)
	}
	if series == 0 || series > 10 {
		t.Errorf("orchestrator_http_requests_total has %d series after 4000 made-up methods, want 1..10", series)
	}
}

// One client (an address and a token) holding its share of event streams leaves streams for
// others, CI's trigger token from the same address among them; refusals are logged once.
func TestEventStreamsArePerClient(t *testing.T) {
	f := newFixture(t)
	h := api.NewServer(api.Deps{Config: f.cfg, Engine: f.engine, Runs: f.store, Locks: f.locker,
		Logger: newTestLogger(f.logs), MaxStreams: 4, MaxStreamsPerClient: 2})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r := f.trigger("demo", map[string]string{})
	open := func(token string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/runs/"+r.ID+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for i := range 2 {
		if resp := open(readToken); resp.StatusCode != 200 {
			t.Fatalf("read stream %d: got %d, want 200", i, resp.StatusCode)
		}
	}
	for i := range 3 {
		if resp := open(readToken); resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("read stream past the client's cap (%d): got %d, want 503 with Retry-After", i, resp.StatusCode)
		}
	}
	if resp := open(triggerToken); resp.StatusCode != 200 {
		t.Fatalf("the trigger token's stream while the read token is at its cap: got %d, want 200", resp.StatusCode)
	}
	if n := strings.Count(f.logs.String(), "event stream refused"); n != 1 {
		t.Errorf("3 refusals of one client: %d log lines, want 1", n)
	}
}

func newTestLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// DNS rebinding: a page whose name resolves to the daemon sends its own name as Host.
func TestHostNotAllowedIsRefused(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) {
		c.PublicRead = true
		c.Listen = "127.0.0.1:8080"
		c.AllowedHosts = nil // the default: the listen address and localhost
	})
	for _, host := range []string{"evil.example", "evil.example:8080", "127.0.0.1.evil.example"} {
		for _, path := range []string{"/", "/v1/runs", "/metrics"} {
			req := request("GET", path, "", nil)
			req.Host = host
			e := wantError(t, f.serve(req), http.StatusMisdirectedRequest, "")
			if e.Error.Code != "host_not_allowed" {
				t.Errorf("Host %s %s: code %q", host, path, e.Error.Code)
			}
		}
	}
	for _, host := range []string{"localhost:8080", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST"} {
		req := request("GET", "/v1/runs", "", nil)
		req.Host = host
		if rec := f.serve(req); rec.Code != 200 {
			t.Errorf("Host %s: got %d, want 200: %s", host, rec.Code, rec.Body)
		}
	}
	req := request("GET", "/healthz", "", nil)
	req.Host = "10.1.2.3:8080" // a probe addressing the daemon by IP
	if rec := f.serve(req); rec.Code != 200 {
		t.Errorf("/healthz with any Host: got %d, want 200", rec.Code)
	}

	any := newFixture(t, func(c *config.Daemon) { c.AllowedHosts = []string{"*"} })
	req = request("GET", "/v1/runs", readToken, nil)
	req.Host = "whatever.example"
	if rec := any.serve(req); rec.Code != 200 {
		t.Errorf(`allowed_hosts ["*"]: got %d, want 200`, rec.Code)
	}
}

// A client that sends part of a body and stalls is cut off after the body timeout, with 408.
func TestStalledBodyIsCutOff(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewUnstartedServer(f.h)
	srv.Config = api.NewHTTPServer(api.Deps{Config: f.cfg, Engine: f.engine, Runs: f.store, Locks: f.locker})
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/pipelines/demo/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"build\":", triggerToken)
	_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // a generous bound: the test must end
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stalled body: got %d, want 408: %s", resp.StatusCode, b)
	}
}

// The front door under a flood, scaled down from the bench (bench/cmd/benchfrontdoor): from
// four attacker addresses, stalled senders of (almost) max_body_bytes to the GitHub webhook
// with a well-formed but wrong signature, and idle connections that send half a request
// line. While they hold on, a genuine trigger and a genuine signed delivery from another
// address are answered; the server's goroutines stay within the connection cap and its heap
// within the webhook body budget.
func TestFloodIsBounded(t *testing.T) {
	const (
		attackers   = 4
		stalled     = 25  // per attacker address
		idle        = 60  // per attacker address
		maxConns    = 150 // above attackers × perClient, so the genuine client finds a slot
		perClient   = 30
		maxBody     = 1 << 20
		heapAllowed = 40 << 20 // the body budget (32 MiB) and change
	)
	f := newFixture(t, func(c *config.Daemon) { c.MaxBodyBytes = maxBody })
	hs := api.NewHTTPServer(api.Deps{Config: f.cfg, Engine: f.engine, Runs: f.store, Locks: f.locker})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	served := make(chan error, 1)
	go func() {
		served <- hs.Serve(api.LimitListener(ln, config.Connections{Max: maxConns, PerClient: perClient}, nil, nil))
	}()

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap, baseG := ms.HeapInuse, runtime.NumGoroutine()

	var conns []net.Conn
	var mu sync.Mutex
	var wg sync.WaitGroup
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	fake := api.Sign([]byte("not-the-secret-xxxxxxx"), []byte("x"))
	chunk := strings.Repeat("x", 64<<10)
	for a := range attackers {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+a))}
		d := net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
		for i := range stalled + idle {
			wg.Go(func() {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					return // refused at the kernel: that is a bound too
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
				if i >= stalled {
					fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0") // and nothing more
					return
				}
				fmt.Fprintf(c, "POST /v1/webhooks/github HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
					"X-GitHub-Event: workflow_run\r\nX-Hub-Signature-256: %s\r\nContent-Length: %d\r\n\r\n", fake, maxBody)
				for sent := 0; sent+len(chunk) < maxBody; sent += len(chunk) {
					if _, err := io.WriteString(c, chunk); err != nil {
						return // the server answered (503) and closed: refused
					}
				}
			})
		}
	}
	wg.Wait()

	// The genuine requests, from 127.0.0.1, while the attackers hold on.
	cl := &http.Client{Timeout: time.Minute} // a generous bound: answered at all
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/pipelines/demo/runs", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+triggerToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("genuine trigger under the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Errorf("genuine trigger under the flood: got %d, want 202", resp.StatusCode)
	}
	body := payload(t, "github-workflow-run.json")
	hook := delivery("github", "workflow_run", "flood-genuine", body, githubSecret)
	req, _ = http.NewRequest("POST", "http://"+addr+"/v1/webhooks/github", strings.NewReader(string(body)))
	req.Header = hook.Header
	resp, err = cl.Do(req)
	if err != nil {
		t.Fatalf("genuine delivery under the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Errorf("genuine delivery under the flood: got %d, want 202", resp.StatusCode)
	}

	// Peak over a second of sampling: the server reads what the kernel buffered meanwhile.
	var peakHeap uint64
	peakG := 0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range 20 {
		<-tick.C
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapInuse)
		peakG = max(peakG, runtime.NumGoroutine())
	}
	// Each attacker connection has a client goroutine-free socket here; server side, a
	// connection is at most a goroutine or two (its handler and net/http's background read).
	if extra := peakG - baseG; extra > 2*maxConns+20 {
		t.Errorf("goroutines under the flood: %d more than before, want at most %d (connections.max %d)", extra, 2*maxConns+20, maxConns)
	}
	if extra := int64(peakHeap) - int64(baseHeap); extra > heapAllowed {
		t.Errorf("heap under the flood: %d MiB more than before, want at most %d MiB", extra>>20, heapAllowed>>20)
	}
	t.Logf("under %d stalled senders and %d idle connections: +%d goroutines, heap +%d MiB",
		attackers*stalled, attackers*idle, peakG-baseG, (int64(peakHeap)-int64(baseHeap))>>20)

	for _, c := range conns {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		hs.Close()
	}
	<-served
}
