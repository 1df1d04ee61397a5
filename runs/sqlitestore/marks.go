package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deploy-orchestrator/orchestrator/internal/sqlitestmt"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// PutMark implements runs.MarkStore.
func (s *Store) PutMark(ctx context.Context, m runs.Mark) (runs.Mark, error) {
	if m.UUID == "" || m.RunID == "" {
		return runs.Mark{}, fmt.Errorf("put mark: empty uuid or run id: %w", runs.ErrInvalid)
	}
	var cur runs.Mark
	op := fmt.Sprintf("put mark of %q", m.UUID)
	err := s.d.writeP(ctx, op, func(tx sqlitestmt.Tx) error {
		var data []byte
		err := tx.QueryRow(ctx, qMark, m.UUID).Scan(&data)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			if err := json.Unmarshal(data, &cur); err != nil {
				return err
			}
			if cur.Fence > m.Fence {
				return userError{fmt.Errorf("%s: fence %d < recorded %d (run %s): %w", op, m.Fence, cur.Fence, cur.RunID, runs.ErrFenceBehind)}
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, qPutMark, m.UUID, b)
		if err == nil {
			cur = m
		}
		return err
	})
	return cur, err
}

// GetMark implements runs.MarkStore.
func (s *Store) GetMark(ctx context.Context, uuid string) (runs.Mark, error) {
	op := fmt.Sprintf("get mark of %q", uuid)
	if err := s.d.readable(op); err != nil {
		return runs.Mark{}, err
	}
	var data []byte
	err := s.d.rs[qMark].QueryRowContext(ctx, uuid).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return runs.Mark{}, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
	}
	if err != nil {
		return runs.Mark{}, runs.Fail(op, err)
	}
	var m runs.Mark
	if err := json.Unmarshal(data, &m); err != nil {
		return runs.Mark{}, runs.Fail(op, err)
	}
	return m, nil
}
