package sqlitestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deploy-orchestrator/orchestrator/internal/sqlitestmt"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Migrating a file written by older builds.

// splitSteps moves every run stored whole (schema 1) to a header and step rows (schema 2),
// a page of runs at a time, inside the migration's transaction: a build that fails half
// way leaves the file at schema 1, as it was.
func splitSteps(ctx context.Context, tx sqlitestmt.Tx) error {
	after := ""
	for {
		rows, err := tx.QueryContext(ctx, `SELECT id, data FROM runs WHERE id > ? ORDER BY id LIMIT 100`, after)
		if err != nil {
			return err
		}
		var page []head
		for rows.Next() {
			var h head
			if err := rows.Scan(&h.id, &h.data); err != nil {
				rows.Close()
				return err
			}
			page = append(page, h)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		for _, h := range page {
			var r runs.Run
			if err := json.Unmarshal(h.data, &r); err != nil {
				return fmt.Errorf("decode run %q: %w", h.id, err)
			}
			e, err := runs.EncodeRun(r)
			if err != nil {
				return err
			}
			if err := writeSteps(ctx, tx, r.ID, e.Steps, -1, 0); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE runs SET data = ? WHERE id = ?`, e.Header, r.ID); err != nil {
				return err
			}
		}
		after = page[len(page)-1].id
	}
}
