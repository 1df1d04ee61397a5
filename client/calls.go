package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Trigger asks for a run of pipeline with t's values, under idempotencyKey: existing is true
// when the key matched an earlier run, which is then the run returned.
func (c *Client) Trigger(ctx context.Context, pipeline string, t orchestrator.Trigger, idempotencyKey string) (run *runs.Run, existing bool, err error) {
	body := map[string]any{"build": t.Build, "image_tag": t.ImageTag, "commit": t.Commit,
		"app_version": t.AppVersion, "params": t.Params, "rollback": t.Rollback, "reason": t.Reason}
	o := t.Origin
	for k, v := range map[string]string{"repo": o.Repo, "ref": o.Ref, "commit_url": o.CommitURL, "job_url": o.JobURL,
		"actor": o.Actor, "traceparent": o.Traceparent} {
		if v != "" {
			body[k] = v
		}
	}
	if o.Tag {
		body["tag"] = true
	}
	level := Trigger
	if t.AllowBuildAhead {
		// Only the admin token may let a build past the pipeline's max_build_ahead.
		body["allow_build_ahead"], level = true, Admin
	}
	var out struct {
		Run      *runs.Run `json:"run"`
		Existing bool      `json:"existing"`
	}
	err = c.call(ctx, http.MethodPost, "/v1/pipelines/"+url.PathEscape(pipeline)+"/runs", level, body,
		http.Header{"Idempotency-Key": {idempotencyKey}}, &out)
	if err == nil && out.Run == nil {
		err = fmt.Errorf("POST /v1/pipelines/%s/runs: the answer holds no run", pipeline)
	}
	return out.Run, out.Existing, err
}

// Run reads one run.
func (c *Client) Run(ctx context.Context, id string) (*runs.Run, error) {
	var r runs.Run
	if err := c.call(ctx, http.MethodGet, runPath(id), Read, nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Runs reads one page of the runs f selects, newest first.
func (c *Client) Runs(ctx context.Context, f runs.Filter) (runs.Page, error) {
	q := url.Values{}
	if f.Pipeline != "" {
		q.Set("pipeline", f.Pipeline)
	}
	for _, s := range f.Status {
		q.Add("status", string(s))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Cursor != "" {
		q.Set("cursor", f.Cursor)
	}
	var p runs.Page
	err := c.call(ctx, http.MethodGet, "/v1/runs?"+q.Encode(), Read, nil, nil, &p)
	return p, err
}

// Cancel asks the daemon to cancel a run, recorded as asked by (the person behind the token,
// may be empty) for reason (may be empty), and returns the run as the answer shows it.
func (c *Client) Cancel(ctx context.Context, id, by, reason string) (*runs.Run, error) {
	var out struct {
		Run *runs.Run `json:"run"`
	}
	body := map[string]string{"by": by, "reason": reason}
	if err := c.call(ctx, http.MethodPost, runPath(id)+"/cancel", Trigger, body, nil, &out); err != nil {
		return nil, err
	}
	return out.Run, nil
}

// Rerun starts a new run with run id's parameters (POST /v1/runs/{id}/rerun), recording who
// asks (by) and why (reason, optional), and returns it.
func (c *Client) Rerun(ctx context.Context, id, by, reason string) (*runs.Run, error) {
	return c.runAction(ctx, id, "/rerun", by, reason)
}

// RollbackTo starts a rollback to the build of run id, which must have succeeded (POST
// /v1/runs/{id}/rollback), recording who asks (by) and why (reason, required), and returns it.
func (c *Client) RollbackTo(ctx context.Context, id, by, reason string) (*runs.Run, error) {
	return c.runAction(ctx, id, "/rollback", by, reason)
}

func (c *Client) runAction(ctx context.Context, id, action, by, reason string) (*runs.Run, error) {
	var out struct {
		Run *runs.Run `json:"run"`
	}
	body := map[string]string{"by": by, "reason": reason}
	if err := c.call(ctx, http.MethodPost, runPath(id)+action, Trigger, body, nil, &out); err != nil {
		return nil, err
	}
	return out.Run, nil
}

// Approve approves the plan run id waits on, naming the digest of the plan seen (the run's
// Decision.Digest), with an optional reason; the token's subject is the approver.
func (c *Client) Approve(ctx context.Context, id, digest, reason string) (*runs.Run, error) {
	return c.decide(ctx, id, "approve", map[string]string{"digest": digest, "reason": reason})
}

// Reject rejects the plan run id waits on: the run ends failed.
func (c *Client) Reject(ctx context.Context, id, reason string) (*runs.Run, error) {
	return c.decide(ctx, id, "reject", map[string]string{"reason": reason})
}

// OverrideWindow lets run id go ahead outside its deploy windows (reason required); granted
// is false while a second person must override too.
func (c *Client) OverrideWindow(ctx context.Context, id, by, reason string) (run *runs.Run, granted bool, err error) {
	var out struct {
		Run     *runs.Run `json:"run"`
		Granted bool      `json:"granted"`
	}
	body := map[string]string{"by": by, "reason": reason}
	if err := c.call(ctx, http.MethodPost, runPath(id)+"/override", Approve, body, nil, &out); err != nil {
		return nil, false, err
	}
	return out.Run, out.Granted, nil
}

func (c *Client) decide(ctx context.Context, id, verb string, body map[string]string) (*runs.Run, error) {
	var out struct {
		Run *runs.Run `json:"run"`
	}
	if err := c.call(ctx, http.MethodPost, runPath(id)+"/"+verb, Approve, body, nil, &out); err != nil {
		return nil, err
	}
	return out.Run, nil
}

// Ready reports whether GET /readyz answered 200: nil, or the answer's error.
func (c *Client) Ready(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/readyz", Read, nil, nil, nil)
}

// Services reads the services view: per service, the run that wrote it last and each
// pipeline's newest build there.
func (c *Client) Services(ctx context.Context) ([]orchestrator.Service, error) {
	var out struct {
		Services []orchestrator.Service `json:"services"`
	}
	err := c.call(ctx, http.MethodGet, "/v1/services", Read, nil, nil, &out)
	return out.Services, err
}

// Locks lists the held and frozen locks whose key starts with prefix (tokens never shown).
func (c *Client) Locks(ctx context.Context, prefix string) ([]locks.Info, error) {
	var out struct {
		Locks []locks.Info `json:"locks"`
	}
	err := c.call(ctx, http.MethodGet, "/v1/locks?"+url.Values{"prefix": {prefix}}.Encode(), Read, nil, nil, &out)
	return out.Locks, err
}

// LockAudit reads the newest limit actions on locks (forced releases, freezes, lifts, the
// engine's deployment cancels, takeovers and rollbacks) from the audit log, newest first.
func (c *Client) LockAudit(ctx context.Context, limit int) ([]runs.LockAuditEntry, error) {
	var out struct {
		Entries []runs.LockAuditEntry `json:"entries"`
	}
	err := c.call(ctx, http.MethodGet, "/v1/locks/audit?limit="+strconv.Itoa(limit), Audit, nil, nil, &out)
	return out.Entries, err
}

// ForceRelease releases the lease q names (by its fence or holder) and returns it.
func (c *Client) ForceRelease(ctx context.Context, q locks.ForceRequest) (locks.Info, error) {
	var out struct {
		Released locks.Info `json:"released"`
	}
	body := map[string]any{"fence": q.Fence, "holder": q.Holder, "reason": q.Reason, "by": q.By}
	err := c.call(ctx, http.MethodPost, lockPath(q.Key, "release"), Admin, body, nil, &out)
	return out.Released, err
}

// Freeze holds q.Key until q.Until with q.Message and returns the freeze.
func (c *Client) Freeze(ctx context.Context, q locks.FreezeRequest) (locks.Info, error) {
	var out struct {
		Frozen locks.Info `json:"frozen"`
	}
	body := map[string]any{"message": q.Message, "until": q.Until.UTC().Format(time.RFC3339), "by": q.By}
	err := c.call(ctx, http.MethodPost, lockPath(q.Key, "freeze"), Admin, body, nil, &out)
	return out.Frozen, err
}

// Unfreeze lifts the freeze on key.
func (c *Client) Unfreeze(ctx context.Context, key, by, reason string) error {
	return c.call(ctx, http.MethodDelete, lockPath(key, "freeze"), Admin,
		map[string]string{"reason": reason, "by": by}, nil, nil)
}
