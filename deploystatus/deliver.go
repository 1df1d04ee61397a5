package deploystatus

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// claimBatch is how many reports one pass claims; each is told by its own goroutine.
const claimBatch = 8

// Run tells the hosts what the outbox holds until ctx ends: it claims due reports when
// woken by Report and every Poll, and tells each in order. It returns once the reports it
// was telling are saved. It first takes back the claims its owner name holds: a previous
// life's, killed while it told them.
func (rp *Reporter) Run(ctx context.Context) {
	if n, err := rp.o.Store.ReleaseClaims(ctx, rp.o.Owner); err != nil {
		rp.log.LogAttrs(ctx, slog.LevelWarn, "earlier claims on deployment reports not released; they are told once they expire",
			slog.String(logkey.Error, err.Error()))
	} else if n > 0 {
		rp.log.LogAttrs(ctx, slog.LevelInfo, "deployment reports a previous life of this daemon claimed are told again", slog.Int(logkey.Count, n))
	}
	t := time.NewTicker(rp.o.Poll)
	defer t.Stop()
	for {
		rp.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-rp.wake:
		}
	}
}

// Drain tells what is due now, once, and returns when it is told or ctx ends: for a daemon
// that stops (Run's loop may be telling other reports meanwhile: claims keep them apart).
func (rp *Reporter) Drain(ctx context.Context) { rp.pass(ctx) }

// pass claims due reports until none is left, telling each batch at once.
func (rp *Reporter) pass(ctx context.Context) {
	for ctx.Err() == nil {
		reps, err := rp.o.Store.ClaimReports(ctx, rp.o.Owner, rp.o.Lease, claimBatch)
		if err != nil {
			if ctx.Err() == nil {
				rp.log.LogAttrs(ctx, slog.LevelWarn, "deployment reports not claimed", slog.String(logkey.Error, err.Error()))
			}
			return
		}
		var wg sync.WaitGroup
		for _, r := range reps {
			wg.Go(func() { rp.deliver(ctx, r) })
		}
		wg.Wait()
		if len(reps) < claimBatch {
			return
		}
	}
}

// deliver tells the host the states of report r not told yet, in order, stopping at the
// first that fails, and saves how far it got. A retryable failure waits for the backoff
// (or the host's Retry-After); a refusal, or a state retried past GiveUp, is dropped with a
// status.failed event, and the next state goes on.
func (rp *Reporter) deliver(ctx context.Context, r runs.Report) {
	host, err := rp.client(r.Pipeline, r.Host)
	for err == nil && r.Pending() {
		st := r.States[r.Sent]
		if r.Sent > 0 && r.States[r.Sent-1].State == st.State {
			r.Sent++ // the host shows it already (a phase after the first is in progress too)
			continue
		}
		err = rp.tell(ctx, host, &r, st)
		if err == nil {
			r.Sent, r.Attempts, r.LastError = r.Sent+1, 0, ""
			rp.o.Outcome(r.Host, outcomeSent)
			if st.State == orchestrator.HostSuccess {
				rp.replace(ctx, r)
			}
		}
	}
	if err != nil && ctx.Err() == nil {
		rp.failed(ctx, &r, err)
	}
	// Saved even when ctx ended (the daemon stops): the claim is given back, and what was
	// told is not told twice.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := rp.o.Store.SaveReport(sctx, rp.o.Owner, r); err != nil {
		level := slog.LevelWarn
		if errors.Is(err, runs.ErrNotClaimed) {
			level = slog.LevelInfo // the claim expired and another daemon took it over
		}
		rp.log.LogAttrs(sctx, level, "deployment report not saved", slog.String(logkey.RunID, r.RunID),
			slog.String(logHost, r.Host), slog.String(logkey.Error, err.Error()))
	}
}

// tell tells the host one state of r, creating the deployment first when it has none. A
// deployment never created has nothing to mark inactive: that state is done at once.
func (rp *Reporter) tell(ctx context.Context, host Host, r *runs.Report, st runs.ReportState) error {
	ctx, cancel := context.WithTimeout(ctx, rp.o.RequestTimeout)
	defer cancel()
	if r.HostID == "" {
		if st.State == orchestrator.HostInactive {
			return nil
		}
		id, err := host.CreateDeployment(ctx, r.Deployment)
		if err != nil {
			return err
		}
		r.HostID = id
	}
	return host.SetDeploymentState(ctx, r.Deployment, r.HostID, st.State, st.Description)
}

// replace marks the deployment the report r replaces in its environment inactive: the
// last one that succeeded there.
func (rp *Reporter) replace(ctx context.Context, r runs.Report) {
	d := r.Deployment
	scope := strings.Join([]string{r.Host, strings.ToLower(d.Repo), d.Environment}, ":")
	prev, err := rp.o.Store.SwapLatestReport(ctx, scope, r.Key)
	if err == nil && prev != "" && prev != r.Key {
		runID := strings.TrimPrefix(prev, r.Host+"/")
		err = rp.o.Store.AddReportState(ctx, runs.Report{Key: prev, Host: r.Host, RunID: runID, Pipeline: r.Pipeline},
			runs.ReportState{State: orchestrator.HostInactive, Description: "Replaced by run " + r.RunID, At: rp.o.Now().UTC()})
	}
	if err != nil && ctx.Err() == nil {
		rp.log.LogAttrs(ctx, slog.LevelWarn, "replaced deployment not marked inactive", slog.String(logkey.RunID, r.RunID),
			slog.String(logHost, r.Host), slog.String(logkey.Error, err.Error()))
	}
}

// failed records a failed attempt at r's next state: retried after a backoff when the
// failure is worth it and the state is younger than GiveUp, else dropped.
func (rp *Reporter) failed(ctx context.Context, r *runs.Report, err error) {
	now := rp.o.Now()
	var st runs.ReportState
	if r.Pending() {
		st = r.States[r.Sent]
	}
	r.Attempts++
	r.LastError = err.Error()
	wait, again := retryable(err)
	again = again && r.Pending() && now.Sub(st.At) < rp.o.GiveUp
	data := map[string]string{dataHost: r.Host, dataState: string(st.State), dataAttempt: strconv.Itoa(r.Attempts)}
	if again {
		r.NotBefore = now.Add(max(wait, rp.backoff(r.Attempts)))
		rp.o.Outcome(r.Host, outcomeRetry)
		if r.Attempts == 1 {
			rp.event(ctx, r.RunID, runs.Event{Type: runs.EventStatusFailed, Data: data,
				Message: r.Host + " " + string(st.State) + ": " + r.LastError + " (retrying)"})
		}
		return
	}
	if r.Pending() {
		r.Sent++
	}
	r.Attempts, r.NotBefore = 0, time.Time{}
	rp.o.Outcome(r.Host, outcomeDropped)
	data[dataGaveUp] = "true"
	rp.event(ctx, r.RunID, runs.Event{Type: runs.EventStatusFailed, Data: data,
		Message: r.Host + " " + string(st.State) + ": " + r.LastError + " (given up)"})
	rp.log.LogAttrs(ctx, slog.LevelWarn, "deployment state given up", slog.String(logkey.RunID, r.RunID),
		slog.String(logHost, r.Host), slog.String(logState, string(st.State)), slog.String(logkey.Error, r.LastError))
}

// backoff is the wait before attempt n+1: Backoff doubled n-1 times, at most MaxBackoff.
func (rp *Reporter) backoff(n int) time.Duration {
	d := rp.o.Backoff
	for i := 1; i < n && d < rp.o.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, rp.o.MaxBackoff)
}
