// Package sqlitestmt keeps the hot queries of a SQLite database prepared: modernc.org/sqlite
// parses the SQL text again on every Exec and Query otherwise, which was the largest single
// cost of the embedded backends' writes (about 14 % of an engine run's CPU in the run store,
// 9 % in the lock backend). database/sql prepares a statement on a connection the first
// time it is used there and keeps it with that connection.
package sqlitestmt

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// Set is a database's prepared statements, by query text.
type Set map[string]*sql.Stmt

// Prepare prepares queries on db.
func Prepare(ctx context.Context, db *sql.DB, queries ...string) (Set, error) {
	m := make(Set, len(queries))
	for _, q := range queries {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("prepare %s: %w", q, err), m.Close())
		}
		m[q] = st
	}
	return m, nil
}

// Close closes every statement.
func (m Set) Close() error {
	var errs []error
	for _, st := range m {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// DB is a database whose QueryRow and Query use the prepared statement of a query when
// the Set has one (prepared on DB), and run the query text otherwise.
type DB struct {
	*sql.DB
	Set Set
}

// QueryRow runs a query for one row, outside a transaction.
func (d DB) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st, ok := d.Set[query]; ok {
		return st.QueryRowContext(ctx, args...)
	}
	return d.QueryRowContext(ctx, query, args...)
}

// Query runs a query outside a transaction.
func (d DB) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st, ok := d.Set[query]; ok {
		return st.QueryContext(ctx, args...)
	}
	return d.QueryContext(ctx, query, args...)
}

// Tx is a transaction whose Exec, Query and QueryRow use the prepared statement of a query
// when the Set has one, and run the query text otherwise.
type Tx struct {
	*sql.Tx
	Set Set
}

// Exec runs a statement.
func (t Tx) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st, ok := t.Set[query]; ok {
		return t.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.ExecContext(ctx, query, args...)
}

// Query runs a query.
func (t Tx) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st, ok := t.Set[query]; ok {
		return t.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.QueryContext(ctx, query, args...)
}

// QueryRow runs a query for one row.
func (t Tx) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st, ok := t.Set[query]; ok {
		return t.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.QueryRowContext(ctx, query, args...)
}

// Lazy prepares queries on a database the first time each is asked for, for queries built
// at run time from a bounded number of shapes (a list's filters). Callers keep the number
// of shapes bounded: every query asked for stays prepared until Close.
type Lazy struct {
	db *sql.DB
	mu sync.Mutex
	m  Set
}

// NewLazy returns a Lazy on db.
func NewLazy(db *sql.DB) *Lazy { return &Lazy{db: db, m: make(Set)} }

// Stmt returns query prepared on the Lazy's database.
func (l *Lazy) Stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, ok := l.m[query]; ok {
		return st, nil
	}
	st, err := l.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %w", query, err)
	}
	l.m[query] = st
	return st, nil
}

// Close closes every statement prepared.
func (l *Lazy) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.Close()
}
