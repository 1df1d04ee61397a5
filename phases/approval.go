package phases

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/notify"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The gates before Phase 1: the approval of the run's exact plan (a runs.Decision, see
// decision.go), then the deploy windows (window.go); and, after waiting for the windows, the
// plan is read again: if what the run would change is no longer what was approved, the run
// asks again.

// gateBeforePhase1 returns nil once the run may start Phase 1.
func (x *execution) gateBeforePhase1() error {
	for {
		digest, err := x.awaitApproval()
		if err != nil {
			return err
		}
		if err := x.awaitWindow(runs.Phase1); err != nil {
			return err
		}
		if x.p.Approvals == nil {
			return nil
		}
		now, _, err := x.planDigest(x.ctx)
		if err != nil {
			return fmt.Errorf("read the plan again: %w", err)
		}
		if now == digest {
			return nil
		}
		x.rec.event(runs.Event{Type: runs.EventDecisionAsked,
			Message: fmt.Sprintf("the plan changed since it was approved (%s, now %s): asking again", shortDigest(digest), shortDigest(now))})
	}
}

// gateOutcome is the end of a run its gates stopped: expired, or as outcome says.
func (x *execution) gateOutcome(err error) (runs.Status, string) {
	if errors.Is(err, errExpired) {
		return runs.StatusExpired, err.Error()
	}
	return x.outcome(err, "gate")
}

// awaitApproval returns the digest of the plan people approved, once the pipeline's
// approvals are given ("" when it needs none).
func (x *execution) awaitApproval() (string, error) {
	a := x.p.Approvals
	if a == nil {
		return "", nil
	}
	digest, summary, err := x.planDigest(x.ctx)
	if err != nil {
		return "", fmt.Errorf("read the plan to approve: %w", err)
	}
	d := runs.Decision{Kind: runs.DecisionApproval, Digest: digest, Summary: summary, Needed: a.Required, ForbidSelf: a.ForbidSelfApproval}
	return digest, x.awaitDecision(d, a.ExpireAfter)
}

// planDigest reads what the run would change (each service's plan, as `plan` shows it)
// and returns its digest and a summary for people. The digest covers, besides the plan, a
// hash of every value the run would write, so a changed value (a secret rotated, a new
// literal) changes it although the plan shows values only as "changed".
func (x *execution) planDigest(ctx context.Context) (digest, summary string, err error) {
	h := sha256.New()
	h.Write([]byte("orchestrator plan v1\n"))
	var parts []string
	for _, s := range x.p.Services {
		sp, err := x.planService(ctx, s)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", s.Name, err)
		}
		b, _ := json.Marshal(sp)
		h.Write(b)
		desired, err := x.desiredEnvs(ctx, s)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", s.Name, err)
		}
		for _, d := range desired {
			v := sha256.Sum256([]byte(d.key + "=" + d.value))
			h.Write(v[:])
		}
		newTag := ""
		if sp.ImageTag != nil {
			newTag = sp.ImageTag.New
		}
		parts = append(parts, serviceSummary(s, sp.Env, sp.ImageTag != nil, newTag))
	}
	return hex.EncodeToString(h.Sum(nil)), strings.Join(parts, "; "), nil
}

// serviceSummary says what a service's plan changes: "api: image tag → v2, 1 env change".
func serviceSummary(s config.Service, env []orchestrator.EnvChange, tag bool, newTag string) string {
	changes := 0
	for _, e := range env {
		if e.Action != orchestrator.EnvUnchanged {
			changes++
		}
	}
	var what []string
	if tag {
		what = append(what, "image tag → "+newTag)
	}
	if changes > 0 {
		what = append(what, fmt.Sprintf("%d env change(s)", changes))
	}
	if len(what) == 0 {
		what = append(what, "no change")
	}
	return s.Name + ": " + strings.Join(what, ", ")
}

// notifyDecision announces, through the pipeline's notifiers, that the run waits for d,
// with a link to the run.
func (x *execution) notifyDecision(d runs.Decision) {
	if x.e.d.Notifier == nil {
		return
	}
	r := x.run
	if d.Kind == runs.DecisionApproval {
		r.Status = runs.StatusAwaiting
		r.Reason = fmt.Sprintf("%d approval(s) of plan %s needed (%s)", d.Needed, shortDigest(d.Digest), d.Summary)
	} else {
		r.Reason = fmt.Sprintf("a decision is needed: %s (approve %s to go on; reject to roll back)", d.Summary, shortDigest(d.Digest))
	}
	x.e.d.Notifier.Notify(x.p.Notify, notify.Event{Kind: config.NotifyAwaiting, Run: &r, At: d.Asked})
}
