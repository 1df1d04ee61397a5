package sqlitestore

import (
	"context"
	"fmt"
)

// SchemaVersion is the schema this build writes (tests only).
const SchemaVersion = schemaVersion

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

// WALFrames checkpoints the file in mode (PASSIVE, or TRUNCATE to empty the WAL) and
// returns the number of frames in the WAL; after a TRUNCATE, that is 0 (tests only).
func WALFrames(s *Store, mode string) (n int64, err error) {
	var busy, done int64
	err = s.d.w.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &n, &done)
	return n, err
}
