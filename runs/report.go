package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
)

// Report is one run's deployment as one Git host should come to show it: the states the run
// went through, in order, and how far the host has been told. The engine appends states
// without waiting on the host; a reporter delivers them in order, retrying with backoff, and
// a report survives a daemon restart until every state is delivered.
//
// The store sets Created and Updated (on every write) with its clock: the SQLite store's is
// the host's, the Redis store's the server's (so that claims expire alike for every daemon;
// NotBefore, which the reporter sets, is compared with that clock too).
type Report struct {
	// Key is unique: ReportKey(host, run ID). ErrInvalid when empty or over MaxReportKey.
	Key string `json:"key"`
	// Host is the host's name in the config: "github", "gitlab".
	Host       string                      `json:"host"`
	RunID      string                      `json:"run_id"`
	Pipeline   string                      `json:"pipeline,omitempty"`
	Deployment orchestrator.HostDeployment `json:"deployment"`
	// HostID is the host's deployment ID once created ("" before).
	HostID string `json:"host_id,omitempty"`
	// States are appended by AddReportState, never rewritten.
	States []ReportState `json:"states,omitempty"`
	// Sent is how many of States the host has been told; it never goes down.
	Sent int `json:"sent,omitempty"`
	// Attempts counts the failed attempts at the next state since one was last sent.
	Attempts int `json:"attempts,omitempty"`
	// NotBefore: no delivery attempt before (backoff, a host's rate limit).
	NotBefore time.Time `json:"not_before,omitzero"`
	// LastError is the last failure, for people ("" after a success).
	LastError string    `json:"last_error,omitempty"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
}

// ReportState is one state of a Report.
type ReportState struct {
	State       orchestrator.HostState `json:"state"`
	Description string                 `json:"description,omitempty"`
	At          time.Time              `json:"at"`
}

// Pending reports whether some state is not delivered yet.
func (r Report) Pending() bool { return r.Sent < len(r.States) }

// MaxReportKey is the longest Report.Key, in bytes.
const MaxReportKey = 200

// ReportKey is the key of run runID's report to host.
func ReportKey(host, runID string) string { return host + "/" + runID }

// ReportStore keeps the reports of runs to Git hosts: the durable outbox a reporter
// delivers from. Both run stores implement it. Every method is safe for concurrent use, by
// goroutines of one process and (on the same backend) by several processes.
//
// A claim is held by an owner name: one reporter (one daemon) claims under one name, and a
// name is not shared by claimers that could save the same report.
type ReportStore interface {
	// AddReportState appends st to the report seed.Key, creating it from seed (its States,
	// Sent, HostID and delivery fields ignored) when there is none, and makes it due now
	// unless it is claimed (a claimed one stays with its claimer, who sees the new state
	// when it saves). Atomic. Errors: ErrInvalid (no key, host or run ID, or a key over
	// MaxReportKey).
	AddReportState(ctx context.Context, seed Report, st ReportState) error
	// ClaimReports takes up to limit reports that are due (pending, NotBefore passed) and
	// not claimed by another owner (or whose claim expired), oldest due first, and claims
	// them for owner until lease from now. Atomic: two owners never claim one report at once.
	// Errors: ErrInvalid (no owner, lease or limit not positive).
	ClaimReports(ctx context.Context, owner string, lease time.Duration, limit int) ([]Report, error)
	// SaveReport writes a claimed report's delivery progress (HostID, Sent, Attempts,
	// NotBefore, LastError) and ends owner's claim, keeping states appended meanwhile; the
	// report is then due at NotBefore when still pending, and not due when all its states
	// are sent. A claim that expired but was not taken by another is still owner's to save.
	// Errors: ErrNotClaimed (wrapped) when owner's claim ended (expired and taken by
	// another, or never held): nothing is written; ErrNotFound; ErrInvalid (no key or
	// owner, Sent below the recorded count or above the number of states).
	SaveReport(ctx context.Context, owner string, r Report) error
	// ReleaseClaims ends every claim owner holds and makes those reports due now: for a
	// reporter starting under its daemon's name, whose claims are a previous life's (killed
	// while it told them), so it need not wait for them to expire. It returns how many it
	// released. Errors: ErrInvalid (no owner).
	ReleaseClaims(ctx context.Context, owner string) (int, error)
	// Reports returns the reports of one run, by key; none when it has none.
	// Errors: ErrInvalid (no run ID).
	Reports(ctx context.Context, runID string) ([]Report, error)
	// SwapLatestReport records key as the latest report of scope (a host, repository and
	// environment: "github:acme/api:production") and returns the key it replaces ("" for
	// none, and for key itself: swapping it in again replaces nothing), in one atomic step:
	// the reporter marks the replaced deployment inactive. Errors: ErrInvalid (no scope or
	// key).
	SwapLatestReport(ctx context.Context, scope, key string) (previous string, err error)
}

// ErrNotClaimed: SaveReport by an owner whose claim on the report ended.
var ErrNotClaimed = errors.New("report not claimed by this owner")

// CheckReportSeed checks what AddReportState needs of a seed: ErrInvalid (wrapped) when it
// has no key, host or run ID, or a key over MaxReportKey.
func CheckReportSeed(seed Report) error {
	if err := checkReportKey(seed.Key); err != nil {
		return fmt.Errorf("add report state: %w", err)
	}
	if seed.Host == "" || seed.RunID == "" {
		return fmt.Errorf("add report state to %q: empty host or run id: %w", seed.Key, ErrInvalid)
	}
	return nil
}

// CheckReportClaim checks ClaimReports' arguments: ErrInvalid (wrapped) when owner is empty
// or lease or limit is not positive.
func CheckReportClaim(owner string, lease time.Duration, limit int) error {
	if owner == "" || lease <= 0 || limit <= 0 {
		return fmt.Errorf("claim reports: owner %q, lease %s, limit %d: %w", owner, lease, limit, ErrInvalid)
	}
	return nil
}

// CheckReportSave checks SaveReport's arguments that need no stored report: ErrInvalid
// (wrapped) when owner or the key is empty or Sent is negative. The store checks Sent
// against the stored report (CheckReportSent).
func CheckReportSave(owner string, r Report) error {
	if err := checkReportKey(r.Key); err != nil {
		return fmt.Errorf("save report: %w", err)
	}
	if owner == "" || r.Sent < 0 || r.Attempts < 0 {
		return fmt.Errorf("save report %q: owner %q, sent %d, attempts %d: %w", r.Key, owner, r.Sent, r.Attempts, ErrInvalid)
	}
	return nil
}

// CheckReportSent checks a SaveReport's Sent against the stored report's count of states and
// of states sent: ErrInvalid (wrapped) when it is lower than sent or higher than states.
func CheckReportSent(key string, newSent, sent, states int) error {
	if newSent < sent || newSent > states {
		return fmt.Errorf("save report %q: sent %d, want %d to %d: %w", key, newSent, sent, states, ErrInvalid)
	}
	return nil
}

// CheckReportSwap checks SwapLatestReport's arguments: ErrInvalid (wrapped) when scope or
// key is empty, or key is over MaxReportKey.
func CheckReportSwap(scope, key string) error {
	if scope == "" {
		return fmt.Errorf("swap latest report: empty scope: %w", ErrInvalid)
	}
	if err := checkReportKey(key); err != nil {
		return fmt.Errorf("swap latest report of %q: %w", scope, err)
	}
	return nil
}

func checkReportKey(key string) error {
	if key == "" || len(key) > MaxReportKey {
		return fmt.Errorf("report key of %d bytes, want 1 to %d: %w", len(key), MaxReportKey, ErrInvalid)
	}
	return nil
}
