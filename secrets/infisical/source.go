package infisical

import (
	"context"
	"errors"
	"slices"

	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// Source serves the secrets of one Scope as a secrets.Source: each Fetch is one list request,
// however many keys it asks for. Build it with Client.Source; it keeps no values between
// calls (a secrets.Resolver does that for the length of a run).
type Source struct {
	c     *Client
	scope Scope
}

var _ secrets.Source = (*Source)(nil)

// Source returns a secrets.Source for scope.
func (c *Client) Source(scope Scope) *Source { return &Source{c: c, scope: scope} }

// Fetch returns the values of keys from one listing of the scope.
//
// It returns a *HiddenValueError (ErrHiddenValue) naming the keys whose value the identity may
// not read, a *secrets.MissingError (secrets.ErrMissing) naming the keys the folder and its
// imports do not have (both joined when both happen), or the error of ListSecrets.
func (s *Source) Fetch(ctx context.Context, keys []string) (secrets.Values, error) {
	if len(keys) == 0 {
		return secrets.Values{}, nil
	}
	l, err := s.c.ListSecrets(ctx, s.scope)
	if err != nil {
		return secrets.Values{}, err
	}
	vals, missing := l.Values.Pick(keys)
	if len(missing) == 0 {
		return vals, nil
	}
	var hidden, absent []string
	for _, k := range missing {
		if slices.Contains(l.Hidden, k) {
			hidden = append(hidden, k)
		} else {
			absent = append(absent, k)
		}
	}
	var errs []error
	if len(hidden) > 0 {
		errs = append(errs, &HiddenValueError{Scope: s.scope, Keys: hidden})
	}
	if len(absent) > 0 {
		errs = append(errs, &secrets.MissingError{Source: s.scope.String(), Keys: absent})
	}
	return secrets.Values{}, errors.Join(errs...)
}

// String describes the scope.
func (s *Source) String() string { return s.scope.String() }
