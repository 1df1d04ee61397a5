package locks

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
)

// The Locker's reads of every lease and its operator actions: forced release, freeze and
// lift. The lock backends keep no audit trail: the caller records each action in the run
// store's audit log (runs.AuditLog), with its outcome.

// Get returns the live lease on key (without token) and its waiter count, or ErrNotFound.
// Backend failures wrap ErrUnavailable.
func (l *Locker) Get(ctx context.Context, key string) (Info, error) {
	info, err := l.d.Get(ctx, key)
	info.Token = ""
	return info, err
}

// List returns live leases (tokens cleared) whose key starts with prefix, sorted by key.
// Backend failures wrap ErrUnavailable.
func (l *Locker) List(ctx context.Context, prefix string) ([]Info, error) {
	infos, err := l.d.List(ctx, prefix)
	for i := range infos {
		infos[i].Token = ""
	}
	return infos, err
}

// ForceRelease is the operator's release of a crashed holder's lease. See Driver.ForceRelease.
// ErrInvalid without a reason or without exactly one of fence/holder. A lease of this
// Locker that is evicted learns of its loss at once.
func (l *Locker) ForceRelease(ctx context.Context, r ForceRequest) (Info, error) {
	switch {
	case r.Key == "":
		return Info{}, fmt.Errorf("force release: %w: empty key", ErrInvalid)
	case r.Reason == "":
		return Info{}, fmt.Errorf("force release %q: %w: a reason is required (say why the holder is presumed dead)", r.Key, ErrInvalid)
	case (r.Fence != 0) == (r.Holder != ""):
		return Info{}, fmt.Errorf("force release %q: %w: name exactly one of the fence or the holder you saw in the listing", r.Key, ErrInvalid)
	case r.LockDelay < 0:
		return Info{}, fmt.Errorf("force release %q: %w: negative lock-delay %s", r.Key, ErrInvalid, r.LockDelay)
	}
	if r.LockDelay == 0 {
		r.LockDelay = l.lockDelay
	}
	info, err := l.d.ForceRelease(ctx, r)
	if err != nil {
		return Info{}, err
	}
	info.Token = ""
	l.mu.Lock()
	local := slices.Clone(l.leases[r.Key])
	l.mu.Unlock()
	for _, le := range local {
		le.checkNow()
	}
	if l.obs != nil {
		l.obs.ForceReleased(r.Key)
	}
	return info, nil
}

// Freeze puts an operator lease on a free key, held by "operator:<r.By>" (see
// FreezeRequest.By). See Driver.Freeze. ErrInvalid without a key or message, or with an
// expiry in the past.
func (l *Locker) Freeze(ctx context.Context, r FreezeRequest) (Info, error) {
	switch {
	case r.Key == "":
		return Info{}, fmt.Errorf("freeze: %w: empty key", ErrInvalid)
	case r.Message == "":
		return Info{}, fmt.Errorf("freeze %q: %w: a message is required (say why deploys must wait)", r.Key, ErrInvalid)
	case !r.Until.After(time.Now()):
		return Info{}, fmt.Errorf("freeze %q: %w: the expiry %s is not in the future", r.Key, ErrInvalid, r.Until.UTC().Format(time.RFC3339))
	}
	info, err := l.d.Freeze(ctx, r, orchestrator.OperatorHolder(r.By), rand.Text())
	info.Token = ""
	return info, err
}

// Unfreeze lifts an operator freeze and returns it (token cleared). ErrNotFound if the key
// is not frozen; ErrInvalid without a key.
func (l *Locker) Unfreeze(ctx context.Context, key string) (Info, error) {
	if key == "" {
		return Info{}, fmt.Errorf("unfreeze: %w: empty key", ErrInvalid)
	}
	info, err := l.d.Unfreeze(ctx, key)
	info.Token = ""
	return info, err
}
