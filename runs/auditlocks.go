package runs

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The lock view of the audit log. Before the audit log, each lock backend kept a trail of
// its own (forced releases, freezes, lifts, and the engine's deployment cancels, takeovers
// and rollbacks); GET /v1/locks/audit and `orchestrator locks audit` now read those records
// from the audit log, in the shape the trail had, so scripts written for it keep working.

// LockAuditEntry is one action on a lock as GET /v1/locks/audit shows it: the shape of the
// lock backends' former audit trail, read from an AuditRecord, with its Outcome and Seq
// added.
type LockAuditEntry struct {
	At     time.Time `json:"at"`
	Action string    `json:"action"`
	Key    string    `json:"key"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	// Evicted is the lease a forced release removed (never its token: the log has none).
	Evicted *EvictedLease `json:"evicted,omitempty"`
	// Outcome is the record's (always AuditOK: the view shows the actions that were done).
	Outcome string `json:"outcome"`
	// Seq is the record's number in the audit log (GET /v1/audit).
	Seq int64 `json:"seq"`
}

// EvictedLease is the lease a forced release removed: its key, holder and fence, in the
// JSON names of a lease (locks.Info).
type EvictedLease struct {
	Key    string `json:"key"`
	Holder string `json:"holder"`
	Fence  int64  `json:"fence"`
}

// IsLockAction reports whether rec belongs in the lock view: one of AuditLockActions, or a
// rollback the engine recorded on a service's lock key (subject "daemon:…"; a rollback
// asked through the API targets a pipeline and is not a lock action), done (outcome
// AuditOK: the trail held the actions that happened, not those refused).
func IsLockAction(rec AuditRecord) bool {
	if rec.Outcome != AuditOK {
		return false
	}
	return slices.Contains(AuditLockActions, rec.Action) ||
		(rec.Action == AuditRollback && strings.HasPrefix(rec.Subject, "daemon:"))
}

// LockAuditEntryOf returns rec in the lock view's shape.
func LockAuditEntryOf(rec AuditRecord) LockAuditEntry {
	e := LockAuditEntry{At: rec.At, Action: rec.Action, Key: rec.Target, By: rec.Subject, Reason: rec.Reason,
		Outcome: rec.Outcome, Seq: rec.Seq}
	if h := rec.Detail["evicted_holder"]; h != "" {
		fence, _ := strconv.ParseInt(rec.Detail["evicted_fence"], 10, 64)
		e.Evicted = &EvictedLease{Key: rec.Target, Holder: h, Fence: fence}
	}
	return e
}

// LockAudit returns the newest limit records of l that IsLockAction selects (limit <= 0:
// all), newest first, in the lock view's shape: what GET /v1/locks/audit answers, for the
// CLI on a local backend.
func LockAudit(ctx context.Context, l AuditLog, limit int) ([]LockAuditEntry, error) {
	page, err := NewestAudit(ctx, l, 0, IsLockAction, limit)
	if err != nil {
		return nil, err
	}
	out := make([]LockAuditEntry, len(page.Records))
	for i, rec := range page.Records {
		out[i] = LockAuditEntryOf(rec)
	}
	return out, nil
}
