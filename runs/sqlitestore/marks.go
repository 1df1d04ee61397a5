package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/deploy-orchestrator/orchestrator/internal/sqlitestmt"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// PutMark implements runs.MarkStore: the resource's row in marks and the pipeline's row in
// pipeline_marks, in one transaction.
func (s *Store) PutMark(ctx context.Context, m runs.Mark) (runs.Mark, error) {
	if m.UUID == "" || m.RunID == "" {
		return runs.Mark{}, fmt.Errorf("put mark: empty uuid or run id: %w", runs.ErrInvalid)
	}
	op := fmt.Sprintf("put mark of %q", m.UUID)
	return s.putMark(ctx, op, m, m.Pipeline, &m)
}

// RestoreMark implements runs.MarkStore: PutMark's transaction, with pipeline's row set to
// prev or deleted.
func (s *Store) RestoreMark(ctx context.Context, m runs.Mark, pipeline string, prev *runs.Mark) (runs.Mark, error) {
	if m.UUID == "" || m.RunID == "" || pipeline == "" {
		return runs.Mark{}, fmt.Errorf("restore mark: empty uuid, run id or pipeline: %w", runs.ErrInvalid)
	}
	op := fmt.Sprintf("restore mark of %q for pipeline %q", m.UUID, pipeline)
	return s.putMark(ctx, op, m, pipeline, prev)
}

// putMark records m as the resource's mark and own as pipeline's (nil deletes it; nothing
// is done to pipeline marks when pipeline is ""), unless the recorded fence is higher.
func (s *Store) putMark(ctx context.Context, op string, m runs.Mark, pipeline string, own *runs.Mark) (runs.Mark, error) {
	var cur runs.Mark
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
			// A mark written before pipeline marks existed stands for its pipeline's until
			// replaced: kept as that pipeline's mark when it has none.
			if cur.Pipeline != "" {
				if _, err := tx.Exec(ctx, qAdoptMark, m.UUID, cur.Pipeline, data); err != nil {
					return err
				}
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, qPutMark, m.UUID, b); err != nil {
			return err
		}
		switch {
		case pipeline == "":
		case own == nil:
			_, err = tx.Exec(ctx, qDropPipelineMark, m.UUID, pipeline)
		default:
			if b, err = json.Marshal(own); err == nil {
				_, err = tx.Exec(ctx, qPutPipelineMark, m.UUID, pipeline, b)
			}
		}
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

// PipelineMark implements runs.MarkStore: the pipeline's row and the resource's mark, in one
// statement.
func (s *Store) PipelineMark(ctx context.Context, uuid, pipeline string) (runs.Mark, error) {
	op := fmt.Sprintf("get mark of pipeline %q on %q", pipeline, uuid)
	if err := s.d.readable(op); err != nil {
		return runs.Mark{}, err
	}
	var own, mark []byte
	if err := s.d.rs[qPipelineMark].QueryRowContext(ctx, uuid, pipeline, uuid).Scan(&own, &mark); err != nil {
		return runs.Mark{}, runs.Fail(op, err)
	}
	var m runs.Mark
	switch {
	case own != nil:
		if err := json.Unmarshal(own, &m); err != nil {
			return runs.Mark{}, runs.Fail(op, err)
		}
		return m, nil
	case mark != nil:
		if err := json.Unmarshal(mark, &m); err != nil {
			return runs.Mark{}, runs.Fail(op, err)
		}
		if m.Pipeline == pipeline {
			return m, nil
		}
	}
	return runs.Mark{}, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
}

// PipelineMarks implements runs.MarkStore: the resource's rows, in one read transaction.
func (s *Store) PipelineMarks(ctx context.Context, uuid string) ([]runs.Mark, error) {
	op := fmt.Sprintf("get pipeline marks of %q", uuid)
	var out []runs.Mark
	err := s.d.read(ctx, func(tx sqlitestmt.Tx) error {
		rows, err := tx.Query(ctx, qPipelineMarks, uuid)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var data []byte
			var m runs.Mark
			if err := rows.Scan(&data); err != nil {
				return err
			}
			if err := json.Unmarshal(data, &m); err != nil {
				return err
			}
			out = append(out, m)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		var data []byte
		var m runs.Mark
		switch err := tx.QueryRow(ctx, qMark, uuid).Scan(&data); {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		if err := json.Unmarshal(data, &m); err != nil {
			return err
		}
		if m.Pipeline != "" && !slices.ContainsFunc(out, func(o runs.Mark) bool { return o.Pipeline == m.Pipeline }) {
			out = append(out, m)
			slices.SortFunc(out, func(a, b runs.Mark) int { return strings.Compare(a.Pipeline, b.Pipeline) })
		}
		return nil
	})
	if err != nil {
		return nil, runs.Fail(op, err)
	}
	return out, nil
}

// PutRunning implements runs.MarkStore.
func (s *Store) PutRunning(ctx context.Context, r runs.Running) error {
	if r.UUID == "" || r.RunID == "" {
		return fmt.Errorf("put running: empty uuid or run id: %w", runs.ErrInvalid)
	}
	op := fmt.Sprintf("put what %q runs", r.UUID)
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("%s: encode: %w", op, err)
	}
	return s.d.writeP(ctx, op, func(tx sqlitestmt.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO running (uuid, data) VALUES (?, ?) ON CONFLICT (uuid) DO UPDATE SET data = excluded.data`, r.UUID, data)
		return err
	})
}

// GetRunning implements runs.MarkStore.
func (s *Store) GetRunning(ctx context.Context, uuid string) (runs.Running, error) {
	op := fmt.Sprintf("get what %q runs", uuid)
	if err := s.d.readable(op); err != nil {
		return runs.Running{}, err
	}
	var data []byte
	err := s.d.r.QueryRowContext(ctx, `SELECT data FROM running WHERE uuid = ?`, uuid).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return runs.Running{}, fmt.Errorf("%s: %w", op, runs.ErrNotFound)
	}
	if err != nil {
		return runs.Running{}, runs.Fail(op, err)
	}
	var r runs.Running
	if err := json.Unmarshal(data, &r); err != nil {
		return runs.Running{}, runs.Fail(op, err)
	}
	return r, nil
}
