package outbound

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"3", 3 * time.Second, true},
		{" 0 ", 0, true},
		{epoch.Add(10 * time.Second).Format(http.TimeFormat), 10 * time.Second, true},
		{epoch.Add(-time.Minute).Format(http.TimeFormat), 0, true}, // in the past: now
		{"", 0, false},
		{"-1", 0, false},
		{"soon", 0, false},
		{"1.5", 0, false},
	} {
		got, ok := ParseRetryAfter(tc.in, epoch)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func response(status int, header http.Header) *http.Response {
	if header == nil {
		header = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(strings.NewReader("{}"))}
}

// The server's wait wins after 429 and 503, in both forms, capped at MaxRetryAfter; other
// answers get the policy's backoff.
func TestBackoffHonorsRetryAfter(t *testing.T) {
	c := New(Options{System: "x", Now: func() time.Time { return epoch },
		Policy: Policy{MaxRetries: 3, MinWait: time.Millisecond, MaxWait: 2 * time.Millisecond, MaxRetryAfter: time.Minute}})
	date := epoch.Add(42 * time.Second).Format(http.TimeFormat)
	for _, tc := range []struct {
		status int
		after  string
		want   time.Duration
	}{
		{429, "7", 7 * time.Second},
		{503, "7", 7 * time.Second},
		{429, date, 42 * time.Second},
		{503, date, 42 * time.Second},
		{429, "3600", time.Minute}, // capped
	} {
		if got := c.backoff(0, 0, 0, response(tc.status, http.Header{"Retry-After": {tc.after}})); got != tc.want {
			t.Errorf("%d Retry-After %q: backoff %v, want %v", tc.status, tc.after, got, tc.want)
		}
	}
	if got := c.backoff(0, 0, 0, response(502, http.Header{"Retry-After": {"7"}})); got > 2*time.Millisecond {
		t.Errorf("502: backoff %v took Retry-After, want the policy's (<= 2ms)", got)
	}
	// A hook reads the wait from the body when the header is absent (Infisical's message).
	c.o.RetryAfter = func(*http.Response) (time.Duration, bool) { return 9 * time.Second, true }
	if got := c.backoff(0, 0, 0, response(429, nil)); got != 9*time.Second {
		t.Errorf("429 with a hook: backoff %v, want 9s", got)
	}
}

// Each wait is drawn from [d/2, d] of the doubling backoff, and the draws differ (jitter).
func TestBackoffJitterBounds(t *testing.T) {
	p := Policy{MinWait: 100 * time.Millisecond, MaxWait: 800 * time.Millisecond}
	for attempt, d := range []time.Duration{100, 200, 400, 800, 800, 800} {
		d *= time.Millisecond
		seen := map[time.Duration]bool{}
		for range 200 {
			got := p.Backoff(attempt)
			if got < d/2 || got > d {
				t.Fatalf("attempt %d: backoff %v, want in [%v, %v]", attempt, got, d/2, d)
			}
			seen[got] = true
		}
		if len(seen) < 10 {
			t.Errorf("attempt %d: %d distinct waits in 200 draws, want jitter", attempt, len(seen))
		}
	}
	if got := (Policy{}).Backoff(3); got != 0 {
		t.Errorf("zero policy: backoff %v, want 0", got)
	}
	if got := (Policy{MinWait: time.Second, MaxWait: time.Hour}).Backoff(1000); got < 30*time.Minute || got > time.Hour {
		t.Errorf("huge attempt: backoff %v, want within [MaxWait/2, MaxWait]", got)
	}
}

func TestCheckRetryByKind(t *testing.T) {
	c := New(Options{System: "x", Policy: Policy{MaxRetryAfter: time.Minute}})
	for status, want := range map[int][2]bool{ // {idempotent, creating}
		200: {false, false}, 400: {false, false}, 404: {false, false}, 409: {false, false},
		429: {true, true}, 500: {true, false}, 501: {false, false}, 502: {true, false},
		503: {true, true}, 504: {true, false},
	} {
		for i, kind := range []Kind{Idempotent, Creating} {
			ctx := context.WithValue(context.Background(), metaKey{}, meta{kind: kind})
			if got, _ := c.checkRetry(ctx, response(status, nil), nil); got != want[i] {
				t.Errorf("status %d, kind %d: retry = %v, want %v", status, kind, got, want[i])
			}
		}
	}
	ctx := context.WithValue(context.Background(), metaKey{}, meta{kind: Creating})
	if got, _ := c.checkRetry(ctx, response(429, http.Header{"Retry-After": {"3600"}}), nil); got {
		t.Error("429 asking for an hour: retried, want the call to end (over MaxRetryAfter)")
	}
}
