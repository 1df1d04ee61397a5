package metrics

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// deliveryCacheFor is how long a scrape's delivery figures are reused: they read up to 90
// days of runs.
const deliveryCacheFor = time.Minute

// deliveryTimeout bounds a scrape's read of the runs.
const deliveryTimeout = 5 * time.Second

// Delivery exports each pipeline's delivery figures (runs.DeliveryFigures) over 7, 30 and 90
// days as gauges, computed at scrape time from the runs read reads (the runs of the last 90
// days), at most once a minute. A failed read exports nothing for that scrape. Only the
// first call registers: a second (another server over the same Metrics) keeps the first.
func (m *Metrics) Delivery(read func(ctx context.Context, since time.Time) ([]runs.Run, error)) {
	if m == nil {
		return
	}
	_ = m.reg.Register(&deliveryCollector{read: read})
}

var (
	descPerDay = prometheus.NewDesc("orchestrator_delivery_deployments_per_day",
		"Successful runs per day over the window, by pipeline and window in days.", []string{"pipeline", "days"}, nil)
	descLead = prometheus.NewDesc("orchestrator_delivery_lead_time_seconds",
		"Median time from a trigger to its change verified running, over the window.", []string{"pipeline", "days"}, nil)
	descCFR = prometheus.NewDesc("orchestrator_delivery_change_failure_rate",
		"Share of the runs that deployed which failed after deploying or were rolled back, over the window.", []string{"pipeline", "days"}, nil)
	descRestore = prometheus.NewDesc("orchestrator_delivery_time_to_restore_seconds",
		"Median time from a failed change to the pipeline's next successful run, over the window.", []string{"pipeline", "days"}, nil)
)

// deliveryCollector computes the delivery gauges when scraped.
type deliveryCollector struct {
	read func(ctx context.Context, since time.Time) ([]runs.Run, error)

	mu      sync.Mutex
	at      time.Time
	metrics []prometheus.Metric
}

func (c *deliveryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPerDay, descLead, descCFR, descRestore} {
		ch <- d
	}
}

func (c *deliveryCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.metrics == nil || now.Sub(c.at) > deliveryCacheFor {
		ctx, cancel := context.WithTimeout(context.Background(), deliveryTimeout)
		defer cancel()
		rs, err := c.read(ctx, now.Add(-time.Duration(runs.Windows[len(runs.Windows)-1])*24*time.Hour))
		if err != nil {
			return
		}
		c.metrics, c.at = deliveryMetrics(rs, now), now
	}
	for _, m := range c.metrics {
		ch <- m
	}
}

// deliveryMetrics are the gauges of every pipeline and window.
func deliveryMetrics(rs []runs.Run, now time.Time) []prometheus.Metric {
	out := []prometheus.Metric{}
	for _, days := range runs.Windows {
		for _, f := range runs.DeliveryFigures(rs, days, now) {
			w := strconv.Itoa(days)
			out = append(out,
				prometheus.MustNewConstMetric(descPerDay, prometheus.GaugeValue, f.PerDay, f.Pipeline, w),
				prometheus.MustNewConstMetric(descLead, prometheus.GaugeValue, f.LeadTime.Seconds(), f.Pipeline, w),
				prometheus.MustNewConstMetric(descCFR, prometheus.GaugeValue, f.ChangeFailureRate, f.Pipeline, w),
				prometheus.MustNewConstMetric(descRestore, prometheus.GaugeValue, f.TimeToRestore.Seconds(), f.Pipeline, w))
		}
	}
	return out
}
