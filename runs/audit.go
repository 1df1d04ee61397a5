package runs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The audit log: every action that changes state (a trigger, a cancel, a freeze, a forced
// release, …), with who did it, when, to what, why and how it ended. It is append-only and
// hash-chained: each record carries the hash of the one before (Prev) and its own (Hash, over
// its fields and Prev), so VerifyAudit proves that no record was changed, removed or
// inserted since it was written. Retention prunes the oldest records; the last pruned
// record's link stays as the anchor the remaining chain starts from, so pruning never breaks
// verification.

// AuditRecord is one entry of the audit log.
type AuditRecord struct {
	// Seq numbers the records from 1, without gaps; set by AppendAudit.
	Seq int64 `json:"seq"`
	// At is when the action was taken (UTC; set by AppendAudit when zero).
	At time.Time `json:"at"`
	// Subject is who acted: "api:<token name>", "webhook:<provider>", "daemon:<instance>".
	Subject string `json:"subject"`
	// Action is what was done: one of the Audit* constants.
	Action string `json:"action"`
	// Target is what it was done to: a run ID, a lock key, a pipeline.
	Target string `json:"target"`
	// Reason is why, as the subject gave it (may be empty).
	Reason string `json:"reason,omitempty"`
	// Outcome is how it ended: AuditOK, AuditRefused or AuditFailed, with detail after a
	// colon when there is more to say ("refused: run has ended").
	Outcome string `json:"outcome"`
	// Detail holds what else identifies the action (a fence, a build, an evicted holder).
	Detail map[string]string `json:"detail,omitempty"`
	// Prev is the hash of the record before (the anchor's for the first record kept; "" for
	// record 1).
	Prev string `json:"prev"`
	// Hash is the hex SHA-256 of the record's other fields and Prev (AuditHash).
	Hash string `json:"hash"`
}

// Audit actions.
const (
	AuditTrigger      = "trigger"
	AuditCancel       = "cancel"
	AuditFreeze       = "freeze"
	AuditUnfreeze     = "unfreeze"
	AuditForceRelease = "force_release"
	AuditRollback     = "rollback"
	AuditOverride     = "override"
	AuditApprove      = "approve"
	AuditReject       = "reject"
	// AuditCancelDeployment: the engine canceled a deployment that stood in a run's way (or
	// that a dead daemon's run left running); its target is the service's lock key.
	AuditCancelDeployment = "cancel_deployment"
	// AuditTakeover: the engine ended a dead daemon's runs; its target is that daemon's
	// liveness key.
	AuditTakeover = "takeover"
	// AuditConfig: a daemon started with pipelines (their gates included) that differ from
	// the last configuration the log records; its target is "pipelines", its detail a digest
	// per pipeline.
	AuditConfig = "config"
)

// AuditLockActions are the actions on locks, whose target is a lock key: what the lock
// backends' own audit trail held before it moved into this log, and what
// GET /v1/locks/audit and `orchestrator locks audit` show.
var AuditLockActions = []string{AuditForceRelease, AuditFreeze, AuditUnfreeze, AuditCancelDeployment, AuditTakeover}

// Audit outcomes.
const (
	AuditOK      = "ok"
	AuditRefused = "refused"
	AuditFailed  = "failed"
)

// AuditLink is one position in the chain: a record's Seq and Hash. The zero link is the
// start of a log that never pruned.
type AuditLink struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

// AuditKeep is how many records the log keeps at most: Prune deletes older ones (and those
// older than Retention.MaxAge), leaving the last deleted one's link as the anchor.
const AuditKeep = 100_000

// AuditLog is the audit log of a run store. Both stores implement it.
type AuditLog interface {
	// AppendAudit seals rec (SealAudit: after the last record, or the anchor when every
	// record was pruned) and stores it, in one atomic step: concurrent appends from any
	// number of processes form one chain. It returns the record as stored.
	//
	// Errors: ErrInvalid (no subject, action, target or outcome); ErrUnavailable.
	AppendAudit(ctx context.Context, rec AuditRecord) (AuditRecord, error)

	// AuditRecords returns the records with Seq > after in Seq order, at most limit
	// (limit <= 0: all). Errors: ErrUnavailable.
	AuditRecords(ctx context.Context, after int64, limit int) ([]AuditRecord, error)

	// AuditEnds returns the anchor (the link of the last pruned record; zero when none was)
	// and the head (the link of the last record appended; the anchor when none is kept).
	// Errors: ErrUnavailable.
	AuditEnds(ctx context.Context) (anchor, head AuditLink, err error)
}

// SealAudit returns rec as the record after prev: Seq prev.Seq+1, Prev prev.Hash, At in UTC
// (now when zero), and its Hash.
func SealAudit(rec AuditRecord, prev AuditLink, now time.Time) AuditRecord {
	rec.Seq, rec.Prev = prev.Seq+1, prev.Hash
	if rec.At.IsZero() {
		rec.At = now
	}
	rec.At = rec.At.UTC()
	if len(rec.Detail) == 0 {
		rec.Detail = nil
	}
	rec.Hash = AuditHash(rec)
	return rec
}

// AuditHash is the hash of rec: the hex SHA-256 of "orchestrator audit v1\n" and the JSON of
// rec without its Hash (struct fields in order, Detail's keys sorted, At in RFC 3339 with
// nanoseconds, as encoding/json writes them).
func AuditHash(rec AuditRecord) string {
	rec.Hash = ""
	b, err := json.Marshal(rec)
	if err != nil { // a record of strings, a time and a map of strings always encodes
		panic(fmt.Sprintf("encode audit record: %v", err))
	}
	h := sha256.New()
	h.Write([]byte("orchestrator audit v1\n"))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// CheckAudit returns ErrInvalid naming what an audit record to append lacks.
func CheckAudit(rec AuditRecord) error {
	var missing []string
	for _, f := range []struct{ name, v string }{{"subject", rec.Subject}, {"action", rec.Action},
		{"target", rec.Target}, {"outcome", rec.Outcome}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("append audit record: %w: no %s", ErrInvalid, strings.Join(missing, ", "))
	}
	return nil
}

// AuditError is what VerifyAudit found wrong, at the record Seq (or the head).
type AuditError struct {
	Seq     int64
	Problem string
}

func (e *AuditError) Error() string {
	return fmt.Sprintf("audit log broken at record %d: %s", e.Seq, e.Problem)
}

// VerifyAudit checks that recs (in Seq order) are the whole chain from anchor to head: each
// record's hash is its content's, each names the one before as Prev, the numbers run without
// a gap from anchor.Seq+1 to head.Seq, and the last is the head. It returns nil or an
// *AuditError naming the first record that is wrong.
func VerifyAudit(anchor, head AuditLink, recs []AuditRecord) error {
	prev := anchor
	for _, r := range recs {
		switch {
		case r.Seq != prev.Seq+1:
			return &AuditError{Seq: prev.Seq + 1, Problem: fmt.Sprintf("missing: the record after %d is %d", prev.Seq, r.Seq)}
		case r.Hash != AuditHash(r):
			return &AuditError{Seq: r.Seq, Problem: "changed: its content does not match its hash"}
		case r.Prev != prev.Hash:
			return &AuditError{Seq: r.Seq, Problem: "its link to the record before does not match that record's hash"}
		}
		prev = AuditLink{Seq: r.Seq, Hash: r.Hash}
	}
	switch {
	case prev.Seq < head.Seq:
		return &AuditError{Seq: prev.Seq + 1, Problem: fmt.Sprintf("missing: the log ends at %d but its head is %d", prev.Seq, head.Seq)}
	case prev.Seq > head.Seq:
		return &AuditError{Seq: head.Seq + 1, Problem: fmt.Sprintf("the log runs to %d past its head %d", prev.Seq, head.Seq)}
	case prev.Hash != head.Hash:
		return &AuditError{Seq: head.Seq, Problem: "changed: the last record's hash is not the head's"}
	}
	return nil
}

// AuditFilter selects audit records for a listing; empty fields select all.
type AuditFilter struct {
	Subject string
	Action  string
	Target  string
	Since   time.Time
}

// Match reports whether rec passes f.
func (f AuditFilter) Match(rec AuditRecord) bool {
	return (f.Subject == "" || rec.Subject == f.Subject) && (f.Action == "" || rec.Action == f.Action) &&
		(f.Target == "" || rec.Target == f.Target) && (f.Since.IsZero() || !rec.At.Before(f.Since))
}

// AuditPruneUpTo returns the Seq up to which (inclusive) a Prune deletes audit records, given
// the head's Seq and the Seq of the newest record older than r.MaxAge (0: none, or no age
// limit): those beyond the AuditKeep newest go, and those older than r.MaxAge. 0 when
// nothing goes.
func AuditPruneUpTo(head, newestOld int64) int64 {
	return max(head-AuditKeep, newestOld, 0)
}

// AuditCutoff returns the time before which r no longer keeps audit records (zero: no age
// limit).
func AuditCutoff(r Retention, now time.Time) time.Time {
	if r.MaxAge <= 0 {
		return time.Time{}
	}
	return now.Add(-r.MaxAge)
}

// AuditPage is records of the audit log, newest first; Before, when not 0, is the before
// of the next page (GET /v1/audit's answer).
type AuditPage struct {
	Records []AuditRecord `json:"records"`
	Before  int64         `json:"before,omitempty"`
}

// NewestAudit returns the newest limit records of l with Seq below before (0: from the
// newest) that match selects (limit <= 0: all), reading the log backwards a chunk at a
// time; the page's Before is set when a further record matches.
func NewestAudit(ctx context.Context, l AuditLog, before int64, match func(AuditRecord) bool, limit int) (AuditPage, error) {
	anchor, head, err := l.AuditEnds(ctx)
	if err != nil {
		return AuditPage{}, err
	}
	top := head.Seq + 1
	if before > 0 && before < top {
		top = before
	}
	page := AuditPage{Records: []AuditRecord{}}
	for top > anchor.Seq+1 {
		from := max(top-auditExportChunk, anchor.Seq+1)
		recs, err := l.AuditRecords(ctx, from-1, int(top-from))
		if err != nil {
			return AuditPage{}, err
		}
		for _, rec := range slices.Backward(recs) {
			if !match(rec) {
				continue
			}
			if limit > 0 && len(page.Records) == limit {
				page.Before = page.Records[len(page.Records)-1].Seq
				return page, nil
			}
			page.Records = append(page.Records, rec)
		}
		top = from
	}
	return page, nil
}
