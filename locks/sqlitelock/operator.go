package sqlitelock

import (
	"context"
	"fmt"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/sqlitestmt"
	"github.com/deploy-orchestrator/orchestrator/locks"
)

// The driver's operator actions: forced release, freeze and lift. The caller records them
// in the run store's audit log: the lock file keeps no trail.

// ForceRelease implements locks.Driver.
func (d *Driver) ForceRelease(ctx context.Context, r locks.ForceRequest) (locks.Info, error) {
	if err := d.check("force release", r.Key); err != nil {
		return locks.Info{}, err
	}
	var (
		evicted locks.Info
		n       released
		refused error
	)
	err := d.h.write(ctx, func(tx sqlitestmt.Tx) error {
		now := time.Now()
		cur, err := readLease(ctx, tx, r.Key, now.UnixNano())
		if err != nil {
			return err
		}
		switch {
		case !cur.live():
			refused = fmt.Errorf("force release %q: %w (list the locks again)", r.Key, locks.ErrNotFound)
			return nil
		case r.Fence != 0 && r.Fence != cur.info.Fence, r.Holder != "" && r.Holder != cur.info.Holder:
			info := cur.info
			info.Token = ""
			refused = &locks.HeldError{Key: r.Key, Reason: locks.ErrStale, Current: info}
			return nil
		}
		evicted = cur.info
		evicted.Token = ""
		if _, err := tx.ExecContext(ctx, `UPDATE leases SET token = '', holder = '', acquired_at = 0, expires_at = 0,
			message = '', frozen = 0, closed_until = ? WHERE key = ?`, nanos(closedUntil(now, r.LockDelay)), r.Key); err != nil {
			return err
		}
		n, err = bump(ctx, tx, r.Key)
		return err
	})
	switch {
	case err != nil:
		return locks.Info{}, d.fail("force release", r.Key, err)
	case refused != nil:
		return locks.Info{}, refused
	}
	d.h.notify(r.Key, n)
	return evicted, nil
}

// closedUntil is when a key force-released at now opens again: now+delay, or at once (the
// zero time) when delay is not positive.
func closedUntil(now time.Time, delay time.Duration) time.Time {
	if delay <= 0 {
		return time.Time{}
	}
	return now.Add(delay)
}

// Freeze implements locks.Driver. The freeze gets a fence like any grant.
func (d *Driver) Freeze(ctx context.Context, r locks.FreezeRequest, holder, token string) (locks.Info, error) {
	if err := d.check("freeze", r.Key); err != nil {
		return locks.Info{}, err
	}
	var (
		frozen locks.Info
		held   error
	)
	err := d.h.write(ctx, func(tx sqlitestmt.Tx) error {
		now := time.Now()
		cur, err := readLease(ctx, tx, r.Key, now.UnixNano())
		if err != nil {
			return err
		}
		if cur.live() {
			info := cur.info
			info.Token = ""
			held = &locks.HeldError{Key: r.Key, Reason: locks.ErrHeld, Current: info}
			return nil
		}
		fence, err := nextFence(ctx, tx, r.Key, now)
		if err != nil {
			return err
		}
		frozen = locks.Info{Key: r.Key, Token: token, Holder: holder, Fence: fence,
			AcquiredAt: now, ExpiresAt: r.Until, Message: r.Message, Frozen: true}
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO leases
			(key, token, holder, fence, acquired_at, expires_at, message, frozen, closed_until)
			VALUES (?, ?, ?, ?, ?, ?, ?, 1, 0)`,
			r.Key, token, frozen.Holder, fence, now.UnixNano(), r.Until.UnixNano(), r.Message); err != nil {
			return err
		}
		return nil
	})
	switch {
	case err != nil:
		return locks.Info{}, d.fail("freeze", r.Key, err)
	case held != nil:
		return locks.Info{}, held
	}
	return frozen, nil
}

// Unfreeze implements locks.Driver.
func (d *Driver) Unfreeze(ctx context.Context, key string) (locks.Info, error) {
	if err := d.check("unfreeze", key); err != nil {
		return locks.Info{}, err
	}
	var (
		n      released
		found  bool
		lifted locks.Info
	)
	err := d.h.write(ctx, func(tx sqlitestmt.Tx) error {
		now := time.Now()
		cur, err := readLease(ctx, tx, key, now.UnixNano())
		if err != nil || !cur.live() || !cur.info.Frozen {
			return err
		}
		found, lifted = true, cur.info
		lifted.Token = ""
		if _, err := tx.ExecContext(ctx, `DELETE FROM leases WHERE key = ?`, key); err != nil {
			return err
		}
		n, err = bump(ctx, tx, key)
		return err
	})
	switch {
	case err != nil:
		return locks.Info{}, d.fail("unfreeze", key, err)
	case !found:
		return locks.Info{}, fmt.Errorf("unfreeze %q: %w: the key is not frozen (list the locks to see it)", key, locks.ErrNotFound)
	}
	d.h.notify(key, n)
	return lifted, nil
}
