// Package notify tells people, where they already look, what the daemon did: a run
// succeeded, failed (with the service and the reason), was canceled or interrupted; a run
// has waited on a lock longer than a threshold (with the holder and its message); a freeze
// was placed or lifted. Receivers are Slack incoming webhooks, Discord webhooks and any HTTP
// endpoint taking signed JSON (config.NotifyWebhook).
//
// Delivery is outside the run's critical path. Notify only puts the message on a bounded
// queue and returns; a full queue drops the message (logged and counted), it never waits.
// Workers send with internal/outbound's retry policy: jittered exponential backoff, the
// receiver's Retry-After on 429 and 503, a bounded number of attempts, each bounded by the
// HTTP client's timeout. A message may therefore arrive twice (a 5xx after the receiver
// acted is retried); none is sent after Close. No redirect is followed: a 3xx answer fails
// the message, so its body and signature reach the configured URL and nothing else.
//
// Every attempt is reported to Options.Metrics and, for a run's events, appended to the
// run's event log (runs.EventNotifyAttempt, then runs.EventNotifySent or EventNotifyFailed),
// so the run page lists them. Target URLs and secrets never appear in an event, a log line,
// an error or a metric: targets are named by config.NotifyTarget.Name.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/hmacsig"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// System is the outbound system name of notification attempts (metrics, logs).
const System = "notify"

// Header names a "webhook" target's requests carry.
const (
	HeaderSignature = "X-Signature-256"
	HeaderEvent     = "X-Orchestrator-Event"
)

// DefaultPolicy bounds a message's delivery: at most 5 attempts, backoff from 1 s to 30 s, a
// Retry-After up to 2 minutes honoured.
var DefaultPolicy = outbound.Policy{MaxRetries: 4, MinWait: time.Second, MaxWait: 30 * time.Second, MaxRetryAfter: 2 * time.Minute}

// Defaults of Options.
const (
	DefaultQueueSize      = 256
	DefaultWorkers        = 2
	DefaultAttemptTimeout = 10 * time.Second
)

// Recorder appends events to a run's log (runs.Store).
type Recorder interface {
	Append(ctx context.Context, id string, evs ...runs.Event) ([]runs.Event, error)
}

// Options configure a Notifier.
type Options struct {
	// Default is where messages go for a pipeline without a notify block, and for freezes.
	// Nil: nowhere.
	Default *config.Notify
	// PublicURL is the dashboard's base URL messages link to ("" for no link).
	PublicURL string
	// Recorder receives the attempts of run messages. Optional.
	Recorder Recorder
	// HTTPClient sends the attempts; its Timeout bounds each one (default
	// DefaultAttemptTimeout). Its CheckRedirect is replaced: no redirect is followed.
	HTTPClient *http.Client
	// Policy bounds retries (default DefaultPolicy).
	Policy *outbound.Policy
	// QueueSize bounds the messages waiting to be sent (default DefaultQueueSize).
	QueueSize int
	// Workers is how many messages are sent at once (default DefaultWorkers).
	Workers int
	// Metrics is told about every attempt, with System as the system and
	// "<kind>:<target name>" as the route.
	Metrics outbound.MetricsFunc
	// Outcome is told how each message ended: "sent", "failed" or "dropped" (queue full or
	// closed). Optional; must not block.
	Outcome func(target, outcome string)
	Logger  *slog.Logger
	Version string
}

// Notifier queues and sends notifications. Its methods are safe for concurrent use; a nil
// *Notifier sends nothing.
type Notifier struct {
	o      Options
	client *outbound.Client
	queue  chan job

	mu     sync.RWMutex // guards closed against sends on queue
	closed bool

	ctx    context.Context // canceled by Close when its grace ends: in-flight attempts stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type job struct {
	target  config.NotifyTarget
	payload Payload
}

// New returns a Notifier and starts its workers; Close stops them.
func New(o Options) *Notifier {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	policy := DefaultPolicy
	if o.Policy != nil {
		policy = *o.Policy
	}
	hc := &http.Client{Timeout: DefaultAttemptTimeout}
	if o.HTTPClient != nil {
		c := *o.HTTPClient
		hc = &c
	}
	next := hc.Transport
	if next == nil {
		next = outbound.DefaultTransport
	}
	n := &Notifier{o: o, queue: make(chan job, o.QueueSize)}
	hc.Transport = &recordTransport{n: n, next: next}
	// No redirect is followed, not even on the receiver's host: the body and its signature
	// go to the configured URL only. A 3xx is a failed attempt, named in the run's log.
	n.client = outbound.New(outbound.Options{System: System, HTTPClient: hc, Policy: policy,
		Version: o.Version, Logger: o.Logger, Metrics: o.Metrics, Redirects: outbound.NoRedirects})
	n.ctx, n.cancel = context.WithCancel(context.Background())
	for range o.Workers {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for j := range n.queue {
				n.deliver(j)
			}
		}()
	}
	return n
}

// LockWait is the lock wait after which a run of a pipeline with notify block cfg (nil: the
// default) is announced; 0 when no target wants lock_wait messages.
func (n *Notifier) LockWait(cfg *config.Notify) time.Duration {
	cfg = n.config(cfg)
	if cfg == nil {
		return 0
	}
	for _, t := range cfg.Targets {
		if t.Wants(config.NotifyLockWait) {
			return cfg.LockWait
		}
	}
	return 0
}

func (n *Notifier) config(cfg *config.Notify) *config.Notify {
	if n == nil {
		return nil
	}
	if cfg == nil {
		return n.o.Default
	}
	return cfg
}

// Notify queues ev for every target of cfg (nil: the default) that wants it, and returns at
// once: it never blocks on a receiver.
func (n *Notifier) Notify(cfg *config.Notify, ev Event) {
	cfg = n.config(cfg)
	if cfg == nil {
		return
	}
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	p := payload(ev, n.o.PublicURL)
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, t := range cfg.Targets {
		if !t.Wants(ev.Kind) {
			continue
		}
		if n.closed {
			n.dropped(t, p, "notifier closed")
			continue
		}
		select {
		case n.queue <- job{target: t, payload: p}:
		default:
			n.dropped(t, p, "queue full")
		}
	}
}

// dropped reports a message that was not queued. It is logged and counted, not recorded in
// the run's log: Notify must not wait on the store.
func (n *Notifier) dropped(t config.NotifyTarget, p Payload, why string) {
	n.o.Logger.LogAttrs(context.Background(), slog.LevelWarn, "notification dropped",
		slog.String(logkey.Target, t.Name), slog.String(logkey.Event, string(p.Event)), slog.String(logkey.RunID, p.RunID), slog.String(logkey.Reason, why))
	n.outcome(t, "dropped")
}

func (n *Notifier) outcome(t config.NotifyTarget, outcome string) {
	if n.o.Outcome != nil {
		n.o.Outcome(t.Name, outcome)
	}
}

// Close stops taking messages and sends those queued until ctx ends; then it stops the
// attempts under way and waits for the workers.
func (n *Notifier) Close(ctx context.Context) error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.queue)
	}
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
		n.cancel()
		return nil
	case <-ctx.Done():
	}
	n.cancel()
	<-done
	return fmt.Errorf("notify: closed before every message was sent: %w", ctx.Err())
}

// Data keys of the notify events.
const (
	DataTarget  = "target"
	DataEvent   = "event"
	DataAttempt = "attempt"
	DataStatus  = "status"
)

// deliver sends one message under the retry policy and records how it ended.
func (n *Notifier) deliver(j job) {
	t, p := j.target, j.payload
	b, err := body(t.Kind, p)
	if err != nil { // a Payload always encodes; kept for safety
		n.finish(j, 0, fmt.Errorf("encode: %w", err))
		return
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if t.Kind == config.NotifyWebhook {
		h.Set(HeaderSignature, hmacsig.Sign([]byte(t.Secret.Reveal()), b))
		h.Set(HeaderEvent, string(p.Event))
	}
	ctx := context.WithValue(n.ctx, jobKey{}, &attempts{job: j})
	resp, err := n.client.Do(ctx, outbound.Request{Method: http.MethodPost, URL: t.URL.Reveal(),
		Route: route(t), Header: h, Body: b, Kind: outbound.Idempotent})
	if err != nil {
		n.finish(j, 0, err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		n.finish(j, resp.StatusCode, fmt.Errorf("answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode)))
		return
	}
	n.finish(j, resp.StatusCode, nil)
}

func route(t config.NotifyTarget) string { return string(t.Kind) + ":" + t.Name }

// finish records the end of a delivery. err never holds the URL (outbound strips it).
func (n *Notifier) finish(j job, status int, err error) {
	t, p := j.target, j.payload
	data := map[string]string{DataTarget: t.Name, DataEvent: string(p.Event), DataStatus: strconv.Itoa(status)}
	if err == nil {
		n.outcome(t, "sent")
		n.record(p.RunID, runs.Event{Type: runs.EventNotifySent, Message: fmt.Sprintf("%s message to %s delivered", p.Event, t.Name), Data: data})
		return
	}
	if errors.Is(err, context.Canceled) {
		err = errors.New("daemon stopped before it was delivered")
	}
	n.outcome(t, "failed")
	n.o.Logger.LogAttrs(context.Background(), slog.LevelWarn, "notification not delivered",
		slog.String(logkey.Target, t.Name), slog.String(logkey.Event, string(p.Event)), slog.String(logkey.RunID, p.RunID), slog.String(logkey.Error, err.Error()))
	n.record(p.RunID, runs.Event{Type: runs.EventNotifyFailed, Message: fmt.Sprintf("%s message to %s not delivered: %v", p.Event, t.Name, err), Data: data})
}

// recordTimeout bounds the store write of one notify event.
const recordTimeout = 5 * time.Second

// record appends ev to run id's log (nothing for messages about no run).
func (n *Notifier) record(id string, ev runs.Event) {
	if id == "" || n.o.Recorder == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	if _, err := n.o.Recorder.Append(ctx, id, ev); err != nil {
		n.o.Logger.LogAttrs(ctx, slog.LevelWarn, "notify event not recorded", slog.String(logkey.RunID, id), slog.String(logkey.Error, err.Error()))
	}
}

type jobKey struct{}

// attempts counts one delivery's attempts.
type attempts struct {
	job job
	n   int
}

// recordTransport records each attempt of a run's message in the run's log.
type recordTransport struct {
	n    *Notifier
	next http.RoundTripper
}

func (rt *recordTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(r)
	a, _ := r.Context().Value(jobKey{}).(*attempts)
	if a == nil {
		return resp, err
	}
	a.n++
	t, p := a.job.target, a.job.payload
	data := map[string]string{DataTarget: t.Name, DataEvent: string(p.Event), DataAttempt: strconv.Itoa(a.n)}
	var what string
	if err != nil {
		data[DataStatus] = "0"
		what = "no answer"
		if r.Context().Err() != nil {
			what = "stopped"
		}
	} else {
		data[DataStatus] = strconv.Itoa(resp.StatusCode)
		what = resp.Status
		if ra := resp.Header.Get("Retry-After"); ra != "" && len(ra) < 40 {
			what += ", Retry-After " + ra
		}
	}
	rt.n.record(p.RunID, runs.Event{Type: runs.EventNotifyAttempt, Data: data,
		Message: fmt.Sprintf("%s message to %s, attempt %d: %s", p.Event, t.Name, a.n, what)})
	return resp, err
}
