package sqlitestore

import (
	"context"
	"fmt"
)

// SetUserVersion overwrites the schema version (tests only).
func SetUserVersion(s *Store, v int) error {
	_, err := s.d.w.ExecContext(context.Background(), fmt.Sprintf("PRAGMA user_version = %d", v))
	return err
}

// PageCount is the database's size in pages, free ones included (tests only).
func PageCount(s *Store) (n int64, err error) {
	err = s.d.r.QueryRowContext(context.Background(), "PRAGMA page_count").Scan(&n)
	return n, err
}
