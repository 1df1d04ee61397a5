package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/sqlitestmt"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Reports to Git hosts (runs.ReportStore). A report is a row of reports: its key, its run's
// ID, the report's JSON (states included: a report holds a handful), the owner of its claim
// ('' for none) and due, in Unix nanoseconds on this host's clock: when it became due (a new
// state, or NotBefore when that is later) while it is pending and unclaimed, the claim's
// expiry while it is claimed, NULL when nothing is pending. A claim is one transaction that
// takes the rows with due <= now in due order, so an expired claim is due again by itself.
// report_scopes holds each scope's latest report key.

const (
	qReport     = `SELECT owner, due, data FROM reports WHERE key = ?`
	qPutReport  = `INSERT INTO reports (key, run_id, due, owner, data) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET due = excluded.due, owner = excluded.owner, data = excluded.data`
	qDueReports = `SELECT key, data FROM reports WHERE due <= ? ORDER BY due, key LIMIT ?`
	qAnyDue     = `SELECT 1 FROM reports WHERE due <= ? LIMIT 1`
	qClaim      = `UPDATE reports SET owner = ?, due = ? WHERE key = ?`
	qRelease    = `UPDATE reports SET owner = '', due = ? WHERE owner = ? AND due IS NOT NULL`
	qRunReports = `SELECT data FROM reports WHERE run_id = ? ORDER BY key`
	qScope      = `SELECT key FROM report_scopes WHERE scope = ?`
	qPutScope   = `INSERT INTO report_scopes (scope, key) VALUES (?, ?) ON CONFLICT (scope) DO UPDATE SET key = excluded.key`
	// qPruneReports deletes a batch of the reports that have nothing pending and no run: the
	// run was pruned now, or earlier while the report was still pending.
	qPruneReports = `DELETE FROM reports WHERE key IN (SELECT r.key FROM reports r WHERE r.due IS NULL
		AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = r.run_id) LIMIT ?)`
	qPruneScopes = `DELETE FROM report_scopes WHERE NOT EXISTS (SELECT 1 FROM reports WHERE reports.key = report_scopes.key)`
)

var _ runs.ReportStore = (*Store)(nil)

// errNoReport is readReport's answer for a key without a report.
var errNoReport = fmt.Errorf("no such report: %w", runs.ErrNotFound)

// readReport reads the report key with its claim's owner and its due column.
func readReport(ctx context.Context, tx sqlitestmt.Tx, key string) (r runs.Report, owner string, due sql.NullInt64, err error) {
	var data []byte
	err = tx.QueryRow(ctx, qReport, key).Scan(&owner, &due, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return r, "", due, errNoReport
	}
	if err != nil {
		return r, "", due, err
	}
	err = json.Unmarshal(data, &r)
	return r, owner, due, err
}

func putReport(ctx context.Context, tx sqlitestmt.Tx, r runs.Report, owner string, due sql.NullInt64) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = tx.Exec(ctx, qPutReport, r.Key, r.RunID, due, owner, data)
	return err
}

func dueAt(ns int64) sql.NullInt64 { return sql.NullInt64{Int64: ns, Valid: true} }

// AddReportState implements runs.ReportStore: the report's row, read and written in one
// transaction.
func (s *Store) AddReportState(ctx context.Context, seed runs.Report, st runs.ReportState) error {
	if err := runs.CheckReportSeed(seed); err != nil {
		return err
	}
	return s.d.writeP(ctx, fmt.Sprintf("add report state to %q", seed.Key), func(tx sqlitestmt.Tx) error {
		now := time.Now().UTC()
		r, owner, due, err := readReport(ctx, tx, seed.Key)
		switch {
		case errors.Is(err, errNoReport):
			r = runs.Report{Key: seed.Key, Host: seed.Host, RunID: seed.RunID, Pipeline: seed.Pipeline,
				Deployment: seed.Deployment, Created: now}
		case err != nil:
			return err
		}
		r.States = append(r.States, st)
		r.Updated = now
		if owner == "" && (!due.Valid || due.Int64 > now.UnixNano()) {
			due = dueAt(now.UnixNano())
		}
		return putReport(ctx, tx, r, owner, due)
	})
}

// ClaimReports implements runs.ReportStore: one transaction takes the due rows, oldest due
// first, and sets their owner and due to the claim's.
func (s *Store) ClaimReports(ctx context.Context, owner string, lease time.Duration, limit int) ([]runs.Report, error) {
	if err := runs.CheckReportClaim(owner, lease, limit); err != nil {
		return nil, err
	}
	const op = "claim reports"
	// A reporter polls: when nothing is due, a read says so without taking the write lock.
	if err := s.d.readable(op); err != nil {
		return nil, err
	}
	var one int
	switch err := s.d.r.QueryRowContext(ctx, qAnyDue, time.Now().UnixNano()).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, runs.Fail(op, err)
	}
	var out []runs.Report
	err := s.d.writeP(ctx, op, func(tx sqlitestmt.Tx) error {
		now := time.Now()
		rows, err := tx.Query(ctx, qDueReports, now.UnixNano(), limit)
		if err != nil {
			return err
		}
		var keys []string
		out = out[:0]
		for rows.Next() {
			var (
				key  string
				data []byte
				r    runs.Report
			)
			if err := rows.Scan(&key, &data); err != nil {
				rows.Close()
				return err
			}
			if err := json.Unmarshal(data, &r); err != nil {
				rows.Close()
				return fmt.Errorf("decode report %q: %w", key, err)
			}
			keys, out = append(keys, key), append(out, r)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		exp := now.Add(lease).UnixNano()
		for _, key := range keys {
			if _, err := tx.Exec(ctx, qClaim, owner, exp, key); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseClaims implements runs.ReportStore: one statement.
func (s *Store) ReleaseClaims(ctx context.Context, owner string) (int, error) {
	if owner == "" {
		return 0, fmt.Errorf("release claims: no owner: %w", runs.ErrInvalid)
	}
	var n int64
	err := s.d.writeP(ctx, "release claims", func(tx sqlitestmt.Tx) error {
		res, err := tx.Exec(ctx, qRelease, time.Now().UnixNano(), owner)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return int(n), err
}

// SaveReport implements runs.ReportStore: the row is read and written in one transaction,
// only while owner's name is on it.
func (s *Store) SaveReport(ctx context.Context, owner string, r runs.Report) error {
	if err := runs.CheckReportSave(owner, r); err != nil {
		return err
	}
	op := fmt.Sprintf("save report %q", r.Key)
	return s.d.writeP(ctx, op, func(tx sqlitestmt.Tx) error {
		now := time.Now().UTC()
		cur, own, _, err := readReport(ctx, tx, r.Key)
		if err != nil {
			return err
		}
		if own != owner {
			return userError{fmt.Errorf("%s for %q: claimed by %q: %w", op, owner, own, runs.ErrNotClaimed)}
		}
		if err := runs.CheckReportSent(r.Key, r.Sent, cur.Sent, len(cur.States)); err != nil {
			return userError{err}
		}
		cur.HostID, cur.Sent, cur.Attempts, cur.LastError = r.HostID, r.Sent, r.Attempts, r.LastError
		cur.NotBefore, cur.Updated = r.NotBefore.UTC(), now
		var due sql.NullInt64
		if cur.Pending() {
			due = dueAt(now.UnixNano())
			if cur.NotBefore.After(now) {
				due = dueAt(cur.NotBefore.UnixNano())
			}
		}
		return putReport(ctx, tx, cur, "", due)
	})
}

// Reports implements runs.ReportStore.
func (s *Store) Reports(ctx context.Context, runID string) ([]runs.Report, error) {
	if runID == "" {
		return nil, fmt.Errorf("reports: empty run id: %w", runs.ErrInvalid)
	}
	op := fmt.Sprintf("reports of run %q", runID)
	var out []runs.Report
	err := s.d.read(ctx, func(tx sqlitestmt.Tx) error {
		rows, err := tx.Query(ctx, qRunReports, runID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				data []byte
				r    runs.Report
			)
			if err := rows.Scan(&data); err != nil {
				return err
			}
			if err := json.Unmarshal(data, &r); err != nil {
				return fmt.Errorf("decode: %w", err)
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, runs.Fail(op, err)
	}
	return out, nil
}

// SwapLatestReport implements runs.ReportStore: the scope's row, read and written in one
// transaction.
func (s *Store) SwapLatestReport(ctx context.Context, scope, key string) (string, error) {
	if err := runs.CheckReportSwap(scope, key); err != nil {
		return "", err
	}
	var prev string
	err := s.d.writeP(ctx, fmt.Sprintf("swap latest report of %q", scope), func(tx sqlitestmt.Tx) error {
		prev = ""
		if err := tx.QueryRow(ctx, qScope, scope).Scan(&prev); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		_, err := tx.Exec(ctx, qPutScope, scope, key)
		return err
	})
	if err != nil || prev == key {
		return "", err
	}
	return prev, nil
}

// pruneReports deletes the reports that have nothing pending and whose run is gone, a batch
// per transaction, then the scope pointers whose report is gone.
func (s *Store) pruneReports(ctx context.Context, op string) error {
	for {
		var n int64
		err := s.d.write(ctx, op, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, qPruneReports, runs.PruneBatch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return err
		}
		if n < runs.PruneBatch {
			break
		}
	}
	return s.d.write(ctx, op, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, qPruneScopes)
		return err
	})
}
