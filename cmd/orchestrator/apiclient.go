package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/client"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// apiClient is the CLI's use of the daemon's API client (package client): the token of each
// route from --token or the environment (tokenEnv), and each call's error given the exit
// code and the hint the CLI prints (daemonError).
type apiClient struct {
	base string
	c    *client.Client
}

// tokenEnv lists, per access level, the variables whose token the route accepts, most
// fitting first: reads take any token, the audit log the read or admin token.
var tokenEnv = map[client.Access][]string{
	client.Read:    {"ORCH_READ_TOKEN", "ORCH_TRIGGER_TOKEN", "ORCH_ADMIN_TOKEN"},
	client.Trigger: {"ORCH_TRIGGER_TOKEN", "ORCH_ADMIN_TOKEN"},
	client.Admin:   {"ORCH_ADMIN_TOKEN"},
	client.Audit:   {"ORCH_READ_TOKEN", "ORCH_ADMIN_TOKEN"},
	client.Approve: {"ORCH_ADMIN_TOKEN"}, // or an approver's named token, with --token
}

// newAPIClient returns the client of the daemon at base: token (--token), when set, goes
// with every request; else each route's from getenv (tokenEnv).
func newAPIClient(base, token string, getenv func(string) string, opts ...client.Option) *apiClient {
	fromEnv := func(level client.Access) string {
		for _, k := range tokenEnv[level] {
			if getenv == nil {
				break
			}
			if v := getenv(k); v != "" {
				return v
			}
		}
		return ""
	}
	opts = append([]client.Option{client.WithTokens(fromEnv),
		client.WithUserAgent("orchestrator-cli/" + buildVersion().version)}, opts...)
	c := client.New(base, token, opts...)
	return &apiClient{base: c.BaseURL(), c: c}
}

// daemonError gives an error of the API client the CLI's exit code and hint: 3 when no
// answer came, it could not be read or the daemon answered 5xx; 2 for a malformed --url, a
// refused token, an unknown name or an invalid request; 1 for the rest (a refusal such as a
// stale fence). A canceled context stays itself.
func daemonError(err error) error {
	var (
		unreachable *client.UnreachableError
		answer      *client.APIError
		unreadable  *client.UnreadableError
		badURL      *client.URLError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &unreachable):
		return &exitError{code: exitUnreachable, err: fmt.Errorf("%w (is the daemon running there? check --url / ORCH_URL)", err)}
	case errors.As(err, &answer):
		code, hint := answerExit(answer)
		return &exitError{code: code, err: fmt.Errorf("%w%s", err, hint)}
	case errors.As(err, &unreadable):
		return &exitError{code: exitUnreachable, err: err}
	case errors.As(err, &badURL):
		return &exitError{code: exitUsage, err: fmt.Errorf("%w (check --url / ORCH_URL)", err)}
	}
	return err
}

// answerExit is the exit code of a daemon's error answer and the hint printed after it.
func answerExit(e *client.APIError) (int, string) {
	switch s := e.StatusCode; {
	case e.Code == "no_token_configured":
		return exitUsage, "" // the daemon's side: no token of ours would do, its message says what to set
	case e.Code == "lock_not_found":
		// A refusal, as on the local backend (lockRefusal): the lease seen or the freeze is
		// gone (a well-formed key was checked before sending); the message says to list again.
		return exitFailed, ""
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return exitUsage, " (check --token or " + strings.Join(tokenEnv[e.Access], " / ") + ")"
	case s == http.StatusNotFound:
		return exitUsage, " (check the name or ID and --url)"
	case s == http.StatusBadRequest || s == http.StatusUnprocessableEntity:
		return exitUsage, ""
	case s >= 500:
		return exitUnreachable, ""
	}
	return exitFailed, ""
}

func (a *apiClient) trigger(ctx context.Context, pipeline string, t orchestrator.Trigger, key string) (*runs.Run, bool, error) {
	r, existing, err := a.c.Trigger(ctx, pipeline, t, key)
	return r, existing, daemonError(err)
}

func (a *apiClient) run(ctx context.Context, id string) (*runs.Run, error) {
	r, err := a.c.Run(ctx, id)
	return r, daemonError(err)
}

func (a *apiClient) listRuns(ctx context.Context, f runs.Filter) (runs.Page, error) {
	p, err := a.c.Runs(ctx, f)
	return p, daemonError(err)
}

func (a *apiClient) cancel(ctx context.Context, id, by, reason string) (*runs.Run, error) {
	r, err := a.c.Cancel(ctx, id, by, reason)
	return r, daemonError(err)
}

func (a *apiClient) rerun(ctx context.Context, id, by, reason string) (*runs.Run, error) {
	r, err := a.c.Rerun(ctx, id, by, reason)
	return r, daemonError(err)
}

func (a *apiClient) rollbackTo(ctx context.Context, id, by, reason string) (*runs.Run, error) {
	r, err := a.c.RollbackTo(ctx, id, by, reason)
	return r, daemonError(err)
}

func (a *apiClient) approve(ctx context.Context, id, digest, reason string) (*runs.Run, error) {
	r, err := a.c.Approve(ctx, id, digest, reason)
	return r, daemonError(err)
}

func (a *apiClient) reject(ctx context.Context, id, reason string) (*runs.Run, error) {
	r, err := a.c.Reject(ctx, id, reason)
	return r, daemonError(err)
}

func (a *apiClient) override(ctx context.Context, id, by, reason string) (*runs.Run, bool, error) {
	r, granted, err := a.c.OverrideWindow(ctx, id, by, reason)
	return r, granted, daemonError(err)
}

func (a *apiClient) ready(ctx context.Context) error { return daemonError(a.c.Ready(ctx)) }

func (a *apiClient) follow(ctx context.Context, id string, fn func(runs.Event) error) error {
	return daemonError(a.c.Follow(ctx, id, fn))
}

func (a *apiClient) services(ctx context.Context) ([]orchestrator.Service, error) {
	list, err := a.c.Services(ctx)
	return list, daemonError(err)
}

// remoteLocks is the lock service of a daemon, reached through its API; it has the methods
// of locks.Locker the `locks` commands use, so they work the same on either.
type remoteLocks struct{ a *apiClient }

func (r remoteLocks) List(ctx context.Context, prefix string) ([]locks.Info, error) {
	list, err := r.a.c.Locks(ctx, prefix)
	return list, daemonError(err)
}

func (r remoteLocks) Audit(ctx context.Context, limit int) ([]runs.LockAuditEntry, error) {
	entries, err := r.a.c.LockAudit(ctx, limit)
	return entries, daemonError(err)
}

func (r remoteLocks) ForceRelease(ctx context.Context, q locks.ForceRequest) (locks.Info, error) {
	info, err := r.a.c.ForceRelease(ctx, q)
	return info, daemonError(err)
}

func (r remoteLocks) Freeze(ctx context.Context, q locks.FreezeRequest) (locks.Info, error) {
	info, err := r.a.c.Freeze(ctx, q)
	return info, daemonError(err)
}

func (r remoteLocks) Unfreeze(ctx context.Context, key, by, reason string) (locks.Info, error) {
	return locks.Info{}, daemonError(r.a.c.Unfreeze(ctx, key, by, reason))
}
