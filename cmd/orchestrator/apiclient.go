package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// apiClient is the CLI's client of the daemon's API: trigger, runs, locks and health. Each
// request carries the token its route needs (see tokenFor); an error names the request,
// the daemon's message and a hint, and carries the exit code (exitUnreachable when no
// answer came or the daemon answered 5xx, exitUsage for 400/401/403/404, exitFailed else).
type apiClient struct {
	base string
	// token, when set, is sent on every request (--token); else tokenFor picks from env.
	token  string
	getenv func(string) string
	http   *retryablehttp.Client
}

// route access levels, as the API's route map names them.
type access int

const (
	accessRead access = iota
	accessTrigger
	accessAdmin
	accessAudit
)

// tokenEnv lists, per access level, the variables whose token the route accepts, most
// fitting first: reads take any token, the audit log the read or admin token.
var tokenEnv = map[access][]string{
	accessRead:    {"ORCH_READ_TOKEN", "ORCH_TRIGGER_TOKEN", "ORCH_ADMIN_TOKEN"},
	accessTrigger: {"ORCH_TRIGGER_TOKEN", "ORCH_ADMIN_TOKEN"},
	accessAdmin:   {"ORCH_ADMIN_TOKEN"},
	accessAudit:   {"ORCH_READ_TOKEN", "ORCH_ADMIN_TOKEN"},
}

func newAPIClient(base, token string, getenv func(string) string) *apiClient {
	h := retryablehttp.NewClient()
	h.Logger = nil
	h.RetryMax = 3
	h.RetryWaitMin = 200 * time.Millisecond
	h.RetryWaitMax = 2 * time.Second
	h.ErrorHandler = retryablehttp.PassthroughErrorHandler // keep the last answer's message
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return &apiClient{base: strings.TrimRight(base, "/"), token: token, getenv: getenv, http: h}
}

func (a *apiClient) tokenFor(level access) string {
	if a.token != "" {
		return a.token
	}
	for _, k := range tokenEnv[level] {
		if v := a.getenv(k); v != "" {
			return v
		}
	}
	return ""
}

func (a *apiClient) request(ctx context.Context, method, path string, level access, body any) (*retryablehttp.Request, error) {
	var rd any
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = data
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return nil, usageError("%s %s%s: %v (check --url / ORCH_URL)", method, a.base, path, err)
	}
	if tok := a.tokenFor(level); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("User-Agent", "orchestrator-cli/"+buildVersion().version)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// unreachable wraps a failure to get any answer from the daemon (exit code 3).
func (a *apiClient) unreachable(method, path string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return &exitError{code: exitUnreachable, err: fmt.Errorf("%s %s%s: %w (is the daemon running there? check --url / ORCH_URL)",
		method, a.base, path, err)}
}

// call sends one request and decodes a 2xx answer into out (when not nil).
func (a *apiClient) call(ctx context.Context, method, path string, level access, body any, hdr http.Header, out any) error {
	req, err := a.request(ctx, method, path, level, body)
	if err != nil {
		return err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return a.unreachable(method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return apiFailure(method, path, level, resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return &exitError{code: exitUnreachable, err: fmt.Errorf("%s %s: unreadable answer: %w", method, path, err)}
	}
	return nil
}

// apiFailure turns an error answer into one error naming the server's message, with a hint
// and the exit code the status calls for.
func apiFailure(method, path string, level access, resp *http.Response) error {
	var e struct {
		Error struct {
			Code, Message, Field string
		} `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
		if e.Error.Field != "" && !strings.HasPrefix(msg, e.Error.Field) {
			msg = e.Error.Field + ": " + msg
		}
	}
	code, hint := exitFailed, ""
	switch s := resp.StatusCode; {
	case e.Error.Code == "no_token_configured":
		code = exitUsage // the daemon's side: no token of ours would do, its message says what to set
	case e.Error.Code == "lock_not_found":
		// A refusal, as on the local backend (lockRefusal): the lease seen or the freeze is
		// gone (a well-formed key was checked before sending); the message says to list again.
		code = exitFailed
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		code, hint = exitUsage, " (check --token or "+strings.Join(tokenEnv[level], " / ")+")"
	case s == http.StatusNotFound:
		code, hint = exitUsage, " (check the name or ID and --url)"
	case s == http.StatusBadRequest || s == http.StatusUnprocessableEntity:
		code = exitUsage
	case s >= 500:
		code = exitUnreachable
	}
	return &exitError{code: code, err: fmt.Errorf("%s %s: %s: %s%s", method, path, resp.Status, msg, hint)}
}

func runPath(id string) string { return "/v1/runs/" + url.PathEscape(id) }

func lockPath(key, action string) string { return "/v1/locks/" + url.PathEscape(key) + "/" + action }

// trigger asks for a run of pipeline; existing is true when key matched an earlier run.
func (a *apiClient) trigger(ctx context.Context, pipeline string, t orchestrator.Trigger, key string) (*runs.Run, bool, error) {
	body := map[string]any{"build": t.Build, "image_tag": t.ImageTag, "commit": t.Commit,
		"app_version": t.AppVersion, "params": t.Params, "rollback": t.Rollback, "reason": t.Reason}
	level := accessTrigger
	if t.AllowBuildAhead {
		// Only the admin token may let a build past the pipeline's max_build_ahead.
		body["allow_build_ahead"], level = true, accessAdmin
	}
	var out struct {
		Run      *runs.Run `json:"run"`
		Existing bool      `json:"existing"`
	}
	err := a.call(ctx, http.MethodPost, "/v1/pipelines/"+url.PathEscape(pipeline)+"/runs", level, body,
		http.Header{"Idempotency-Key": {key}}, &out)
	if err == nil && out.Run == nil {
		err = fmt.Errorf("POST /v1/pipelines/%s/runs: the answer holds no run", pipeline)
	}
	return out.Run, out.Existing, err
}

// run reads one run.
func (a *apiClient) run(ctx context.Context, id string) (*runs.Run, error) {
	var r runs.Run
	if err := a.call(ctx, http.MethodGet, runPath(id), accessRead, nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// listRuns reads one page of runs, newest first.
func (a *apiClient) listRuns(ctx context.Context, f runs.Filter) (runs.Page, error) {
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
	err := a.call(ctx, http.MethodGet, "/v1/runs?"+q.Encode(), accessRead, nil, nil, &p)
	return p, err
}

// cancel asks the daemon to cancel a run.
func (a *apiClient) cancel(ctx context.Context, id string) (*runs.Run, error) {
	var out struct {
		Run *runs.Run `json:"run"`
	}
	if err := a.call(ctx, http.MethodPost, runPath(id)+"/cancel", accessTrigger, struct{}{}, nil, &out); err != nil {
		return nil, err
	}
	return out.Run, nil
}

// ready reports whether GET /readyz answered 200, with the answer's message otherwise.
func (a *apiClient) ready(ctx context.Context) error {
	return a.call(ctx, http.MethodGet, "/readyz", accessRead, nil, nil, nil)
}

// remoteLocks is the lock service of a daemon, reached through its API; it has the methods
// of locks.Locker the `locks` commands use, so they work the same on either.
type remoteLocks struct{ a *apiClient }

func (r remoteLocks) List(ctx context.Context, prefix string) ([]locks.Info, error) {
	var out struct {
		Locks []locks.Info `json:"locks"`
	}
	err := r.a.call(ctx, http.MethodGet, "/v1/locks?"+url.Values{"prefix": {prefix}}.Encode(), accessRead, nil, nil, &out)
	return out.Locks, err
}

func (r remoteLocks) Audit(ctx context.Context, limit int) ([]locks.AuditEntry, error) {
	var out struct {
		Entries []locks.AuditEntry `json:"entries"`
	}
	err := r.a.call(ctx, http.MethodGet, "/v1/locks/audit?limit="+strconv.Itoa(limit), accessAudit, nil, nil, &out)
	return out.Entries, err
}

func (r remoteLocks) ForceRelease(ctx context.Context, q locks.ForceRequest) (locks.Info, error) {
	var out struct {
		Released locks.Info `json:"released"`
	}
	body := map[string]any{"fence": q.Fence, "holder": q.Holder, "reason": q.Reason, "by": q.By}
	err := r.a.call(ctx, http.MethodPost, lockPath(q.Key, "release"), accessAdmin, body, nil, &out)
	return out.Released, err
}

func (r remoteLocks) Freeze(ctx context.Context, q locks.FreezeRequest) (locks.Info, error) {
	var out struct {
		Frozen locks.Info `json:"frozen"`
	}
	body := map[string]any{"message": q.Message, "until": q.Until.UTC().Format(time.RFC3339), "by": q.By}
	err := r.a.call(ctx, http.MethodPost, lockPath(q.Key, "freeze"), accessAdmin, body, nil, &out)
	return out.Frozen, err
}

func (r remoteLocks) Unfreeze(ctx context.Context, key, by, reason string) error {
	return r.a.call(ctx, http.MethodDelete, lockPath(key, "freeze"), accessAdmin,
		map[string]string{"reason": reason, "by": by}, nil, nil)
}

// follow reads the run's event stream until its end event, reconnecting with Last-Event-ID
// when the connection drops. When the daemon refuses the stream (503: too many streams), it
// polls the run until it ends instead; fn then sees no events.
func (a *apiClient) follow(ctx context.Context, id string, fn func(runs.Event) error) error {
	path := runPath(id) + "/events"
	var last int64
	for attempt := 0; ; attempt++ {
		ended, err := a.stream(ctx, path, &last, fn)
		if ended {
			return nil
		}
		if errors.Is(err, errStreamRefused) {
			return pollRun(ctx, a.run, id, streamRefusedPoll)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ee *exitError
		if errors.As(err, &ee) && ee.code != exitUnreachable {
			return err // 401, 404: reconnecting will not help
		}
		if attempt >= 10 {
			return a.unreachable(http.MethodGet, path, fmt.Errorf("follow run %s: %w", id, err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		}
	}
}

func (a *apiClient) stream(ctx context.Context, path string, last *int64, fn func(runs.Event) error) (bool, error) {
	req, err := a.request(ctx, http.MethodGet, path, accessRead, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := a.http.HTTPClient.Do(req.Request)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		return false, fmt.Errorf("%w: %w", errStreamRefused, apiFailure(http.MethodGet, path, accessRead, resp))
	}
	if resp.StatusCode != http.StatusOK {
		return false, apiFailure(http.MethodGet, path, accessRead, resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var event string
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "end" {
				return true, nil
			}
			if data.Len() > 0 {
				var e runs.Event
				if err := json.Unmarshal(data.Bytes(), &e); err == nil {
					if err := fn(e); err != nil {
						return false, err
					}
					*last = e.Seq
				}
			}
			event = ""
			data.Reset()
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return false, errors.New("event stream closed before the run ended")
}
