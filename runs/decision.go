package runs

import "time"

// A run that waits for a person: one mechanism for every question a run asks people (an
// approval of its plan before Phase 1; an inconclusive analysis after a wave). The run is
// awaiting, holds no lock, and records the question in Run.Decision; people vote through
// the engine (approve or reject, naming the Digest they saw); enough approvals of the
// current Digest let it go on, one rejection ends it failed, and nobody deciding before
// Expires ends it expired. What is decided on changes (a new Digest): the votes of the old
// one no longer count and the question is asked again.

// Decision kinds.
const (
	// DecisionApproval: the run's plan (what it would change) must be approved before Phase 1.
	DecisionApproval = "approval"
	// DecisionInconclusive: an analysis of the release was inconclusive; an approval lets
	// the run go on, a rejection (or nobody in time) rolls the release back.
	DecisionInconclusive = "inconclusive_analysis"
)

// Decision is a question a run waits on people for.
type Decision struct {
	// Kind says what is asked (DecisionApproval, …).
	Kind string `json:"kind"`
	// Digest identifies exactly what is decided on (for an approval, the plan's digest): a
	// vote names the digest it saw, and counts only for that one.
	Digest string `json:"digest"`
	// Summary is what the people deciding are shown (names and tags, never values).
	Summary string `json:"summary,omitempty"`
	// Needed is how many approvals by different people it takes.
	Needed int `json:"needed"`
	// ForbidSelf: the person who triggered the run may not approve it.
	ForbidSelf bool `json:"forbid_self,omitempty"`
	// Round counts the questions the run asked, from 1: a later one replaces an earlier.
	Round int `json:"round"`
	// Asked is when it was asked; Expires when the run ends expired if still undecided.
	Asked   time.Time `json:"asked"`
	Expires time.Time `json:"expires,omitzero"`
	// Votes are the approvals and rejections given for Digest, in order.
	Votes []Vote `json:"votes,omitempty"`
	// Outcome is "" while pending, then "approved", "rejected" or "expired".
	Outcome string `json:"outcome,omitempty"`
}

// Decision outcomes.
const (
	DecisionApproved = "approved"
	DecisionRejected = "rejected"
	DecisionExpired  = "expired"
)

// Vote is one person's answer to a Decision.
type Vote struct {
	By      string    `json:"by"`
	Approve bool      `json:"approve"`
	Digest  string    `json:"digest"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
}

// Approvals returns how many different people approved d's Digest.
func (d *Decision) Approvals() int {
	seen := map[string]bool{}
	for _, v := range d.Votes {
		if v.Approve && v.Digest == d.Digest {
			seen[v.By] = true
		}
	}
	return len(seen)
}
