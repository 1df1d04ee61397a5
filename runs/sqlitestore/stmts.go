package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// stmts are the hot queries, prepared once per database at Open and reused in every
// transaction: modernc.org/sqlite parses SQL again on every Exec and Query otherwise, which
// was the largest single cost of an engine run's store writes (about 14 % of its CPU).
// database/sql prepares each on a connection the first time a transaction there uses it.
type stmts map[string]*sql.Stmt

// prepare prepares queries on db.
func prepare(ctx context.Context, db *sql.DB, queries ...string) (stmts, error) {
	m := make(stmts, len(queries))
	for _, q := range queries {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("prepare %s: %w", q, err), m.close())
		}
		m[q] = st
	}
	return m, nil
}

// close closes every statement.
func (m stmts) close() error {
	var errs []error
	for _, st := range m {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// ptx is a transaction whose Exec, Query and QueryRow use the prepared statement of a
// query when its database has one (st), and run the query text otherwise.
type ptx struct {
	*sql.Tx
	st stmts
}

// Exec runs a cached statement.
func (t ptx) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st, ok := t.st[query]; ok {
		return t.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.ExecContext(ctx, query, args...)
}

// Query runs a cached query.
func (t ptx) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st, ok := t.st[query]; ok {
		return t.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.QueryContext(ctx, query, args...)
}

// QueryRow runs a query for one row.
func (t ptx) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st, ok := t.st[query]; ok {
		return t.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.QueryRowContext(ctx, query, args...)
}
