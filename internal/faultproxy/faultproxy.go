// Package faultproxy is a loopback TCP proxy for fault-injection tests: it forwards every
// connection to one target and, on command, delays the bytes in both directions, cuts
// every connection (FIN) or resets it (RST), or partitions its clients from the target
// until told to heal. Connections opened after a cut go through again, as after a real
// network blip.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from Addr to a target address.
type Proxy struct {
	target string
	ln     net.Listener
	delay  atomic.Int64 // nanoseconds added to every chunk in both directions

	mu     sync.Mutex
	links  map[*link]struct{}
	closed bool
	part   *partition // nil when not partitioned
	wg     sync.WaitGroup
}

// partition is one Partition, until Heal closes healed.
type partition struct {
	reset  bool
	healed chan struct{}
}

// Start listens on a free loopback port and forwards each accepted connection to target.
// Close stops it. Errors: the listener's.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay makes every chunk read from then on wait d before it is forwarded, in both
// directions; order is kept. Zero forwards at once.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Cut closes every open connection on both sides with a FIN.
func (p *Proxy) Cut() { p.closeAll(false) }

// Reset aborts every open connection on both sides with a RST.
func (p *Proxy) Reset() { p.closeAll(true) }

// Partition cuts the clients off from the target until Heal. Silent (reset false), as a
// network that drops every packet: open connections and new ones (still accepted, as a
// client's kernel would keep trying) forward nothing; the bytes are held and go through after
// Heal on a connection still open then, as retransmissions would. Reset, as a firewall that
// answers with RST: every open connection is reset now, and every new one at once, until
// Heal. Calling it while partitioned changes the kind.
func (p *Proxy) Partition(reset bool) {
	p.mu.Lock()
	if p.part == nil {
		p.part = &partition{healed: make(chan struct{})}
	}
	p.part.reset = reset
	p.mu.Unlock()
	if reset {
		p.closeAll(true)
	}
}

// Heal ends a Partition: held bytes flow again, new connections go through.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.part != nil {
		close(p.part.healed)
		p.part = nil
	}
}

// partitioned returns the current partition, nil when there is none.
func (p *Proxy) partitioned() *partition {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.part
}

// Close stops accepting, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.closeAll(false)
	p.wg.Wait()
	return err
}

func (p *Proxy) closeAll(reset bool) {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(reset)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if part := p.partitioned(); part != nil && part.reset {
			abort(c)
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			abort(c)
			continue
		}
		l := &link{client: c, server: s, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close(false)
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(3)
		p.mu.Unlock()
		go p.pipe(l, c, s)
		go p.pipe(l, s, c)
		go func() {
			defer p.wg.Done()
			<-l.done
			p.mu.Lock()
			delete(p.links, l)
			p.mu.Unlock()
		}()
	}
}

// abort closes c with a RST.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// link is one proxied connection: the client side and the server side.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

func (l *link) close(reset bool) {
	l.once.Do(func() {
		if reset {
			abort(l.client)
			abort(l.server)
		} else {
			_ = l.client.Close()
			_ = l.server.Close()
		}
		close(l.done)
	})
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst through a queue that holds each chunk until its due time. Either
// side failing closes the link.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for c := range q {
			if part := p.partitioned(); part != nil {
				select {
				case <-part.healed:
				case <-l.done:
					continue // drain until the reader stops
				}
			}
			if wait := time.Until(c.due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-l.done:
					continue // drain until the reader stops
				}
			}
			if _, err := dst.Write(c.b); err != nil {
				l.close(false)
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			c := chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(p.delay.Load()))}
			select {
			case q <- c:
			case <-l.done:
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.close(false)
			}
			break
		}
	}
	close(q)
	<-writerDone
	l.close(false)
}
