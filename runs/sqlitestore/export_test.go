package sqlitestore

import (
	"context"
	"fmt"
)

// SetUserVersion overwrites the schema version (tests only).
func SetUserVersion(s *Store, v int) error {
	_, err := s.w.ExecContext(context.Background(), fmt.Sprintf("PRAGMA user_version = %d", v))
	return err
}
