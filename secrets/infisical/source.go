package infisical

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// Source serves the secrets of one Scope as a secrets.Source: each Fetch is one list request,
// however many keys it asks for, and keeps only the keys asked for. It is also a
// secrets.Snapshotter, so a secrets.Resolver lists the scope once per run. Build it with
// Client.Source.
//
// Infisical refuses a whole list (403) for one secret of the folder: one the identity may
// describe but not read (releases that check read-value permission on the list), or one that
// references a secret the identity may not read ("Failed to expand one or more secret
// references"). The other secrets of the folder are still readable one by one, so when the
// list is refused Source reads each key asked for with a request of its own (the route of one
// secret by name, a few at once) and reports the refused keys alone.
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
// naming the keys the folder and its imports do not have, the server's refusal of a key that
// references a secret the identity may not read (ErrForbidden; joined when several happen),
// or the error of a request. Only the keys asked for are checked.
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

func (s *Source) snapshot(ctx context.Context) (secrets.Source, error) {
	l, err := s.c.ListSecrets(ctx, s.scope)
	if errors.Is(err, ErrForbidden) {
		s.c.log.LogAttrs(ctx, slog.LevelInfo, "infisical refused the list of the folder; reading the keys asked for one by one",
			slog.String(logkey.Project, s.scope.ProjectID), slog.String(logkey.Environment, s.scope.Environment),
			slog.String(logkey.SecretPath, s.scope.path()), slog.String(logkey.Error, err.Error()))
		return &byKey{c: s.c, scope: s.scope}, nil
	}
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
	var p problems
	for _, k := range missing {
		switch refs, ok := s.l.Unresolved[k]; {
		case slices.Contains(s.l.Hidden, k):
			p.hidden = append(p.hidden, k)
		case ok:
			p.unresolve(k, refs)
		default:
			p.absent = append(p.absent, k)
		}
	}
	return secrets.Values{}, p.err(s.scope)
}

// String describes the scope; never a value.
func (s *snapshot) String() string { return "snapshot of " + s.scope.String() }

// byKey serves a scope whose list Infisical refused: one request per key asked for.
type byKey struct {
	c     *Client
	scope Scope
}

// maxKeyReads bounds how many keys byKey reads at once.
const maxKeyReads = 4

// Fetch reads each distinct key of keys with a request of its own, up to maxKeyReads at
// once, and returns the values with the errors Source.Fetch documents (keys in the order
// asked).
func (b *byKey) Fetch(ctx context.Context, keys []string) (secrets.Values, error) {
	type read struct {
		s   rawSecret
		err error
	}
	var distinct []string
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			distinct = append(distinct, k)
		}
	}
	reads := make([]read, len(distinct))
	turns := make(chan struct{}, maxKeyReads)
	var wg sync.WaitGroup
	for i, k := range distinct {
		turns <- struct{}{}
		wg.Go(func() {
			defer func() { <-turns }()
			reads[i].s, reads[i].err = b.c.getSecret(ctx, b.scope, k)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return secrets.Values{}, err
	}
	vals := make(map[string]string, len(distinct))
	var p problems
	for i, k := range distinct {
		s, err := reads[i].s, reads[i].err
		switch {
		case secretNotFound(err):
			p.absent = append(p.absent, k)
		case readRefused(err) || (err == nil && s.SecretValueHidden):
			p.hidden = append(p.hidden, k)
		case err != nil:
			p.others = append(p.others, err)
		default:
			if refs := references(s.SecretValue); len(refs) > 0 {
				p.unresolve(k, refs)
			} else {
				vals[k] = s.SecretValue
			}
		}
	}
	if err := p.err(b.scope); err != nil {
		return secrets.Values{}, err
	}
	return secrets.NewValues(vals), nil
}

// String describes the scope; never a value.
func (b *byKey) String() string { return "keys of " + b.scope.String() }

// secretNotFound reports the server's answer for a key that neither the folder nor its imports
// have (404 "NotFound"; a server without the route answers 404 "Not Found", an error).
func secretNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.StatusCode == http.StatusNotFound && e.Code == "NotFound"
}

// readRefused reports the server's refusal to show the value of one secret the identity may
// describe but not read (403 "ForbiddenReadSecretError").
func readRefused(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.StatusCode == http.StatusForbidden && e.Code == "ForbiddenReadSecretError"
}

// problems are the keys of one Fetch that have no value, by reason.
type problems struct {
	hidden, absent []string
	unresolved     map[string][]string
	others         []error
}

func (p *problems) unresolve(key string, refs []string) {
	if p.unresolved == nil {
		p.unresolved = make(map[string][]string)
	}
	p.unresolved[key] = refs
}

// err joins one error per reason, or returns nil when every key has its value.
func (p *problems) err(scope Scope) error {
	errs := slices.Clone(p.others)
	if len(p.hidden) > 0 {
		errs = append(errs, &HiddenValueError{Scope: scope, Keys: p.hidden})
	}
	if len(p.unresolved) > 0 {
		errs = append(errs, &UnresolvedReferenceError{Scope: scope, Refs: p.unresolved})
	}
	if len(p.absent) > 0 {
		errs = append(errs, &secrets.MissingError{Source: scope.String(), Keys: p.absent})
	}
	return errors.Join(errs...)
}
