package promtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// App is a service for Prometheus to scrape: per service and version, a request counter
// by status code (http_requests_total{service,version,code}) and a latency summary
// (http_request_duration_seconds_sum and _count). Each scrape adds the traffic of one scrape
// interval, as Set says, so the rates Prometheus computes are the ones set, exactly.
type App struct {
	// Addr is the host:port Prometheus scrapes (/metrics).
	Addr string
	srv  *http.Server

	mu      sync.Mutex
	rates   map[series]Traffic
	ok, bad map[series]float64
	latSum  map[series]float64
	scrapes atomic.Int64
	scraped chan struct{}
}

type series struct{ service, version string }

// Traffic is what one service's version serves per scrape interval.
type Traffic struct {
	// Requests per scrape; ErrorRatio of them answer 500 (0 to 1); each takes Latency.
	Requests   float64
	ErrorRatio float64
	Latency    time.Duration
}

// StartApp serves an App (NewApp) until the test ends.
func StartApp(t testing.TB) *App {
	t.Helper()
	a, err := NewApp()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// NewApp serves an App on a free loopback port until Close.
func NewApp() (*App, error) {
	a := &App{rates: map[series]Traffic{}, ok: map[series]float64{}, bad: map[series]float64{},
		latSum: map[series]float64{}, scraped: make(chan struct{}, 1)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a.Addr = l.Addr().String()
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serveMetrics), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(l) }()
	return a, nil
}

// Close stops serving.
func (a *App) Close() { _ = a.srv.Close() }

// WaitScrapes waits until the App was scraped n more times than when it was called, for at
// most n+10 scrape intervals.
func (a *App) WaitScrapes(ctx context.Context, n int) error {
	target := a.Scrapes() + int64(n)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n+10)*ScrapeInterval)
	defer cancel()
	for a.Scrapes() < target {
		select {
		case <-ctx.Done():
			return fmt.Errorf("scraped %d times, want %d", a.Scrapes(), target)
		case <-a.scraped:
		}
	}
	return nil
}

// Set says what service's version serves from the next scrape on.
func (a *App) Set(service, version string, tr Traffic) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rates[series{service, version}] = tr
}

// Scrapes is how many times /metrics was read.
func (a *App) Scrapes() int64 { return a.scrapes.Load() }

func (a *App) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	keys := make([]series, 0, len(a.rates))
	for k, tr := range a.rates {
		bad := tr.Requests * tr.ErrorRatio
		a.ok[k] += tr.Requests - bad
		a.bad[k] += bad
		a.latSum[k] += tr.Requests * tr.Latency.Seconds()
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y series) int { return strings.Compare(x.service+"\x00"+x.version, y.service+"\x00"+y.version) })
	var b strings.Builder
	b.WriteString("# TYPE http_requests_total counter\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "http_requests_total{service=%s,version=%s,code=\"200\"} %s\n", strconv.Quote(k.service), strconv.Quote(k.version), num(a.ok[k]))
		fmt.Fprintf(&b, "http_requests_total{service=%s,version=%s,code=\"500\"} %s\n", strconv.Quote(k.service), strconv.Quote(k.version), num(a.bad[k]))
	}
	b.WriteString("# TYPE http_request_duration_seconds summary\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "http_request_duration_seconds_sum{service=%s,version=%s} %s\n", strconv.Quote(k.service), strconv.Quote(k.version), num(a.latSum[k]))
		fmt.Fprintf(&b, "http_request_duration_seconds_count{service=%s,version=%s} %s\n", strconv.Quote(k.service), strconv.Quote(k.version), num(a.ok[k]+a.bad[k]))
	}
	a.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
	a.scrapes.Add(1)
	select {
	case a.scraped <- struct{}{}:
	default:
	}
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
