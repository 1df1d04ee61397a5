package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/deploy-orchestrator/orchestrator/internal/sqlitestmt"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Listing runs: a page of the runs a query selects, newest first, read in one transaction.

// List implements runs.Driver.
func (d *driver) List(ctx context.Context, q runs.Query, held func(string) int64) ([]runs.Record, string, error) {
	var (
		where []string
		args  []any
	)
	if q.Pipeline != "" {
		where = append(where, "pipeline = ?")
		args = append(args, q.Pipeline)
	}
	if len(q.Status) > 0 {
		where = append(where, "status IN (?"+strings.Repeat(",?", len(q.Status)-1)+")")
		for _, st := range q.Status {
			args = append(args, string(st))
		}
	}
	if q.After != "" {
		where = append(where, "sort_key < ?")
		args = append(args, q.After)
	}
	// Only the page's last run's sort key is needed (the next page's cursor): it is read on
	// its own, so the page's rows carry no text column but the ID.
	query := "SELECT id, version FROM runs"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	// One more than the page tells whether there is a next page.
	query += " ORDER BY sort_key DESC LIMIT ?"
	args = append(args, q.Limit+1)

	var (
		recs []runs.Record
		next string
	)
	err := d.read(ctx, func(tx sqlitestmt.Tx) error {
		rows, err := d.listQuery(ctx, tx, query, len(q.Status), args)
		if err != nil {
			return err
		}
		heads, more, err := scanVersions(rows, q.Limit)
		if err != nil {
			return err
		}
		if more {
			if err := tx.QueryRow(ctx, qSortKey, heads[len(heads)-1].id).Scan(&next); err != nil {
				return err
			}
		}
		recs, err = records(ctx, tx, heads, held)
		return err
	})
	return recs, next, err
}

// listQuery runs one of List's queries, prepared (d.lists) unless its status list is
// longer than there are statuses: the shapes prepared stay bounded whatever clients send.
func (d *driver) listQuery(ctx context.Context, tx sqlitestmt.Tx, query string, statuses int, args []any) (*sql.Rows, error) {
	if statuses > len(runs.Statuses) {
		return tx.QueryContext(ctx, query, args...)
	}
	st, err := d.lists.Stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
}

// scanVersions reads rows of (id, version), at most limit of them, and says whether there
// were more.
func scanVersions(rows *sql.Rows, limit int) (heads []head, more bool, err error) {
	defer rows.Close()
	for rows.Next() {
		if len(heads) == limit {
			return heads, true, nil
		}
		var h head
		if err := rows.Scan(&h.id, &h.version); err != nil {
			return nil, false, err
		}
		heads = append(heads, h)
	}
	return heads, false, rows.Err()
}

// readHeaders fills in the header JSON of heads[i] for each i in idx, read in tx.
func readHeaders(ctx context.Context, tx sqlitestmt.Tx, heads []head, idx []int) error {
	at := make(map[string]int, len(idx))
	for len(idx) > 0 {
		batch := idx[:min(len(idx), maxParams)]
		idx = idx[len(batch):]
		args := make([]any, len(batch))
		for j, i := range batch {
			args[j] = heads[i].id
			at[heads[i].id] = i
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, data FROM runs WHERE id IN (?`+strings.Repeat(",?", len(batch)-1)+`)`, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				id   string
				data []byte
			)
			if err := rows.Scan(&id, &data); err != nil {
				rows.Close()
				return err
			}
			heads[at[id]].data = data
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
	}
	return nil
}
