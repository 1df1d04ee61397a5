package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Delivery figures per pipeline (runs.DeliveryFigures): GET /v1/delivery, the /delivery
// page, and the orchestrator_delivery_* gauges (metrics.Delivery, fed by recentRuns).

// deliveryMaxRuns bounds the runs one computation reads (newest first).
const deliveryMaxRuns = 20000

// deliveryResponse is GET /v1/delivery: each pipeline's figures over the window.
type deliveryResponse struct {
	Days      int            `json:"days"`
	Now       time.Time      `json:"now"`
	Pipelines []runs.Figures `json:"pipelines"`
	Truncated bool           `json:"truncated,omitempty"`
}

// deliveryDays reads ?days= (7, 30 or 90; default 30).
func deliveryDays(r *http.Request) (int, error) {
	q := r.URL.Query().Get("days")
	if q == "" {
		return 30, nil
	}
	for _, d := range runs.Windows {
		if q == strconv.Itoa(d) {
			return d, nil
		}
	}
	return 0, fieldErr("days", "want 7, 30 or 90")
}

// handleDelivery serves GET /v1/delivery?days=7|30|90.
func (s *server) handleDelivery() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		days, err := deliveryDays(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		d, err := s.delivery(r.Context(), days)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		encode(w, http.StatusOK, d)
	}
}

// delivery computes the figures of every pipeline over days.
func (s *server) delivery(ctx context.Context, days int) (deliveryResponse, error) {
	now := s.now().UTC()
	rs, truncated, err := s.runsSince(ctx, now.Add(-time.Duration(days)*24*time.Hour))
	if err != nil {
		return deliveryResponse{}, err
	}
	figs := runs.DeliveryFigures(rs, days, now)
	if figs == nil {
		figs = []runs.Figures{}
	}
	return deliveryResponse{Days: days, Now: now, Pipelines: figs, Truncated: truncated}, nil
}

// recentRuns reads the runs created since since, for metrics.Delivery.
func (s *server) recentRuns(ctx context.Context, since time.Time) ([]runs.Run, error) {
	rs, _, err := s.runsSince(ctx, since)
	return rs, err
}

// runsSince lists the runs created since since, newest first, at most deliveryMaxRuns
// (truncated says more were there).
func (s *server) runsSince(ctx context.Context, since time.Time) ([]runs.Run, bool, error) {
	var out []runs.Run
	f := runs.Filter{Limit: runs.MaxLimit, ReadOnly: true}
	for {
		page, err := s.runs.List(ctx, f)
		if err != nil {
			return nil, false, err
		}
		for _, r := range page.Runs {
			if r.CreatedAt.Before(since) {
				return out, false, nil
			}
			if len(out) == deliveryMaxRuns {
				return out, true, nil
			}
			out = append(out, r)
		}
		if f.Cursor = page.Next; f.Cursor == "" {
			return out, false, nil
		}
	}
}
