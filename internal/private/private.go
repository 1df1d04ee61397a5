// Package private keeps the daemon's state files to the user it runs as. The run store and
// the embedded lock backend hold who deployed what, when, with which parameters and locks:
// nothing secret, but nothing another local user should read or change either.
//
// Every place that creates a state file or directory goes through Dir and File.
package private

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Modes of what Dir and File create.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// sqliteCompanions are the files SQLite keeps next to a database. SQLite creates them with
// the database file's mode, so a private database gets private companions; File tightens
// the ones an older version left open.
var sqliteCompanions = []string{"-wal", "-shm", "-journal"}

// Dir creates the directory path, with its parents, mode 0700 when it is missing. An existing
// directory keeps its mode (it may be a volume an operator set up): Dir returns the bits it
// grants group and others (0 when none), for the caller to warn about.
func Dir(path string) (open fs.FileMode, err error) {
	if err := os.MkdirAll(path, DirMode); err != nil {
		return 0, fmt.Errorf("state directory %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("state directory %s: %w", path, err)
	}
	if !fi.IsDir() {
		return 0, fmt.Errorf("state directory %s: not a directory", path)
	}
	return fi.Mode().Perm() &^ DirMode, nil
}

// File makes path a file only its owner can read and write (0600): it creates it empty when
// missing, and tightens an existing one, and its SQLite companions (-wal, -shm, -journal)
// when present, that group or others could read or write. Call it before SQLite opens the
// database, which then creates its companions with the same mode.
func File(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	if err := tighten(path); err != nil {
		return err
	}
	for _, suffix := range sqliteCompanions {
		if err := tighten(path + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// tighten removes group and other bits from path's mode.
func tighten(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	if fi.Mode().Perm()&^FileMode == 0 {
		return nil
	}
	if err := os.Chmod(path, fi.Mode().Perm()&FileMode); err != nil {
		return fmt.Errorf("state file %s: tighten mode %s: %w", path, fi.Mode().Perm(), err)
	}
	return nil
}
