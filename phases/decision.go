package phases

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A run that waits for a person (runs.Decision): one mechanism for every question a run
// asks people. awaitDecision records the question on the run (status awaiting, holding no
// lock) and waits until Engine.Decide's votes settle it, it expires, or a stop request ends
// the wait. The approval of a run's plan (approval.go) is its first use.

// Why a decision ended the run.
var (
	errRejected = errors.New("rejected")
	errExpired  = errors.New("expired: nobody decided in time")
)

// decisionState is the question the run waits on, guarded by execution.mu; wake is
// signaled after every vote.
type decisionState struct {
	d    *runs.Decision
	wake chan struct{}
}

// awaitDecision asks d (Asked and Expires set here from expireAfter, 0: never) and waits
// for its outcome: nil once approved, an error wrapping errRejected or errExpired, or the
// stop request's cause. A run asked for an approval is awaiting meanwhile, and back to
// queued once approved.
func (x *execution) awaitDecision(d runs.Decision, expireAfter time.Duration) error {
	d.Asked, d.Votes, d.Outcome = x.e.now().UTC(), nil, ""
	if expireAfter > 0 {
		d.Expires = d.Asked.Add(expireAfter)
	}
	x.mu.Lock()
	if x.decision.wake == nil {
		x.decision.wake = make(chan struct{}, 1)
	}
	if x.decision.d != nil {
		d.Round = x.decision.d.Round
	}
	d.Round++
	x.decision.d = &d
	wake := x.decision.wake
	x.mu.Unlock()
	asked := d
	// A run asked for an approval, before Phase 1, is awaiting: it holds no lock, and a newer
	// build may supersede it. One asked later (an inconclusive analysis) keeps its phase,
	// and the locks it holds, until the decision.
	beforePhase1 := d.Kind == runs.DecisionApproval
	x.rec.update(func(r *runs.Run) {
		if beforePhase1 {
			r.Status = runs.StatusAwaiting
		}
		storeDecision(r, asked)
	}, runs.Event{Type: runs.EventDecisionAsked, Message: askedMessage(asked, beforePhase1)})
	x.notifyDecision(asked)

	ctx, stop := x.untilStop(x.ctx)
	defer stop()
	var expiry <-chan time.Time
	if expireAfter > 0 {
		t := time.NewTimer(expireAfter)
		defer t.Stop()
		expiry = t.C
	}
	for {
		select {
		case <-wake:
			x.mu.Lock()
			cur := *x.decision.d
			x.mu.Unlock()
			switch cur.Outcome {
			case runs.DecisionApproved:
				if beforePhase1 {
					x.rec.update(func(r *runs.Run) { r.Status = runs.StatusQueued })
				}
				return nil
			case runs.DecisionRejected:
				last := cur.Votes[len(cur.Votes)-1]
				return fmt.Errorf("%w by %s%s", errRejected, last.By, reasonSuffix(last.Reason))
			}
		case <-expiry:
			x.mu.Lock()
			settled := x.decision.d.Outcome != ""
			if !settled {
				x.decision.d.Outcome = runs.DecisionExpired
			}
			cur := *x.decision.d
			x.mu.Unlock()
			if settled {
				continue // a vote settled it as the timer fired: wake says how
			}
			x.rec.update(func(r *runs.Run) { storeDecision(r, cur) })
			return fmt.Errorf("%s %w (%s)", d.Kind, errExpired, d.Expires.Format(time.RFC3339))
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Decide implements orchestrator.Engine.
func (e *Engine) Decide(ctx context.Context, id string, v orchestrator.DecisionVote) (*runs.Run, error) {
	if v.By == "" {
		return nil, fmt.Errorf("decide on run %q: %w", id, &orchestrator.FieldError{Field: "by", Reason: "is required"})
	}
	e.mu.Lock()
	x := e.execs[id]
	e.mu.Unlock()
	r, err := e.d.Store.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("decide on run %q: %w", id, err)
	}
	if r.Status.Terminal() {
		return &r, fmt.Errorf("decide on run %q: it is %s: %w", id, r.Status, runs.ErrEnded)
	}
	if x == nil {
		return &r, fmt.Errorf("run %q is executed by %q: %w (decide there)", id, r.Instance, orchestrator.ErrNotOwner)
	}
	d, err := x.vote(v, r.Trigger.By)
	if err != nil {
		return &r, fmt.Errorf("decide on run %q: %w", id, err)
	}
	verdict := "rejected"
	if v.Approve {
		verdict = "approved"
	}
	x.rec.update(func(r *runs.Run) { storeDecision(r, d) }, runs.Event{Type: runs.EventDecisionVote,
		Message: fmt.Sprintf("%s %s %s%s (%d of %d approvals)", v.By, verdict, shortDigest(d.Digest), reasonSuffix(v.Reason), d.Approvals(), d.Needed),
		Data:    map[string]string{runs.DataBy: v.By, runs.DataReason: v.Reason, runs.DataVerdict: verdict}})
	x.mu.Lock()
	wake := x.decision.wake
	x.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
	r.Decision = &d
	return &r, nil
}

// vote applies v to the pending decision and returns it as it stands after the vote.
// triggeredBy is the run's Trigger.By, for ForbidSelf.
func (x *execution) vote(v orchestrator.DecisionVote, triggeredBy string) (runs.Decision, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	d := x.decision.d
	switch {
	case d == nil || d.Outcome != "":
		return runs.Decision{}, orchestrator.ErrNotAwaiting
	case v.Approve && v.Digest != d.Digest:
		return runs.Decision{}, fmt.Errorf("%w: the %s asked about is now %s, not %s; review it again",
			orchestrator.ErrDecisionChanged, d.Kind, shortDigest(d.Digest), shortDigest(v.Digest))
	case v.Approve && d.ForbidSelf && subjectOf(v.By) == subjectOf(triggeredBy):
		return runs.Decision{}, fmt.Errorf("%w: %s triggered the run and may not approve it", orchestrator.ErrSecondPerson, subjectOf(v.By))
	case slices.ContainsFunc(d.Votes, func(o runs.Vote) bool { return o.By == v.By && o.Digest == d.Digest }):
		return runs.Decision{}, fmt.Errorf("%w: %s already voted", orchestrator.ErrSecondPerson, v.By)
	}
	d.Votes = append(d.Votes, runs.Vote{By: v.By, Approve: v.Approve, Digest: d.Digest, Reason: v.Reason, At: x.e.now().UTC()})
	switch {
	case !v.Approve:
		d.Outcome = runs.DecisionRejected
	case d.Approvals() >= d.Needed:
		d.Outcome = runs.DecisionApproved
	}
	cp := *d
	cp.Votes = slices.Clone(d.Votes)
	return cp, nil
}

// storeDecision puts d on the run as stored unless the stored one is newer: a later round,
// or this round with more votes. A vote's write and the run's next question race (the
// run goes on once the vote settles the decision in memory); the newest must win.
func storeDecision(r *runs.Run, d runs.Decision) {
	if cur := r.Decision; cur != nil && (cur.Round > d.Round || cur.Round == d.Round && len(cur.Votes) > len(d.Votes)) {
		return
	}
	r.Decision = &d
}

// subjectOf is who a "by" names, without the operator name a request may add:
// "api:ops (alice)" → "api:ops".
func subjectOf(by string) string {
	s, _, _ := strings.Cut(by, " (")
	return s
}

// shortDigest is a digest as people compare it: its first 12 characters.
func shortDigest(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

// askedMessage is the decision.asked event's text: how many approvals of what, until when,
// and what the people deciding are shown.
func askedMessage(d runs.Decision, holdsNoLock bool) string {
	msg := "waiting"
	if holdsNoLock {
		msg += ", holding no lock,"
	}
	msg += fmt.Sprintf(" for %d approval(s) of %s %s", d.Needed, d.Kind, shortDigest(d.Digest))
	if !d.Expires.IsZero() {
		msg += " until " + d.Expires.Format(time.RFC3339)
	}
	return msg + ": " + d.Summary
}
