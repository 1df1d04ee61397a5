package infisical

import (
	"context"
	"errors"
	"slices"

	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// Source serves the secrets of one Scope as a secrets.Source: each Fetch is one list request,
// however many keys it asks for, and keeps only the keys asked for. It is also a
// secrets.Snapshotter, so a secrets.Resolver lists the scope once per run. Build it with
// Client.Source.
type Source struct {
	c     *Client
	scope Scope
}

var (
	_ secrets.Source      = (*Source)(nil)
	_ secrets.Snapshotter = (*Source)(nil)
)

// Source returns a secrets.Source for scope.
func (c *Client) Source(scope Scope) *Source { return &Source{c: c, scope: scope} }

// Fetch returns the values of keys from one listing of the scope.
//
// It returns a *HiddenValueError (ErrHiddenValue) naming the keys whose value the identity may
// not read, an *UnresolvedReferenceError (ErrUnresolvedReference) naming the keys whose value
// holds a reference Infisical could not resolve, a *secrets.MissingError (secrets.ErrMissing)
// naming the keys the folder and its imports do not have (joined when several happen), or the
// error of ListSecrets. Only the keys asked for are checked.
func (s *Source) Fetch(ctx context.Context, keys []string) (secrets.Values, error) {
	if len(keys) == 0 {
		return secrets.Values{}, nil
	}
	snap, err := s.snapshot(ctx)
	if err != nil {
		return secrets.Values{}, err
	}
	return snap.Fetch(ctx, keys)
}

// Snapshot lists the scope once and returns a Source that answers Fetch from that listing,
// in memory, with the errors Fetch documents. It returns the error of ListSecrets.
func (s *Source) Snapshot(ctx context.Context) (secrets.Source, error) { return s.snapshot(ctx) }

func (s *Source) snapshot(ctx context.Context) (*snapshot, error) {
	l, err := s.c.ListSecrets(ctx, s.scope)
	if err != nil {
		return nil, err
	}
	return &snapshot{scope: s.scope, l: l}, nil
}

// String describes the scope.
func (s *Source) String() string { return s.scope.String() }

// snapshot is one listing of a scope.
type snapshot struct {
	scope Scope
	l     Listing
}

func (s *snapshot) Fetch(ctx context.Context, keys []string) (secrets.Values, error) {
	if err := ctx.Err(); err != nil {
		return secrets.Values{}, err
	}
	vals, missing := s.l.Values.Pick(keys)
	if len(missing) == 0 {
		return vals, nil
	}
	var hidden, absent []string
	var unresolved map[string][]string
	for _, k := range missing {
		switch refs, ok := s.l.Unresolved[k]; {
		case slices.Contains(s.l.Hidden, k):
			hidden = append(hidden, k)
		case ok:
			if unresolved == nil {
				unresolved = make(map[string][]string)
			}
			unresolved[k] = refs
		default:
			absent = append(absent, k)
		}
	}
	var errs []error
	if len(hidden) > 0 {
		errs = append(errs, &HiddenValueError{Scope: s.scope, Keys: hidden})
	}
	if len(unresolved) > 0 {
		errs = append(errs, &UnresolvedReferenceError{Scope: s.scope, Refs: unresolved})
	}
	if len(absent) > 0 {
		errs = append(errs, &secrets.MissingError{Source: s.scope.String(), Keys: absent})
	}
	return secrets.Values{}, errors.Join(errs...)
}

// String describes the scope; never a value.
func (s *snapshot) String() string { return "snapshot of " + s.scope.String() }
