package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/sqlitestmt"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// The audit log (runs.AuditLog): one row of audit per record (its JSON, the time in Unix
// nanoseconds for retention), and in audit_ends the rows "head" (the last record's link) and
// "anchor" (the last pruned record's link). An append reads the head and writes the record
// and the new head in one write transaction, so appends form one chain.

// AppendAudit implements runs.AuditLog.
func (s *Store) AppendAudit(ctx context.Context, rec runs.AuditRecord) (runs.AuditRecord, error) {
	if err := runs.CheckAudit(rec); err != nil {
		return runs.AuditRecord{}, err
	}
	const op = "append audit record"
	err := s.d.writeP(ctx, op, func(tx sqlitestmt.Tx) error {
		head, err := auditEnd(ctx, tx.Tx, "head")
		if err != nil {
			return err
		}
		rec = runs.SealAudit(rec, head, time.Now())
		data, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if _, err := tx.Tx.ExecContext(ctx, `INSERT INTO audit (seq, at, data) VALUES (?, ?, ?)`, rec.Seq, rec.At.UnixNano(), data); err != nil {
			return err
		}
		return putAuditEnd(ctx, tx.Tx, "head", runs.AuditLink{Seq: rec.Seq, Hash: rec.Hash})
	})
	if err != nil {
		return runs.AuditRecord{}, err
	}
	return rec, nil
}

// AuditRecords implements runs.AuditLog.
func (s *Store) AuditRecords(ctx context.Context, after int64, limit int) ([]runs.AuditRecord, error) {
	const op = "read audit records"
	if err := s.d.readable(op); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.d.r.QueryContext(ctx, `SELECT data FROM audit WHERE seq > ? ORDER BY seq LIMIT ?`, after, limit)
	if err != nil {
		return nil, runs.Fail(op, err)
	}
	defer rows.Close()
	var out []runs.AuditRecord
	for rows.Next() {
		var data []byte
		var rec runs.AuditRecord
		if err := rows.Scan(&data); err != nil {
			return nil, runs.Fail(op, err)
		}
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, runs.Fail(op, err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, runs.Fail(op, err)
	}
	return out, nil
}

// AuditEnds implements runs.AuditLog.
func (s *Store) AuditEnds(ctx context.Context) (anchor, head runs.AuditLink, err error) {
	const op = "read audit ends"
	if err := s.d.readable(op); err != nil {
		return anchor, head, err
	}
	if anchor, err = auditEnd(ctx, s.d.r, "anchor"); err != nil {
		return anchor, head, runs.Fail(op, err)
	}
	if head, err = auditEnd(ctx, s.d.r, "head"); err != nil {
		return anchor, head, runs.Fail(op, err)
	}
	if head.Seq == 0 {
		head = anchor
	}
	return anchor, head, nil
}

// pruneAudit deletes the audit records r no longer keeps (runs.AuditPruneUpTo) and makes the
// last of them the anchor, in one write transaction.
func (s *Store) pruneAudit(ctx context.Context, r runs.Retention) error {
	return s.d.writeP(ctx, "prune audit records", func(tx sqlitestmt.Tx) error {
		head, err := auditEnd(ctx, tx.Tx, "head")
		if err != nil {
			return err
		}
		var old sql.NullInt64
		if cutoff := runs.AuditCutoff(r, time.Now()); !cutoff.IsZero() {
			if err := tx.Tx.QueryRowContext(ctx, `SELECT max(seq) FROM audit WHERE at < ?`, cutoff.UnixNano()).Scan(&old); err != nil {
				return err
			}
		}
		upTo := runs.AuditPruneUpTo(head.Seq, old.Int64)
		var data []byte
		switch err := tx.Tx.QueryRowContext(ctx, `SELECT data FROM audit WHERE seq = ?`, upTo).Scan(&data); {
		case errors.Is(err, sql.ErrNoRows):
			return nil // nothing to prune, or already pruned
		case err != nil:
			return err
		}
		var last runs.AuditRecord
		if err := json.Unmarshal(data, &last); err != nil {
			return err
		}
		if _, err := tx.Tx.ExecContext(ctx, `DELETE FROM audit WHERE seq <= ?`, upTo); err != nil {
			return err
		}
		return putAuditEnd(ctx, tx.Tx, "anchor", runs.AuditLink{Seq: last.Seq, Hash: last.Hash})
	})
}

// querier is what auditEnd reads with: the reader pool or a write transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// auditEnd returns the link stored under name in audit_ends (zero when none).
func auditEnd(ctx context.Context, q querier, name string) (runs.AuditLink, error) {
	var l runs.AuditLink
	err := q.QueryRowContext(ctx, `SELECT seq, hash FROM audit_ends WHERE name = ?`, name).Scan(&l.Seq, &l.Hash)
	if errors.Is(err, sql.ErrNoRows) {
		return runs.AuditLink{}, nil
	}
	return l, err
}

// putAuditEnd stores l under name in audit_ends.
func putAuditEnd(ctx context.Context, tx *sql.Tx, name string, l runs.AuditLink) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO audit_ends (name, seq, hash) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET seq = excluded.seq, hash = excluded.hash`, name, l.Seq, l.Hash)
	return err
}
