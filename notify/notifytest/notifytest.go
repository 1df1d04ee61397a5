// Package notifytest is a fake notification receiver: one http.Handler that takes what Slack
// incoming webhooks, Discord webhooks and a generic JSON endpoint take, keeps every message
// in memory, and can answer with faults (429 with Retry-After, 5xx) or hang. Tests and the
// demo use it.
//
// Like the real receivers it answers a POST of a JSON body: Slack with 200 "ok", Discord with
// 204, anything else with 200. Slack and Discord put their token in the URL path, so the path
// is kept for the test to check it was used (never to be shown).
package notifytest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Message is one accepted delivery.
type Message struct {
	Path   string
	Header http.Header
	Body   []byte
	// Text is the human message: Slack's "text", Discord's "content", the generic body's
	// "text".
	Text string
	At   time.Time
}

// Fault is an answer given instead of accepting a delivery.
type Fault struct {
	Status int
	// RetryAfter is the Retry-After header ("" for none).
	RetryAfter string
	Body       string
}

// Receiver is the fake. The zero value is not usable; call New.
type Receiver struct {
	mu       sync.Mutex
	messages []Message
	attempts int
	faults   []Fault
	hang     chan struct{} // non-nil: deliveries block until it is closed or they are canceled
	hanging  chan struct{} // gets a value when a delivery starts hanging
	received chan Message
	onMsg    func(Message)
}

// New returns an empty receiver that accepts every delivery.
func New() *Receiver {
	return &Receiver{hanging: make(chan struct{}, 64), received: make(chan Message, 64)}
}

// Server is a Receiver served on a loopback port.
type Server struct {
	*Receiver
	// URL is the server's base URL; deliveries may go to any path under it.
	URL string
}

// NewServer starts a Receiver; the test's cleanup stops it.
func NewServer(t testing.TB) *Server {
	t.Helper()
	r := New()
	hs := httptest.NewServer(r)
	t.Cleanup(func() {
		r.Release()
		hs.Close()
	})
	return &Server{Receiver: r, URL: hs.URL}
}

// OnMessage calls fn (from the request's goroutine) with every accepted message.
func (r *Receiver) OnMessage(fn func(Message)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onMsg = fn
}

// FailNext answers the next deliveries with faults, in order.
func (r *Receiver) FailNext(faults ...Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, faults...)
}

// Hang makes every delivery from now on block until Release or until its request ends.
func (r *Receiver) Hang() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hang == nil {
		r.hang = make(chan struct{})
	}
}

// Release ends Hang: hanging deliveries go on to be answered.
func (r *Receiver) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hang != nil {
		close(r.hang)
		r.hang = nil
	}
}

// Hanging receives a value each time a delivery starts hanging.
func (r *Receiver) Hanging() <-chan struct{} { return r.hanging }

// Received receives each accepted message (buffered; older ones are dropped when nobody reads).
func (r *Receiver) Received() <-chan Message { return r.received }

// Messages returns the accepted messages, in arrival order.
func (r *Receiver) Messages() []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Message(nil), r.messages...)
}

// Attempts returns how many deliveries arrived, faulted ones included.
func (r *Receiver) Attempts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts
}

// ServeHTTP takes one delivery.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.attempts++
	hang := r.hang
	r.mu.Unlock()
	if hang != nil {
		select {
		case r.hanging <- struct{}{}:
		default:
		}
		select {
		case <-hang:
		case <-req.Context().Done():
			return
		}
	}
	r.mu.Lock()
	if len(r.faults) > 0 {
		f := r.faults[0]
		r.faults = r.faults[1:]
		r.mu.Unlock()
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		http.Error(w, f.Body, f.Status)
		return
	}
	if req.Method != http.MethodPost || !strings.HasPrefix(req.Header.Get("Content-Type"), "application/json") {
		r.mu.Unlock()
		http.Error(w, "want a POST of application/json", http.StatusBadRequest)
		return
	}
	var fields struct {
		Text    string `json:"text"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(body, &fields); err != nil {
		r.mu.Unlock()
		http.Error(w, "invalid_payload", http.StatusBadRequest)
		return
	}
	m := Message{Path: req.URL.Path, Header: req.Header.Clone(), Body: body, Text: fields.Text + fields.Content, At: time.Now()}
	r.messages = append(r.messages, m)
	onMsg := r.onMsg
	r.mu.Unlock()
	if onMsg != nil {
		onMsg(m)
	}
	select {
	case r.received <- m:
	default:
	}
	if fields.Content != "" {
		w.WriteHeader(http.StatusNoContent) // Discord
		return
	}
	_, _ = io.WriteString(w, "ok")
}
