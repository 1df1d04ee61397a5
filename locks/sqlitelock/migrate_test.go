package sqlitelock_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/locks/sqlitelock"
)

// TestOldAuditTableDropped: a lock file written by a version that kept its own audit table
// loses the table when it is opened (operator actions are in the run store's audit log
// now); its leases stay, and forced releases, freezes and lifts write no table again.
func TestOldAuditTableDropped(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locks.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE leases (key TEXT PRIMARY KEY, token TEXT NOT NULL DEFAULT '', holder TEXT NOT NULL DEFAULT '',
			fence INTEGER NOT NULL DEFAULT 0, acquired_at INTEGER NOT NULL DEFAULT 0, expires_at INTEGER NOT NULL DEFAULT 0,
			message TEXT NOT NULL DEFAULT '', frozen INTEGER NOT NULL DEFAULT 0, closed_until INTEGER NOT NULL DEFAULT 0)`,
		`CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, action TEXT NOT NULL,
			key TEXT NOT NULL, by TEXT NOT NULL, reason TEXT NOT NULL, evicted TEXT)`,
		`INSERT INTO audit (at, action, key, by, reason) VALUES (1, 'freeze', 'coolify:phase1', 'alice', 'old')`,
		`INSERT INTO leases (key, token, holder, fence, acquired_at, expires_at) VALUES ('coolify:kept', 'tok', 'p#1/a', 7, 1, 9000000000000000000)`,
	} {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := sqlitelock.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	l := locks.New(d, locks.Options{})
	defer l.Close()
	if info, err := l.Get(ctx, "coolify:kept"); err != nil || info.Fence != 7 || info.Holder != "p#1/a" {
		t.Fatalf("the old file's lease: got %+v, %v", info, err)
	}
	if _, err := l.ForceRelease(ctx, locks.ForceRequest{Key: "coolify:kept", Fence: 7, Reason: "old", By: "bob", LockDelay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Freeze(ctx, locks.FreezeRequest{Key: "coolify:phase1", Message: "m", By: "bob", Until: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Unfreeze(ctx, "coolify:phase1"); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'audit'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the audit table after opening the file: %d, %v; want gone", n, err)
	}
}
