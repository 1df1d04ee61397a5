package api_test

import (
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkListRuns measures GET /v1/runs (a page of 50 runs with their steps) through the
// whole handler, over the real SQLite store holding 200 runs, from parallel clients. It
// reports the p50 and p99 latency of one request besides ns/op.
func BenchmarkListRuns(b *testing.B) {
	f := newFixture(b)
	for range 200 {
		f.trigger("prod", map[string]string{"image_tag": "v1"})
	}
	var (
		mu   sync.Mutex
		lats []time.Duration
	)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			start := time.Now()
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, request("GET", "/v1/runs?limit=50", readToken, nil))
			mine = append(mine, time.Since(start))
			if rec.Code != 200 {
				b.Errorf("status %d", rec.Code)
				return
			}
		}
		mu.Lock()
		lats = append(lats, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	slices.Sort(lats)
	if n := len(lats); n > 0 {
		b.ReportMetric(float64(lats[n/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lats[n*99/100].Microseconds()), "p99-µs")
	}
}
