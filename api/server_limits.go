package api

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
)

// What a client without credentials can cost the daemon, at most (docs/guarantees.md,
// promise 12):
//
//   - connections: config.Connections (per client address and in total); one more is
//     answered 503 and closed at once, before a byte of it is read;
//   - headers: MaxHeaderBytes, read within HeaderTimeout;
//   - bodies: read within bodyTimeout (webhooks: webhookBodyTimeout) of the headers; a
//     webhook body is read only after what its headers can prove checked out (GitLab's
//     token, the others' signature header's shape), and its bytes count, as they arrive,
//     against the body budget: bodyBudgetUnverified per client for bodies whose credential
//     is not checked yet (GitHub's and generic's, signed over the body),
//     bodyBudgetPerClient per client for bodies whose token checked out (GitLab's), and
//     bodyBudgetTotal in all. The API's bodies are read only after the token checked out;
//   - event streams: Deps.MaxStreamsPerClient per client, Deps.MaxStreams in all.
const (
	// HeaderTimeout is how long a client has to send its request line and headers.
	HeaderTimeout = 5 * time.Second
	// IdleTimeout closes a keep-alive connection that sends no next request.
	IdleTimeout = 60 * time.Second
	// MaxHeaderBytes caps the request line and headers.
	MaxHeaderBytes = 32 << 10
	// bodyTimeout and webhookBodyTimeout bound reading a request's whole body, from the end
	// of its headers: a client that stalls mid-body is cut off, its memory freed.
	bodyTimeout        = 5 * time.Second
	webhookBodyTimeout = 10 * time.Second
	// bodyBudgetTotal, bodyBudgetPerClient and bodyBudgetUnverified cap the webhook body
	// bytes being held at once: in all, per client for bodies whose token checked out, and
	// per client for bodies not verified yet (each per-client cap is at least one body of
	// max_body_bytes). Filling the total with unverified bodies takes bodyBudgetTotal /
	// bodyBudgetUnverified (32) client addresses.
	bodyBudgetTotal      = 32 << 20
	bodyBudgetPerClient  = 4 << 20
	bodyBudgetUnverified = 1 << 20
	// ipv6ClientBits: an IPv6 client is its /64 (one subscriber's network at least), so
	// the addresses of one network share every per-client cap and bucket.
	ipv6ClientBits = 64
	// refusalLogEvery: a refusal (connection cap, stream cap, body budget) is logged at
	// most once per client per this long.
	refusalLogEvery = time.Minute
)

// NewHTTPServer returns the daemon's http.Server: NewServer(d) as its handler, with the
// header timeout, idle timeout and header size limit above. Serve it on a listener from
// LimitListener, so that the connection caps hold too.
func NewHTTPServer(d Deps) *http.Server {
	var errLog *slog.Logger
	if d.Logger != nil {
		errLog = d.Logger
	} else {
		errLog = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &http.Server{
		Handler:           NewServer(d),
		ReadHeaderTimeout: HeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(errLog.Handler(), slog.LevelWarn),
	}
}

// LimitListener wraps ln so that at most c.PerClient connections per client address (an
// IPv6 client is its /64) and c.Max in total are open at once; a connection holds its slot
// until it is closed. A connection past a cap is answered "503 Service Unavailable" and
// closed without being read. Addresses in trusted (the trusted proxies) are held to c.Max
// only. Refusals are logged at most once per client per minute.
func LimitListener(ln net.Listener, c config.Connections, trusted []netip.Prefix, log *slog.Logger) net.Listener {
	if c.Max < 1 {
		c.Max = config.DefaultMaxConns
	}
	if c.PerClient < 1 {
		c.PerClient = min(config.DefaultMaxConnsPerClient, c.Max)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &limitListener{Listener: ln, max: c.Max, perClient: c.PerClient, trusted: trusted,
		by: map[netip.Addr]int{}, log: log, logged: newLogEvery(refusalLogEvery, time.Now)}
}

type limitListener struct {
	net.Listener
	max, perClient int
	trusted        []netip.Prefix
	log            *slog.Logger
	logged         *logEvery

	mu    sync.Mutex
	total int
	by    map[netip.Addr]int
}

// refusal is what a connection past a cap reads before it is closed.
const refusal = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\nRetry-After: 5\r\nContent-Length: 41\r\n\r\ntoo many connections; retry in 5 seconds\n"

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := peerAddr(c.RemoteAddr())
		why := l.take(addr)
		if why == "" {
			return &limitConn{Conn: c, l: l, addr: addrKey(addr)}, nil
		}
		// A fresh socket's send buffer is empty: this write does not wait for the client.
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = io.WriteString(c, refusal)
		_ = c.Close()
		if l.logged.ok(addrKey(addr).String()) {
			l.log.Warn("connection refused", slog.String(logkey.Remote, addr.String()), slog.String(logkey.Reason, why),
				slog.String(logkey.Note, "logged at most once a minute per client"))
		}
	}
}

// take reserves a slot for addr, or says which cap is reached.
func (l *limitListener) take(addr netip.Addr) string {
	key := addrKey(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max {
		return "connections.max reached"
	}
	if l.by[key] >= l.perClient && !trustedAddr(l.trusted, addr) {
		return "connections.per_client reached"
	}
	l.total++
	l.by[key]++
	return ""
}

// give frees the slot of a client; addr is its addrKey.
func (l *limitListener) give(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.by[addr]--; l.by[addr] <= 0 {
		delete(l.by, addr)
	}
}

type limitConn struct {
	net.Conn
	l    *limitListener
	addr netip.Addr // the client's addrKey
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.give(c.addr) })
	return err
}

// peerAddr is a connection's remote IP (the zero Addr for non-IP connections, which then
// share one slot count).
func peerAddr(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// addrKey is what per-client caps and buckets count a client address as: an IPv4 address
// itself, an IPv6 address its /64 (whoever holds one address of a /64 usually holds all of
// it, so counting addresses would give them unlimited clients).
func addrKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if !a.Is6() {
		return a
	}
	p, err := a.WithZone("").Prefix(ipv6ClientBits)
	if err != nil {
		return a
	}
	return p.Addr()
}

// clientKeyOf is addrKey of a textual client address (a non-IP one stays as it is).
func clientKeyOf(client string) string {
	a, err := netip.ParseAddr(client)
	if err != nil {
		return client
	}
	return addrKeyString(a)
}

// addrKeyString spells addrKey(a): an IPv4 address, or an IPv6 /64 as a prefix.
func addrKeyString(a netip.Addr) string {
	if k := addrKey(a); k.Is6() {
		return netip.PrefixFrom(k, ipv6ClientBits).String()
	}
	return a.Unmap().String()
}

func trustedAddr(trusted []netip.Prefix, a netip.Addr) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// logEvery says whether something about a key may be logged now: at most once per every,
// per key. It remembers at most logEveryKeys keys; past that it stays silent until old
// ones age out, so a flood of new addresses costs bounded memory and log volume.
type logEvery struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	last  map[string]time.Time
}

const logEveryKeys = 4096

func newLogEvery(every time.Duration, now func() time.Time) *logEvery {
	return &logEvery{every: every, now: now, last: map[string]time.Time{}}
}

func (l *logEvery) ok(key string) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, seen := l.last[key]; seen && now.Sub(t) < l.every {
		return false
	}
	if len(l.last) >= logEveryKeys {
		for k, t := range l.last {
			if now.Sub(t) >= l.every {
				delete(l.last, k)
			}
		}
		if len(l.last) >= logEveryKeys {
			return false
		}
	}
	l.last[key] = now
	return true
}

// forwardedClient returns the client address of a request that came from remote: remote
// itself, unless remote is a trusted proxy, in which case X-Forwarded-For is read from the
// right, skipping trusted proxies, and the first address that is not one is the client.
func forwardedClient(r *http.Request, remote netip.Addr, trusted []netip.Prefix) netip.Addr {
	if !remote.IsValid() || !trustedAddr(trusted, remote) {
		return remote
	}
	hops := r.Header.Values("X-Forwarded-For")
	client := remote
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			ip, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return client // garbage: trust nothing further left
			}
			client = ip.Unmap()
			if !trustedAddr(trusted, client) {
				return client
			}
		}
	}
	return client
}

// deadlineBody clears the connection's read deadline once the body has been read to its
// end: the deadline bounds the body, not the handler's work after it (net/http watches the
// connection after the body's EOF, and a deadline passing then would cancel the request).
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}

// bodyDeadline puts a read deadline on a request's body: it must arrive within d.
func bodyDeadline(w http.ResponseWriter, r *http.Request, d time.Duration) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) == nil {
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
	}
}

// bodyBudget caps the webhook body bytes held at once, per client and in total. A client
// holds two amounts: the bytes of bodies whose credential is not checked yet (held to
// unverified) and those of bodies whose token checked out before they were read (held to
// perClient).
type bodyBudget struct {
	unverified, perClient, total int64
	mu                           sync.Mutex
	used                         int64
	by                           map[string]*bodyHeld
}

type bodyHeld struct{ unverified, verified int64 }

func newBodyBudget(unverified, perClient, total int64) *bodyBudget {
	return &bodyBudget{unverified: unverified, perClient: perClient, total: total, by: map[string]*bodyHeld{}}
}

// take reserves n more bytes for client (an addrKey), or says no.
func (b *bodyBudget) take(client string, verified bool, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.by[client]
	if h == nil {
		h = &bodyHeld{}
	}
	mine, limit := &h.unverified, b.unverified
	if verified {
		mine, limit = &h.verified, b.perClient
	}
	if b.used+n > b.total || *mine+n > limit {
		return false
	}
	b.used += n
	*mine += n
	b.by[client] = h
	return true
}

func (b *bodyBudget) give(client string, verified bool, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.by[client]
	if h == nil {
		return
	}
	b.used -= n
	if verified {
		h.verified -= n
	} else {
		h.unverified -= n
	}
	if h.verified <= 0 && h.unverified <= 0 {
		delete(b.by, client)
	}
}

// errBodyBudget: the body budget has no room for the bytes that arrived.
var errBodyBudget = errors.New("webhook body budget exhausted")

// budgetReader counts a body's bytes against the body budget as they arrive (never by the
// length a client announces, which costs it nothing): a Read whose bytes do not fit fails
// with errBodyBudget. release gives back everything it took.
type budgetReader struct {
	io.ReadCloser
	b        *bodyBudget
	client   string
	verified bool
	held     int64
}

func (br *budgetReader) Read(p []byte) (int, error) {
	n, err := br.ReadCloser.Read(p)
	if n > 0 {
		if !br.b.take(br.client, br.verified, int64(n)) {
			return 0, errBodyBudget
		}
		br.held += int64(n)
	}
	return n, err
}

func (br *budgetReader) release() {
	br.b.give(br.client, br.verified, br.held)
	br.held = 0
}

// budgeted puts r's body under the body budget of its client; the caller releases it once
// the body's bytes are no longer held.
func (s *server) budgeted(r *http.Request, verified bool) *budgetReader {
	br := &budgetReader{ReadCloser: r.Body, b: s.bodies, client: clientKey(r), verified: verified}
	r.Body = br
	return br
}

// errBusy is the answer to a webhook body that does not fit the body budget.
func errBusy() error {
	return &httpError{status: http.StatusServiceUnavailable, code: "busy",
		message: "too many webhook bodies are being received; retry later", retryAfter: 5,
		refusal: "webhook body refused"}
}

// webhookBody caps a webhook's body at limit: one announced larger is refused at once (413),
// before anything else; the body budget is applied by the handler (budgeted), once the
// headers checked out.
func (s *server) webhookBody(limit int64, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			s.writeError(w, r, bodyError(&http.MaxBytesError{Limit: limit}))
			return
		}
		limitBody(limit, next)(w, r)
	}
}

// errBodyTimeout: the body did not arrive in time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// checkHost answers 421 to a request whose Host is not in allowed_hosts, so that a page
// on another origin that rebinds its DNS name to the daemon cannot read it from a browser.
// /healthz and /readyz answer any Host: probes address the daemon by IP, and their
// answers say nothing.
func (s *server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.anyHost || r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
		if _, ok := s.hosts[host]; !ok {
			s.writeError(w, r, &httpError{status: http.StatusMisdirectedRequest, code: "host_not_allowed",
				message: "the Host header " + quoteShort(r.Host) + " is not one this daemon serves; add it to allowed_hosts"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// quoteShort quotes a client-sent value, cut to 64 bytes.
func quoteShort(v string) string {
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	return `"` + strings.ToValidUTF8(strings.Map(func(r rune) rune {
		if r < ' ' || r == '"' || r == 0x7f {
			return '?'
		}
		return r
	}, v), "?") + `"`
}
