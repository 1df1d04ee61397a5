package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/deploy-orchestrator/orchestrator/runs"
)

// runTables are the tables whose rows belong to one run (column run_id): Prune deletes them
// with the run. A new per-run table belongs here.
var runTables = []string{"events", "steps"}

// Prune implements runs.Pruner: each batch of ended runs goes with its events in one write
// transaction (the idempotency key is a column of the run's row, so it goes with it); then
// the reports without a run that have nothing pending (pruneReports).
// SQLite reuses the freed pages, so the file stops growing once the history is at its bound.
func (s *Store) Prune(ctx context.Context, r runs.Retention) (int, error) {
	const op = "prune runs"
	if err := s.d.readable(op); err != nil {
		return 0, err
	}
	var nth string
	if r.MaxRuns > 0 {
		err := s.d.r.QueryRowContext(ctx, `SELECT sort_key FROM runs ORDER BY sort_key DESC LIMIT 1 OFFSET ?`, r.MaxRuns-1).Scan(&nth)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, runs.Fail(op, err)
		}
	}
	before, err := runs.PruneBefore(r, time.Now(), nth)
	if err != nil {
		return 0, err
	}
	deleted := 0
	for before != "" {
		var ids []string
		err := s.d.write(ctx, op, func(tx *sql.Tx) error {
			ids = ids[:0]
			rows, err := tx.QueryContext(ctx, `SELECT id FROM runs WHERE sort_key < ? AND status NOT IN (`+activeStatuses+`)
				ORDER BY sort_key LIMIT ?`, before, runs.PruneBatch)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				ids = append(ids, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			for _, id := range ids {
				for _, table := range runTables {
					if _, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE run_id = ?`, id); err != nil {
						return err
					}
				}
				if _, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE id = ?`, id); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return deleted, err
		}
		deleted += len(ids)
		if len(ids) < runs.PruneBatch {
			break
		}
	}
	if err := s.pruneReports(ctx, op); err != nil {
		return deleted, err
	}
	if err := s.pruneAudit(ctx, r); err != nil {
		return deleted, err
	}
	err = s.d.write(ctx, op, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM deliveries WHERE expires_ns <= ?`, time.Now().UnixNano())
		return err
	})
	return deleted, err
}
