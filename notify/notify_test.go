package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/hmacsig"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/notify"
	"github.com/deploy-orchestrator/orchestrator/notify/notifytest"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/runs/sqlitestore"
)

// Tokens in the receivers' URLs: Slack and Discord URLs embed one.
const (
	slackToken   = "T000/B000/SENTINEL-slacktoken-5a5a5a5a"
	discordToken = "123456/SENTINEL-discordtoken-d15c0rd1"
	hmacSecret   = "SENTINEL-notifyhmac-0123456789abcdef"
)

// fastPolicy retries at once (Retry-After is still honoured, up to 5 s).
var fastPolicy = outbound.Policy{MaxRetries: 3, MinWait: time.Millisecond, MaxWait: 5 * time.Millisecond, MaxRetryAfter: 5 * time.Second}

type world struct {
	t     *testing.T
	store *sqlitestore.Store
	rcv   *notifytest.Server
	log   *bytes.Buffer

	mu       sync.Mutex
	attempts []string // "system route status"
	outcomes map[string][]string
}

func newWorld(t *testing.T) *world {
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "runs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &world{t: t, store: st, rcv: notifytest.NewServer(t), log: &bytes.Buffer{}, outcomes: map[string][]string{}}
}

func (w *world) targets() []config.NotifyTarget {
	return []config.NotifyTarget{
		{Name: "ops-slack", Kind: config.NotifySlack, URL: config.Secret(w.rcv.URL + "/services/" + slackToken)},
		{Name: "ops-discord", Kind: config.NotifyDiscord, URL: config.Secret(w.rcv.URL + "/api/webhooks/" + discordToken)},
		{Name: "hook", Kind: config.NotifyWebhook, URL: config.Secret(w.rcv.URL + "/hook"), Secret: hmacSecret},
	}
}

// notifier returns a Notifier over targets; its Close runs at cleanup.
func (w *world) notifier(targets []config.NotifyTarget, opts func(*notify.Options)) *notify.Notifier {
	p := fastPolicy
	var logMu sync.Mutex
	o := notify.Options{
		Default:   &config.Notify{Targets: targets, LockWait: time.Minute},
		PublicURL: "https://deploy.example.com/",
		Recorder:  w.store,
		Policy:    &p,
		Metrics: func(system, method, route string, status int, d time.Duration) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.attempts = append(w.attempts, system+" "+route+" "+http.StatusText(status))
		},
		Outcome: func(target, outcome string) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.outcomes[target] = append(w.outcomes[target], outcome)
		},
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, w.log}, nil)),
	}
	if opts != nil {
		opts(&o)
	}
	n := notify.New(o)
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Close(ctx)
	})
	return n
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// endedRun stores a run that failed on "api" and returns it.
func (w *world) endedRun(status runs.Status) runs.Run {
	w.t.Helper()
	ctx := context.Background()
	r, _, err := w.store.Create(ctx, runs.Run{Pipeline: "prod", Instance: "d1",
		Trigger: orchestrator.Trigger{Build: "42", ImageTag: "v2.0.1", Commit: "0123456789abcdef0123", By: "api:ci"}})
	if err != nil {
		w.t.Fatal(err)
	}
	start := time.Now().Add(-83 * time.Second)
	r, err = w.store.Update(ctx, r.ID, func(r *runs.Run) error {
		r.Status, r.Reason, r.StartedAt, r.EndedAt = status, "phase 2: health check of api failed", start, start.Add(83*time.Second)
		return nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// waitEvent waits for the run's log to hold an event of type typ for target and returns
// the run's notify events for target up to it. (runs.Follow stops at the run's end; these
// events come after it.)
func (w *world) waitEvent(id string, typ runs.EventType, target string) []runs.Event {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, err := w.store.Subscribe(ctx, id)
	if err != nil {
		w.t.Fatal(err)
	}
	defer sub.Close()
	for {
		evs, err := w.store.Events(ctx, id, 0, 0)
		if err != nil {
			w.t.Fatal(err)
		}
		var got []runs.Event
		for _, e := range evs {
			if strings.HasPrefix(string(e.Type), "notify.") && e.Data[notify.DataTarget] == target {
				got = append(got, e)
				if e.Type == typ {
					return got
				}
			}
		}
		select {
		case <-sub.C():
		case <-ctx.Done():
			w.t.Fatalf("run %s: no %s event for %s (got %v)", id, typ, target, got)
		}
	}
}

func statuses(evs []runs.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Type == runs.EventNotifyAttempt {
			out = append(out, e.Data[notify.DataStatus])
		}
	}
	return out
}

// TestRunFailedMessage: one failed run reaches Slack, Discord and the signed webhook, each
// message carrying the pipeline, build, image tag, commit, who triggered, the duration, the
// service, the reason and the dashboard link; the webhook's signature verifies with the
// code the daemon's own webhooks use.
func TestRunFailedMessage(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.targets(), nil)
	r := w.endedRun(runs.StatusFailed)
	n.Notify(nil, notify.Event{Kind: config.NotifyFailed, Run: &r, Service: "api"})
	for _, tg := range w.targets() {
		w.waitEvent(r.ID, runs.EventNotifySent, tg.Name)
	}
	msgs := w.rcv.Messages()
	if len(msgs) != 3 {
		t.Fatalf("got %d messages, want 3", len(msgs))
	}
	for _, m := range msgs {
		for _, want := range []string{"prod", "build 42", "failed on api", "1m23s", "phase 2: health check of api failed",
			"v2.0.1", "0123456789ab", "api:ci", "https://deploy.example.com/runs/" + r.ID} {
			if !strings.Contains(m.Text, want) {
				t.Errorf("%s: text %q lacks %q", m.Path, m.Text, want)
			}
		}
		if m.Path != "/hook" {
			continue
		}
		if err := hmacsig.Verify(m.Header.Get(notify.HeaderSignature), []byte(hmacSecret), m.Body); err != nil {
			t.Errorf("webhook signature: %v", err)
		}
		if err := hmacsig.Verify(m.Header.Get(notify.HeaderSignature), []byte("another secret"), m.Body); !errors.Is(err, hmacsig.ErrMismatch) {
			t.Errorf("signature under another secret: %v, want a mismatch", err)
		}
		var p notify.Payload
		if err := json.Unmarshal(m.Body, &p); err != nil {
			t.Fatal(err)
		}
		if p.Event != config.NotifyFailed || p.RunID != r.ID || p.Service != "api" || p.Commit != r.Trigger.Commit ||
			p.TriggeredBy != "api:ci" || p.DurationSeconds != 83 || p.Link != "https://deploy.example.com/runs/"+r.ID {
			t.Errorf("webhook payload %+v", p)
		}
	}
}

// TestRetriesOn429And5xx: a 429 with Retry-After from Slack and a 500 and a 502 from
// Discord are retried; the second Slack attempt waits the Retry-After; each attempt is a
// metric and a run event.
func TestRetriesOn429And5xx(t *testing.T) {
	w := newWorld(t)
	discord := notifytest.NewServer(t) // its own receiver, so each one's faults are its own
	targets := w.targets()[:2]
	targets[1].URL = config.Secret(discord.URL + "/api/webhooks/" + discordToken)
	n := w.notifier(targets, func(o *notify.Options) { o.Workers = 1 })
	r := w.endedRun(runs.StatusSucceeded)
	w.rcv.FailNext(notifytest.Fault{Status: http.StatusTooManyRequests, RetryAfter: "1", Body: "rate_limited"})
	discord.FailNext(notifytest.Fault{Status: http.StatusInternalServerError}, notifytest.Fault{Status: http.StatusBadGateway})
	n.Notify(nil, notify.Event{Kind: config.NotifySucceeded, Run: &r, At: r.EndedAt})
	evs := w.waitEvent(r.ID, runs.EventNotifySent, "ops-slack")
	if got := statuses(evs); strings.Join(got, ",") != "429,200" {
		t.Errorf("slack attempts: %v, want 429,200", got)
	}
	if d := evs[1].At.Sub(evs[0].At); d < 900*time.Millisecond {
		t.Errorf("second attempt %s after the 429, want after its Retry-After of 1s", d)
	}
	evs = w.waitEvent(r.ID, runs.EventNotifySent, "ops-discord")
	if got := statuses(evs); strings.Join(got, ",") != "500,502,204" {
		t.Errorf("discord attempts: %v, want 500,502,204", got)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	want := []string{"notify slack:ops-slack Too Many Requests", "notify slack:ops-slack OK",
		"notify discord:ops-discord Internal Server Error", "notify discord:ops-discord Bad Gateway", "notify discord:ops-discord No Content"}
	if strings.Join(w.attempts, "|") != strings.Join(want, "|") {
		t.Errorf("attempt metrics:\n got %q\nwant %q", w.attempts, want)
	}
}

// TestAttemptsBounded: a receiver that keeps failing gets 1+MaxRetries attempts, then the
// message is given up, recorded as failed; the URL's token appears nowhere.
func TestAttemptsBounded(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.targets()[:1], nil)
	r := w.endedRun(runs.StatusCanceled)
	faults := make([]notifytest.Fault, 10)
	for i := range faults {
		faults[i] = notifytest.Fault{Status: http.StatusServiceUnavailable}
	}
	w.rcv.FailNext(faults...)
	n.Notify(nil, notify.Event{Kind: config.NotifyCanceled, Run: &r})
	evs := w.waitEvent(r.ID, runs.EventNotifyFailed, "ops-slack")
	if got := statuses(evs); len(got) != fastPolicy.MaxRetries+1 {
		t.Errorf("attempts %v, want %d", got, fastPolicy.MaxRetries+1)
	}
	if got := w.rcv.Attempts(); got != fastPolicy.MaxRetries+1 {
		t.Errorf("receiver saw %d attempts, want %d", got, fastPolicy.MaxRetries+1)
	}
	last := evs[len(evs)-1].Message
	if !strings.Contains(last, "503") {
		t.Errorf("failure %q does not name the answer", last)
	}
	all, _ := w.store.Events(context.Background(), r.ID, 0, 0)
	b, _ := json.Marshal(all)
	for _, where := range []string{string(b), w.log.String()} {
		if strings.Contains(where, "SENTINEL-slacktoken") {
			t.Errorf("the webhook URL's token leaked: %s", where)
		}
	}
}

// TestUnreachableReceiverRedacted: a receiver that never answers (each attempt times out):
// the failure names neither the URL nor
// its token, in the run's log or the daemon's.
func TestUnreachableReceiverRedacted(t *testing.T) {
	w := newWorld(t)
	dead := notifytest.NewServer(t)
	url := dead.URL
	targets := []config.NotifyTarget{{Name: "gone", Kind: config.NotifyDiscord, URL: config.Secret(url + "/api/webhooks/" + discordToken)}}
	dead.Receiver.Hang()
	r := w.endedRun(runs.StatusInterrupted)
	p := outbound.Policy{MaxRetries: 1, MinWait: time.Millisecond, MaxWait: time.Millisecond}
	n := w.notifier(targets, func(o *notify.Options) {
		o.Policy = &p
		o.HTTPClient = &http.Client{Timeout: 50 * time.Millisecond}
	})
	n.Notify(nil, notify.Event{Kind: config.NotifyInterrupted, Run: &r})
	evs := w.waitEvent(r.ID, runs.EventNotifyFailed, "gone")
	if got := statuses(evs); strings.Join(got, ",") != "0,0" {
		t.Errorf("attempts %v, want two without an answer", got)
	}
	all, _ := w.store.Events(context.Background(), r.ID, 0, 0)
	b, _ := json.Marshal(all)
	for _, where := range []string{string(b), w.log.String()} {
		if strings.Contains(where, "SENTINEL-discordtoken") || strings.Contains(where, "/api/webhooks/") {
			t.Errorf("the webhook URL leaked: %s", where)
		}
	}
}

// TestHangingReceiverNeverBlocks: with the receiver hanging and the queue full, Notify still
// returns at once (the extra message is dropped and counted), and Close gives up on the
// hanging attempt when its context ends.
func TestHangingReceiverNeverBlocks(t *testing.T) {
	w := newWorld(t)
	w.rcv.Hang()
	n := w.notifier(w.targets()[:1], func(o *notify.Options) { o.Workers, o.QueueSize = 1, 1 })
	r := w.endedRun(runs.StatusSucceeded)
	ev := notify.Event{Kind: config.NotifySucceeded, Run: &r}

	n.Notify(nil, ev) // taken by the worker, which hangs
	<-w.rcv.Hanging()
	returned := make(chan struct{})
	go func() {
		n.Notify(nil, ev) // queued
		n.Notify(nil, ev) // queue full: dropped
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Notify blocked on a hanging receiver")
	}
	w.mu.Lock()
	if got := w.outcomes["ops-slack"]; strings.Join(got, ",") != "dropped" {
		t.Errorf("outcomes %v, want one dropped", got)
	}
	w.mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.Close(ctx); err == nil {
		t.Error("Close with an ended context and a hanging delivery: nil error, want one")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if got := w.outcomes["ops-slack"]; len(got) != 3 || got[1] != "failed" || got[2] != "failed" {
		t.Errorf("outcomes after Close %v, want dropped, failed, failed", got)
	}
}

// TestEventsFilter: a target receives only the events it lists; LockWait is 0 when no
// target wants lock_wait.
func TestEventsFilter(t *testing.T) {
	w := newWorld(t)
	tg := w.targets()[:1]
	tg[0].Events = []config.NotifyEvent{config.NotifyFailed, config.NotifyFreeze}
	n := w.notifier(tg, nil)
	if got := n.LockWait(nil); got != 0 {
		t.Errorf("LockWait = %s, want 0 (no target wants lock_wait)", got)
	}
	r := w.endedRun(runs.StatusSucceeded)
	n.Notify(nil, notify.Event{Kind: config.NotifySucceeded, Run: &r})
	n.Notify(nil, notify.Event{Kind: config.NotifyFreeze, Lock: &notify.Lock{Key: "coolify:phase2", Holder: "alice", Message: "release freeze", Until: time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)}})
	m := <-w.rcv.Received()
	for _, want := range []string{"coolify:phase2 frozen by alice until 2026-12-24T18:00:00Z: release freeze", "https://deploy.example.com/"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("text %q lacks %q", m.Text, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(w.rcv.Messages()); got != 1 {
		t.Errorf("%d messages, want only the freeze", got)
	}
	if (*notify.Notifier)(nil).LockWait(nil) != 0 {
		t.Error("a nil Notifier wants lock waits")
	}
	(*notify.Notifier)(nil).Notify(nil, notify.Event{Kind: config.NotifyFailed, Run: &r})
}

// BenchmarkNotify is what a run pays to announce its end: Notify with three targets, the
// receiver hanging and the queue full, so every call takes the drop path after its first.
func BenchmarkNotify(b *testing.B) {
	rcv := notifytest.NewServer(b)
	rcv.Hang()
	targets := []config.NotifyTarget{
		{Name: "s", Kind: config.NotifySlack, URL: config.Secret(rcv.URL + "/s")},
		{Name: "d", Kind: config.NotifyDiscord, URL: config.Secret(rcv.URL + "/d")},
		{Name: "w", Kind: config.NotifyWebhook, URL: config.Secret(rcv.URL + "/w"), Secret: hmacSecret},
	}
	n := notify.New(notify.Options{Default: &config.Notify{Targets: targets}, QueueSize: 4, Workers: 1})
	b.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = n.Close(ctx)
	})
	r := runs.Run{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Pipeline: "prod", Status: runs.StatusFailed,
		Trigger: orchestrator.Trigger{Build: "42", ImageTag: "v2", Commit: "abc", By: "api:ci"}}
	b.ReportAllocs()
	for b.Loop() {
		n.Notify(nil, notify.Event{Kind: config.NotifyFailed, Run: &r, Service: "api"})
	}
}

// Text an operator or a pipeline controls (a freeze message, a reason) reaches Slack escaped,
// so "<!channel>" or "<url|label>" in it is shown, not obeyed; Discord gets it as written,
// with mentions turned off. A text cut to the length limit stays valid UTF-8.
func TestSlackMarkupEscapedAndTextCutOnACharacter(t *testing.T) {
	w := newWorld(t)
	tg := w.targets()[:2]
	n := w.notifier(tg, nil)
	// Two-byte characters past the limit, from an odd and an even offset: one of the two
	// cuts falls inside a character.
	for _, pad := range []string{"", "x"} {
		msg := "<!channel> see <https://evil.example|the runbook> & a<b>c " + pad + strings.Repeat("é", 1000)
		n.Notify(nil, notify.Event{Kind: config.NotifyFreeze, Lock: &notify.Lock{Key: "coolify:phase2", Holder: "alice", Message: msg, Until: time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)}})
	}
	for range 2 * len(tg) {
		m := <-w.rcv.Received()
		if !utf8.ValidString(m.Text) || strings.ContainsRune(m.Text, utf8.RuneError) {
			t.Errorf("%s: text is not valid UTF-8 or holds a replacement character: %q", m.Path, m.Text[len(m.Text)-20:])
		}
		want := "&lt;!channel&gt; see &lt;https://evil.example|the runbook&gt; &amp; a&lt;b&gt;c"
		if strings.HasPrefix(m.Path, "/api/webhooks/") {
			want = "<!channel> see <https://evil.example|the runbook> & a<b>c"
		}
		if !strings.Contains(m.Text, want) {
			t.Errorf("%s: text %q lacks %q", m.Path, m.Text[:120], want)
		}
	}
}

// TestWebhookRedirectNotFollowed: a receiver that answers 307 to another host does not get
// the message re-sent there: the body and its signature reach only the configured URL, and
// the message fails naming the answer. A redirect on the receiver's own host is not followed
// either.
func TestWebhookRedirectNotFollowed(t *testing.T) {
	w := newWorld(t)
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		rw.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(other.Close)
	redirecting := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(rw, r, other.URL+"/collect", http.StatusTemporaryRedirect)
			return
		}
		http.Redirect(rw, r, "/hook-moved", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)
	targets := []config.NotifyTarget{
		{Name: "away", Kind: config.NotifyWebhook, URL: config.Secret(redirecting.URL + "/away"), Secret: hmacSecret},
		{Name: "moved", Kind: config.NotifyWebhook, URL: config.Secret(redirecting.URL + "/hook"), Secret: hmacSecret},
	}
	n := w.notifier(targets, nil)
	r := w.endedRun(runs.StatusFailed)
	n.Notify(nil, notify.Event{Kind: config.NotifyFailed, Run: &r, Service: "api"})
	for _, tg := range targets {
		evs := w.waitEvent(r.ID, runs.EventNotifyFailed, tg.Name)
		if got := statuses(evs); strings.Join(got, ",") != "307" {
			t.Errorf("%s: attempts %v, want one answered 307", tg.Name, got)
		}
		if last := evs[len(evs)-1].Message; !strings.Contains(last, "307") {
			t.Errorf("%s: failure %q does not name the answer", tg.Name, last)
		}
	}
	if got := elsewhere.Load(); got != 0 {
		t.Errorf("the redirect's target got %d requests, want none", got)
	}
}
