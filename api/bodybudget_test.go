package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/api"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/testutil"
)

// stallBody is a request body that delivers prefix, then stalls until release is closed, as a
// client that sends part of its body (or none) and then nothing more. stalled is told once,
// when the server asks for a byte past prefix.
type stallBody struct {
	prefix  []byte
	stalled chan<- struct{}
	release <-chan struct{}
	once    sync.Once
}

func (b *stallBody) Read(p []byte) (int, error) {
	if len(b.prefix) > 0 {
		n := copy(p, b.prefix)
		b.prefix = b.prefix[n:]
		return n, nil
	}
	b.once.Do(func() { b.stalled <- struct{}{} })
	<-b.release
	return 0, io.ErrUnexpectedEOF
}

// holdWebhookBodies sends, from each of addrs, perAddr GitHub deliveries that announce
// announced bytes, carry a well-formed signature made with the wrong secret, send sent bytes
// of their body and stall. It returns once every one is either stalled in the server's read
// or answered; the stalled ones end when the test does.
func holdWebhookBodies(t *testing.T, f *fixture, addrs []string, perAddr int, announced, sent int64) (answered map[int]int) {
	t.Helper()
	release := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(release); wg.Wait() })
	settled := make(chan struct{}, len(addrs)*perAddr)
	var mu sync.Mutex
	answered = map[int]int{}
	prefix := bytes.Repeat([]byte("x"), int(sent))
	for _, addr := range addrs {
		for i := range perAddr {
			stalled := make(chan struct{}, 1)
			req := httptest.NewRequest("POST", "/v1/webhooks/github", &stallBody{prefix: prefix, stalled: stalled, release: release})
			req.ContentLength = announced
			req.RemoteAddr = fmt.Sprintf("%s:%d", addr, 40000+i)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-GitHub-Event", "workflow_run")
			req.Header.Set("X-Hub-Signature-256", "sha256="+fmt.Sprintf("%064x", i))
			done := make(chan int, 1)
			wg.Go(func() {
				rec := httptest.NewRecorder()
				f.h.ServeHTTP(rec, req)
				done <- rec.Code
			})
			wg.Go(func() {
				select {
				case <-stalled:
				case code := <-done:
					mu.Lock()
					answered[code]++
					mu.Unlock()
				}
				settled <- struct{}{}
			})
		}
	}
	for range len(addrs) * perAddr {
		<-settled
	}
	mu.Lock()
	defer mu.Unlock()
	return answered
}

func addrs(format string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i+1)
	}
	return out
}

// Item 1 of the attacker probe: 32 connections from 8 addresses that announce a full body
// and never send it (no valid signature) must not hold the webhook body budget: a genuine,
// signed delivery from another address is answered.
func TestIdleWebhookBodiesHoldNoBudget(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.MaxBodyBytes = config.DefaultMaxBodyBytes })
	holdWebhookBodies(t, f, addrs("10.0.0.%d", 8), 4, config.DefaultMaxBodyBytes, 0)
	body := payload(t, "github-workflow-run.json")
	wantHook(t, f, delivery("github", "workflow_run", "genuine-idle", body, githubSecret), 202, "triggered")
}

// Bodies that do arrive, unsigned, count against their address's budget for bodies not yet
// verified (1 MiB): 8 addresses sending 4 bodies of a whole max_body_bytes each and stalling
// before the last byte hold at most 8 MiB, not the 32 MiB in all, and a genuine delivery from
// another address is answered.
func TestUnverifiedWebhookBodiesAreCappedPerAddress(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.MaxBodyBytes = config.DefaultMaxBodyBytes })
	answered := holdWebhookBodies(t, f, addrs("10.0.1.%d", 8), 4, config.DefaultMaxBodyBytes, config.DefaultMaxBodyBytes-1)
	// At most one body per address fits (two read at once may both be cut off).
	if n := answered[http.StatusServiceUnavailable]; n < 8*3 || len(answered) != 1 {
		t.Errorf("answers to the bodies past each address's 1 MiB: %v, want at least 24, all 503", answered)
	}
	body := payload(t, "github-workflow-run.json")
	wantHook(t, f, delivery("github", "workflow_run", "genuine-sent", body, githubSecret), 202, "triggered")
}

// The total budget (32 MiB) is not filled by fewer than 32 addresses: 31 addresses each
// trying to hold two bodies of 1 MiB hold 31 MiB and leave room for a genuine delivery.
func TestWebhookBodyBudgetNeedsManyAddresses(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.MaxBodyBytes = config.DefaultMaxBodyBytes })
	holdWebhookBodies(t, f, addrs("10.0.2.%d", 31), 2, config.DefaultMaxBodyBytes, config.DefaultMaxBodyBytes-1)
	body := payload(t, "github-workflow-run.json")
	wantHook(t, f, delivery("github", "workflow_run", "genuine-31", body, githubSecret), 202, "triggered")
}

// An IPv6 client is its /64: addresses of one /64 share the per-address buckets (here the
// bucket of failed trigger attempts), while another /64 has its own.
func TestIPv6ClientsAreKeyedByTheirSlash64(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.RateLimits.Trigger = config.Rate{PerSecond: 0.001, Burst: 3} })
	fail := func(remote string) int {
		req := request("POST", "/v1/pipelines/demo/runs", "wrong-token-xxxxxxxxxxxx", `{}`)
		req.RemoteAddr = remote
		return f.serve(req).Code
	}
	for i := range 3 {
		if got := fail(fmt.Sprintf("[2001:db8:1:2::%x]:5555", i+1)); got != 403 {
			t.Fatalf("failure %d from the /64: got %d, want 403", i, got)
		}
	}
	if got := fail("[2001:db8:1:2:ffff:ffff:ffff:ffff]:5555"); got != 429 {
		t.Errorf("a fourth failure from another address of the same /64: got %d, want 429", got)
	}
	if got := fail("[2001:db8:1:3::1]:5555"); got != 403 {
		t.Errorf("a failure from another /64: got %d, want 403 (its own bucket)", got)
	}
}

// The connection cap per client counts an IPv6 client by its /64 too.
func TestConnectionCapKeysIPv6BySlash64(t *testing.T) {
	ln := newFakeListener()
	lim := api.LimitListener(ln, config.Connections{Max: 100, PerClient: 2}, nil, nil)
	var accepted []net.Conn
	t.Cleanup(func() {
		for _, c := range accepted {
			c.Close()
		}
	})
	// Two from one /64, a third from the same /64 (refused), one from another /64.
	remotes := []string{"[2001:db8:5:6::1]:1", "[2001:db8:5:6::2]:1", "[2001:db8:5:6:abcd::3]:1", "[2001:db8:5:7::1]:1"}
	clients := make([]net.Conn, len(remotes))
	for i, r := range remotes {
		clients[i] = ln.dial(r)
		t.Cleanup(func() { clients[i].Close() })
	}
	refused := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(clients[2]); refused <- b }()
	for range 3 {
		c, err := lim.Accept()
		if err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, c)
	}
	got := []string{}
	for _, c := range accepted {
		got = append(got, c.RemoteAddr().String())
	}
	want := []string{remotes[0], remotes[1], remotes[3]}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("accepted %v, want %v (the third of one /64 refused)", got, want)
	}
	if b := <-refused; !bytes.Contains(b, []byte("503")) {
		t.Errorf("the refused connection read %q, want a 503", b)
	}
}

// fakeListener hands out in-memory connections with the remote addresses the test names.
type fakeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newFakeListener() *fakeListener {
	return &fakeListener{conns: make(chan net.Conn, 16), done: make(chan struct{})}
}

// dial returns the client's end of a new connection from remote.
func (l *fakeListener) dial(remote string) net.Conn {
	server, client := net.Pipe()
	l.conns <- addrConn{Conn: server, remote: netip.MustParseAddrPort(remote)}
	return client
}

func (l *fakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *fakeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv6loopback} }

type addrConn struct {
	net.Conn
	remote netip.AddrPort
}

func (c addrConn) RemoteAddr() net.Addr { return net.TCPAddrFromAddrPort(c.remote) }

// readCounter is a body that says whether anything read it.
type readCounter struct {
	r    io.Reader
	mu   sync.Mutex
	read int
}

func (c *readCounter) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.read++
	c.mu.Unlock()
	return c.r.Read(p)
}

func (c *readCounter) reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read
}

// Item 5: an address that used up its bucket of failed deliveries is answered 429 before a
// byte of its next body is read (GitHub and generic, whose signature needs the body); a
// genuine sender at another address is not concerned, and the address itself is served
// again once its bucket refilled.
func TestRateLimitedAddressCostsNoBodyRead(t *testing.T) {
	f := newFixture(t, func(c *config.Daemon) { c.RateLimits.Webhook = config.Rate{PerSecond: 0.5, Burst: 2} })
	clock := testutil.NewClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	h := api.NewServer(api.Deps{Config: f.cfg, Engine: f.engine, Runs: f.store, Locks: f.locker, Now: clock.Now})
	body := payload(t, "github-workflow-run.json")
	send := func(provider, remote, secret, id string) (int, int) {
		secretFor := map[string]string{"github": githubSecret, "generic": genericSecret}
		if secret == "" {
			secret = secretFor[provider]
		}
		req := delivery(provider, "workflow_run", id, body, secret)
		rc := &readCounter{r: bytes.NewReader(body)}
		req.Body = io.NopCloser(rc)
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rc.reads()
	}
	for _, provider := range []string{"github", "generic"} {
		attacker := map[string]string{"github": "10.7.0.1:5000", "generic": "10.7.0.2:5000"}[provider]
		for i := range 2 {
			if code, _ := send(provider, attacker, "wrong-secret-xxxxxxxxxx", fmt.Sprint(provider, "-bad-", i)); code != 401 {
				t.Fatalf("%s: wrong signature %d: got %d, want 401", provider, i, code)
			}
		}
		code, reads := send(provider, attacker, "wrong-secret-xxxxxxxxxx", provider+"-bad-3")
		if code != 429 || reads != 0 {
			t.Errorf("%s: a third wrong signature from the address: got %d after %d reads of its body, want 429 unread", provider, code, reads)
		}
	}
	if code, _ := send("github", "10.7.0.3:5000", "", "genuine-elsewhere"); code != 202 {
		t.Errorf("a genuine delivery from another address: got %d, want 202", code)
	}
	clock.Add(2 * time.Second) // one failure's worth refilled
	if code, _ := send("github", "10.7.0.1:5000", "", "genuine-later"); code != 200 && code != 202 {
		t.Errorf("a genuine delivery from the address once its bucket refilled: got %d, want 200 or 202", code)
	}
}
