package coolify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Coolify's validation rules, checked before sending so a bad value fails without a request.
var (
	tagRule    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	envKeyRule = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)
)

const (
	maxEnvKeyLen  = 255
	maxCommentLen = 256
	// dedupMessage is what Coolify answers when it drops a deploy request.
	dedupMessage = "already queued for this commit"
)

// validateTag reports whether tag passes Coolify's image tag rule
// (^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$); the error wraps [ErrInvalidTag].
func validateTag(tag string) error {
	if !tagRule.MatchString(tag) {
		return fmt.Errorf("tag %q: %w: must match %s", tag, ErrInvalidTag, tagRule)
	}
	return nil
}

// validateEnv reports whether Coolify would accept e's key and comment, and whether its value is
// known; the error wraps [ErrInvalidEnv] or [ErrValueHidden]. It never mentions the value.
func validateEnv(e EnvVar) error {
	switch {
	case e.Key == "" || len(e.Key) > maxEnvKeyLen || !envKeyRule.MatchString(e.Key):
		return fmt.Errorf("env key %q: %w: must match %s, at most %d bytes", e.Key, ErrInvalidEnv, envKeyRule, maxEnvKeyLen)
	case len(e.Comment) > maxCommentLen:
		return fmt.Errorf("env %s: %w: comment longer than %d", e.Key, ErrInvalidEnv, maxCommentLen)
	case e.valueHidden:
		return fmt.Errorf("env %s: %w", e.Key, ErrValueHidden)
	}
	return nil
}

func pathEscape(s string) string { return url.PathEscape(s) }

// Health asks the instance's unauthenticated health endpoint (GET /api/v1/health). It returns
// nil on 200; otherwise an *APIError or a transport error wrapping [ErrUnavailable].
func (c *Client) Health(ctx context.Context) error {
	if err := c.do(ctx, call{method: http.MethodGet, route: "/health", path: "/health", noAuth: true}, nil); err != nil {
		return fmt.Errorf("coolify health: %w", err)
	}
	return nil
}

// GetApplication reads an application. Errors: [ErrNotFound] (absent or another team's),
// [ErrUnauthorized], [ErrForbidden] (token without read), transport errors.
func (c *Client) GetApplication(ctx context.Context, uuid string) (*Application, error) {
	var w wireApplication
	if err := c.do(ctx, call{method: http.MethodGet, route: "/applications/{uuid}",
		path: "/applications/" + pathEscape(uuid)}, &w); err != nil {
		return nil, fmt.Errorf("get application %s: %w", uuid, err)
	}
	a := w.application()
	return &a, nil
}

// ListApplications lists every application the token's team can see (GET /applications,
// one request however many there are): for checks that only need to know which exist, where
// one read per application would spend the request budget. Errors as [Client.GetApplication],
// [ErrNotFound] aside.
func (c *Client) ListApplications(ctx context.Context) ([]Application, error) {
	var ws []wireApplication
	if err := c.do(ctx, call{method: http.MethodGet, route: "/applications", path: "/applications"}, &ws); err != nil {
		return nil, fmt.Errorf("list applications: %w", err)
	}
	out := make([]Application, len(ws))
	for i := range ws {
		out[i] = ws[i].application()
	}
	return out, nil
}

// GetService reads a service. Errors as [Client.GetApplication].
func (c *Client) GetService(ctx context.Context, uuid string) (*Service, error) {
	var s Service
	if err := c.do(ctx, call{method: http.MethodGet, route: "/services/{uuid}",
		path: "/services/" + pathEscape(uuid)}, &s); err != nil {
		return nil, fmt.Errorf("get service %s: %w", uuid, err)
	}
	return &s, nil
}

// ListEnvs lists the env vars of an application or service. For an application it returns the
// production rows only: the is_preview twins Coolify creates for every variable are dropped (by
// the flag, never by de-duplicating keys). Values the token may not see come back with
// [EnvVar.ValueHidden] set. Errors as [Client.GetApplication].
func (c *Client) ListEnvs(ctx context.Context, ref ResourceRef) ([]EnvVar, error) {
	all, err := c.ListAllEnvs(ctx, ref)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, e := range all {
		if ref.Kind == KindApplication && e.IsPreview {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// ListAllEnvs lists every env row of an application or service as Coolify stores it, the
// is_preview twins of an application's variables included (non-preview rows first, then preview
// rows, each by id). Use it to find a twin, e.g. to delete it with the variable it belongs to;
// use [Client.ListEnvs] for the variables a deployment reads. Errors as [Client.GetApplication].
func (c *Client) ListAllEnvs(ctx context.Context, ref ResourceRef) ([]EnvVar, error) {
	col, err := ref.collection()
	if err != nil {
		return nil, fmt.Errorf("list envs: %w", err)
	}
	var rows []readEnv
	if err := c.do(ctx, call{method: http.MethodGet, route: routeOf(ref, "/envs"), path: col + "/envs"}, &rows); err != nil {
		return nil, fmt.Errorf("list envs of %s: %w", ref, err)
	}
	out := make([]EnvVar, len(rows))
	for i := range rows {
		out[i] = rows[i].envVar()
	}
	return out, nil
}

func routeOf(ref ResourceRef, suffix string) string {
	if ref.Kind == KindService {
		return "/services/{uuid}" + suffix
	}
	return "/applications/{uuid}" + suffix
}

// wireWrite is the body item of an env write: the value and every flag the resource type takes,
// always present, because Coolify's PATCH wipes an omitted value and resets omitted flags.
func wireWrite(ref ResourceRef, e EnvVar) wireEnv {
	t := func(b bool) *bool { return &b }
	value, comment := e.Value, e.Comment
	w := wireEnv{
		Key: e.Key, Value: &value,
		IsLiteral: t(e.IsLiteral), IsMultiline: t(e.IsMultiline), IsShownOnce: t(e.IsShownOnce),
		Comment: &comment,
	}
	if ref.Kind == KindApplication {
		w.IsPreview, w.IsBuildtime, w.IsRuntime = t(e.IsPreview), t(e.IsBuildtime), t(e.IsRuntime)
	}
	return w
}

// UpsertEnvs creates or updates vars in one bulk request (PATCH .../envs/bulk, which upserts by
// key within the is_preview scope). Each variable is written exactly as given: its value and its
// full flag set are always sent, so nothing the caller did not mean to change is lost (see
// [EnvVar] for how to keep a variable's current flags). For applications, Coolify creates the
// preview twin of a new variable itself and leaves existing twins alone.
//
// Bulk is safe here because the server's only partial failure (a 422 on an invalid item after
// earlier items were saved) is ruled out beforehand: every item is validated first and a batch
// with an invalid item, a hidden value, or a key twice in one scope is refused before sending
// (errors wrapping [ErrInvalidEnv] or [ErrValueHidden]). Server errors as [Client.GetApplication],
// plus [ErrValidation].
func (c *Client) UpsertEnvs(ctx context.Context, ref ResourceRef, vars []EnvVar) error {
	if len(vars) == 0 {
		return nil
	}
	col, err := ref.collection()
	if err != nil {
		return fmt.Errorf("upsert envs: %w", err)
	}
	type scoped struct {
		key     string
		preview bool
	}
	seen := make(map[scoped]bool, len(vars))
	data := make([]wireEnv, 0, len(vars))
	for _, e := range vars {
		if err := validateEnv(e); err != nil {
			return fmt.Errorf("upsert envs of %s: %w", ref, err)
		}
		k := scoped{e.Key, e.IsPreview && ref.Kind == KindApplication}
		if seen[k] {
			return fmt.Errorf("upsert envs of %s: env %s: %w: key given twice", ref, e.Key, ErrInvalidEnv)
		}
		seen[k] = true
		data = append(data, wireWrite(ref, e))
	}
	body := struct {
		Data []wireEnv `json:"data"`
	}{data}
	if err := c.do(ctx, call{method: http.MethodPatch, route: routeOf(ref, "/envs/bulk"),
		path: col + "/envs/bulk", body: body}, nil); err != nil {
		return fmt.Errorf("upsert %d envs of %s: %w", len(vars), ref, err)
	}
	return nil
}

// CreateEnv creates one variable (POST .../envs) and returns its uuid. Errors: [ErrConflict]
// when the key already exists in that scope, [ErrInvalidEnv]/[ErrValueHidden] before sending,
// and those of [Client.GetApplication] and [ErrValidation].
func (c *Client) CreateEnv(ctx context.Context, ref ResourceRef, e EnvVar) (string, error) {
	col, err := ref.collection()
	if err != nil {
		return "", fmt.Errorf("create env: %w", err)
	}
	if err := validateEnv(e); err != nil {
		return "", fmt.Errorf("create env of %s: %w", ref, err)
	}
	var out wireEnv
	if err := c.do(ctx, call{method: http.MethodPost, route: routeOf(ref, "/envs"),
		path: col + "/envs", body: wireWrite(ref, e)}, &out); err != nil {
		return "", fmt.Errorf("create env %s of %s: %w", e.Key, ref, err)
	}
	if out.UUID == "" {
		return "", fmt.Errorf("create env %s of %s: %w: no uuid", e.Key, ref, ErrUnexpectedResponse)
	}
	return out.UUID, nil
}

// UpdateEnv updates one existing variable, matched by key within its is_preview scope (PATCH
// .../envs; Coolify answers 201 with the variable), sending the value and every flag. It returns
// the variable as stored. Errors: [ErrNotFound] when the key is not in that scope (no upsert),
// [ErrInvalidEnv]/[ErrValueHidden] before sending, and those of [Client.GetApplication].
func (c *Client) UpdateEnv(ctx context.Context, ref ResourceRef, e EnvVar) (EnvVar, error) {
	col, err := ref.collection()
	if err != nil {
		return EnvVar{}, fmt.Errorf("update env: %w", err)
	}
	if err := validateEnv(e); err != nil {
		return EnvVar{}, fmt.Errorf("update env of %s: %w", ref, err)
	}
	var out readEnv
	if err := c.do(ctx, call{method: http.MethodPatch, route: routeOf(ref, "/envs"),
		path: col + "/envs", body: wireWrite(ref, e)}, &out); err != nil {
		return EnvVar{}, fmt.Errorf("update env %s of %s: %w", e.Key, ref, err)
	}
	return out.envVar(), nil
}

// DeleteEnv deletes one variable by its uuid (the preview twin of an application variable is a
// separate row and stays: find it with [Client.ListAllEnvs] and delete it too). Errors: [ErrNotFound] and those of [Client.GetApplication].
func (c *Client) DeleteEnv(ctx context.Context, ref ResourceRef, envUUID string) error {
	col, err := ref.collection()
	if err != nil {
		return fmt.Errorf("delete env: %w", err)
	}
	if err := c.do(ctx, call{method: http.MethodDelete, route: routeOf(ref, "/envs/{env_uuid}"),
		path: col + "/envs/" + pathEscape(envUUID)}, nil); err != nil {
		return fmt.Errorf("delete env %s of %s: %w", envUUID, ref, err)
	}
	return nil
}

// SetImageTag sets an application's docker_registry_image_tag (PATCH /applications/{uuid}). An
// empty tag clears it: the body is {"docker_registry_image_tag": null}, which Coolify accepts and
// stores as null (a deployment then uses "latest"), so a tag that was null can be put back. Any
// other tag is checked against Coolify's rule first (error wrapping [ErrInvalidTag], nothing
// sent). The new tag is used by the next deployment that starts; it does not deploy. Errors as
// [Client.GetApplication], plus [ErrValidation].
func (c *Client) SetImageTag(ctx context.Context, appUUID, tag string) error {
	body := map[string]*string{"docker_registry_image_tag": nil}
	if tag != "" {
		if err := validateTag(tag); err != nil {
			return fmt.Errorf("set image tag of %s: %w", appUUID, err)
		}
		body["docker_registry_image_tag"] = &tag
	}
	if err := c.do(ctx, call{method: http.MethodPatch, route: "/applications/{uuid}",
		path: "/applications/" + pathEscape(appUUID), body: body}, nil); err != nil {
		return fmt.Errorf("set image tag of %s: %w", appUUID, err)
	}
	return nil
}

type deployItem struct {
	Message        string `json:"message"`
	ResourceUUID   string `json:"resource_uuid"`
	DeploymentUUID string `json:"deployment_uuid"`
}

// Deploy queues a deployment of an application (POST /deploy?uuid=…&force=…; force rebuilds
// without cache and bypasses Coolify's dedup) and confirms it was stored.
//
// Without force Coolify silently drops the request while the application has a queued or
// in_progress deployment, answering 200 with "Deployment already queued for this commit." and
// a deployment_uuid that was never stored. Deploy detects both signs (the message, and a GET on
// the uuid answering 404) and returns an error wrapping [ErrDeployDeduplicated]: a dropped deploy
// is never reported as started. Use [Client.ActiveDeployments] to find the deployment that is
// running instead.
//
// Other errors: [ErrRateLimited] when the deploy queue is full and its Retry-After (60 s) is
// beyond [RetryPolicy].MaxRetryAfter or the retries ran out (within the budget the request is
// simply retried after the wait: a 429 was not acted on), [ErrNotFound], [ErrForbidden] (token
// without deploy), [ErrUnexpectedResponse] (no deployment uuid: not an application), transport
// errors. When the confirming GET fails for another reason, the result is returned together with
// the error: the deployment was queued as far as the server said, but could not be confirmed.
//
// A POST is not retried after an ambiguous failure (a 500 or a dropped connection), since it
// may have been acted on; only 429, 503 and refused connections are retried.
func (c *Client) Deploy(ctx context.Context, appUUID string, force bool) (*DeployResult, error) {
	q := url.Values{"uuid": {appUUID}, "force": {strconv.FormatBool(force)}}
	var out struct {
		Deployments []deployItem `json:"deployments"`
	}
	if err := c.do(ctx, call{method: http.MethodPost, route: "/deploy", path: "/deploy", query: q}, &out); err != nil {
		return nil, fmt.Errorf("deploy %s: %w", appUUID, err)
	}
	var item *deployItem
	for i := range out.Deployments {
		if out.Deployments[i].ResourceUUID == appUUID || item == nil {
			item = &out.Deployments[i]
		}
	}
	if item == nil {
		return nil, fmt.Errorf("deploy %s: %w: no deployment in answer", appUUID, ErrUnexpectedResponse)
	}
	return c.confirm(ctx, "deploy", appUUID, *item)
}

// Restart queues a restart of an application (POST /applications/{uuid}/restart: a restart_only
// deployment for git-built apps, a normal deployment that pulls the current image for image
// apps) and confirms it was stored. Same dedup rule and errors as [Client.Deploy].
func (c *Client) Restart(ctx context.Context, appUUID string) (*DeployResult, error) {
	var out deployItem
	if err := c.do(ctx, call{method: http.MethodPost, route: "/applications/{uuid}/restart",
		path: "/applications/" + pathEscape(appUUID) + "/restart"}, &out); err != nil {
		return nil, fmt.Errorf("restart %s: %w", appUUID, err)
	}
	out.ResourceUUID = appUUID
	return c.confirm(ctx, "restart", appUUID, out)
}

// Start queues a deployment through POST /applications/{uuid}/start (force: rebuild without
// cache) and confirms it was stored. Prefer [Client.Deploy]: this route does not check the
// deploy queue limit, and when the queue is full it answers 200 with a deployment uuid that was
// never stored, which Start reports as [ErrDeployDeduplicated] like a dedup. Same errors as
// [Client.Deploy].
func (c *Client) Start(ctx context.Context, appUUID string, force bool) (*DeployResult, error) {
	var out deployItem
	q := url.Values{"force": {strconv.FormatBool(force)}}
	if err := c.do(ctx, call{method: http.MethodPost, route: "/applications/{uuid}/start",
		path: "/applications/" + pathEscape(appUUID) + "/start", query: q}, &out); err != nil {
		return nil, fmt.Errorf("start %s: %w", appUUID, err)
	}
	out.ResourceUUID = appUUID
	return c.confirm(ctx, "start", appUUID, out)
}

// confirm turns a deploy answer into a result only when the deployment exists.
func (c *Client) confirm(ctx context.Context, op, appUUID string, item deployItem) (*DeployResult, error) {
	if strings.Contains(strings.ToLower(item.Message), dedupMessage) {
		return nil, fmt.Errorf("%s %s: %w (server said %q)", op, appUUID, ErrDeployDeduplicated, item.Message)
	}
	if item.DeploymentUUID == "" {
		return nil, fmt.Errorf("%s %s: %w: no deployment uuid (server said %q)", op, appUUID, ErrUnexpectedResponse, item.Message)
	}
	res := &DeployResult{DeploymentUUID: item.DeploymentUUID, ResourceUUID: item.ResourceUUID, Message: item.Message}
	d, err := c.GetDeployment(ctx, item.DeploymentUUID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%s %s: %w (deployment %s was never stored)", op, appUUID, ErrDeployDeduplicated, item.DeploymentUUID)
		}
		return res, fmt.Errorf("%s %s: confirm deployment %s: %w", op, appUUID, item.DeploymentUUID, err)
	}
	res.Deployment = d
	c.noteAppID(appUUID, d.ApplicationID)
	return res, nil
}

// DeployService deploys (starts) a service (POST /deploy?uuid=…). Services have no deployment
// uuid and no dedup: the answer is only a message, which is returned. To wait, poll
// [Client.GetService] until Status is "running:*" (see [Service]). Errors as [Client.Deploy].
func (c *Client) DeployService(ctx context.Context, serviceUUID string) (string, error) {
	q := url.Values{"uuid": {serviceUUID}}
	var out struct {
		Deployments []deployItem `json:"deployments"`
	}
	if err := c.do(ctx, call{method: http.MethodPost, route: "/deploy", path: "/deploy", query: q}, &out); err != nil {
		return "", fmt.Errorf("deploy service %s: %w", serviceUUID, err)
	}
	if len(out.Deployments) == 0 {
		return "", fmt.Errorf("deploy service %s: %w: empty answer", serviceUUID, ErrUnexpectedResponse)
	}
	return out.Deployments[0].Message, nil
}

// RestartService restarts a service (POST /services/{uuid}/restart, pulling images first when
// pullLatest) and returns the server's message. Wait as for [Client.DeployService]. Errors as
// [Client.GetApplication], plus [ErrBadRequest].
func (c *Client) RestartService(ctx context.Context, serviceUUID string, pullLatest bool) (string, error) {
	var out struct {
		Message string `json:"message"`
	}
	q := url.Values{"latest": {strconv.FormatBool(pullLatest)}}
	if err := c.do(ctx, call{method: http.MethodPost, route: "/services/{uuid}/restart",
		path: "/services/" + pathEscape(serviceUUID) + "/restart", query: q}, &out); err != nil {
		return "", fmt.Errorf("restart service %s: %w", serviceUUID, err)
	}
	return out.Message, nil
}

// GetDeployment reads a deployment. Errors: [ErrNotFound] (never stored, e.g. the uuid of a
// dropped deploy, or another team's), and those of [Client.GetApplication].
func (c *Client) GetDeployment(ctx context.Context, deploymentUUID string) (*Deployment, error) {
	var w wireDeployment
	if err := c.do(ctx, call{method: http.MethodGet, route: "/deployments/{uuid}",
		path: "/deployments/" + pathEscape(deploymentUUID)}, &w); err != nil {
		return nil, fmt.Errorf("get deployment %s: %w", deploymentUUID, err)
	}
	d := w.deployment()
	return &d, nil
}

// ListDeployments lists an application's deployments newest first (GET
// /deployments/applications/{uuid}?skip=&take=) and the total count. Errors as
// [Client.GetApplication].
func (c *Client) ListDeployments(ctx context.Context, appUUID string, skip, take int) (int, []Deployment, error) {
	q := url.Values{"skip": {strconv.Itoa(skip)}, "take": {strconv.Itoa(take)}}
	var out struct {
		Count       int              `json:"count"`
		Deployments []wireDeployment `json:"deployments"`
	}
	if err := c.do(ctx, call{method: http.MethodGet, route: "/deployments/applications/{uuid}",
		path: "/deployments/applications/" + pathEscape(appUUID), query: q}, &out); err != nil {
		return 0, nil, fmt.Errorf("list deployments of %s: %w", appUUID, err)
	}
	var ds []Deployment
	if out.Deployments != nil {
		ds = make([]Deployment, len(out.Deployments))
		for i := range out.Deployments {
			ds[i] = out.Deployments[i].deployment()
		}
	}
	return out.Count, ds, nil
}

// ActiveDeployments returns the application's queued and in_progress deployments, oldest
// first (preview deployments of pull requests included).
//
// It reads the team's active deployments (GET /deployments, queued and in_progress rows
// only) and keeps the application's: exact, and light, since ended rows are not sent at all.
// Coolify names the application there only by its numeric id, which GET
// /applications/{uuid} does not show, so until the client has seen the id on one of the
// application's deployments (the deployment a deploy started, or an earlier read here) it
// first reads the application's newest deployment (GET /deployments/applications/{uuid},
// take 1), which names it: one row, where a page of them carries, with read:sensitive, every
// row's whole build log. When that row is the application's only one, it is the whole answer;
// an application with no deployment has none active. Only when Coolify names no id does it
// page through the application's deployments instead, while pages still hold active ones,
// where a page of ended rows (newer pull-request previews, canceled deploys) can hide an
// older active one. Errors as [Client.GetApplication].
func (c *Client) ActiveDeployments(ctx context.Context, appUUID string) ([]Deployment, error) {
	if id, ok := c.appIDs.Load(appUUID); ok {
		return c.activeOf(ctx, id.(string))
	}
	count, newest, err := c.ListDeployments(ctx, appUUID, 0, 1)
	switch {
	case err != nil:
		return nil, fmt.Errorf("active deployments: %w", err)
	case len(newest) == 0 && count == 0:
		return nil, nil
	case len(newest) == 1 && count == 1:
		c.noteAppID(appUUID, newest[0].ApplicationID)
		return slices.DeleteFunc(newest, func(d Deployment) bool { return !d.Status.Active() }), nil
	case len(newest) > 0 && newest[0].ApplicationID != "":
		c.noteAppID(appUUID, newest[0].ApplicationID)
		return c.activeOf(ctx, newest[0].ApplicationID)
	}
	return c.pagedActive(ctx, appUUID)
}

// pagedActive returns the application's active deployments, oldest first, from its own
// pages of deployments, newest first, read while they still hold active ones.
func (c *Client) pagedActive(ctx context.Context, appUUID string) ([]Deployment, error) {
	const take, maxPages = 20, 10
	var out []Deployment
	for page := range maxPages {
		count, ds, err := c.ListDeployments(ctx, appUUID, page*take, take)
		if err != nil {
			return nil, fmt.Errorf("active deployments: %w", err)
		}
		active := 0
		for _, d := range ds {
			if d.Status.Active() {
				out = append(out, d)
				active++
			}
		}
		if active == 0 || len(ds) < take || (page+1)*take >= count {
			break
		}
	}
	slices.Reverse(out)
	return out, nil
}

// activeOf returns the active deployments of the application whose numeric id is appID,
// oldest first, from GET /deployments.
func (c *Client) activeOf(ctx context.Context, appID string) ([]Deployment, error) {
	var rows deploymentRows
	if err := c.do(ctx, call{method: http.MethodGet, route: "/deployments", path: "/deployments"}, &rows); err != nil {
		return nil, fmt.Errorf("active deployments: %w", err)
	}
	var out []Deployment
	for i := range rows {
		if string(rows[i].ApplicationID) == appID && rows[i].Status.Active() {
			out = append(out, rows[i].deployment())
		}
	}
	slices.SortFunc(out, func(a, b Deployment) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// noteAppID remembers the numeric id of application appUUID, as a deployment of it showed.
func (c *Client) noteAppID(appUUID, appID string) {
	if appID != "" {
		c.appIDs.Store(appUUID, appID)
	}
}

// CancelDeployment cancels a queued or in_progress deployment (POST /deployments/{uuid}/cancel).
// Errors: [ErrBadRequest] when it already ended (the message names its status), [ErrNotFound],
// [ErrForbidden], [ErrServer] (before Coolify 4.3.7 an API cancel always answered 500).
func (c *Client) CancelDeployment(ctx context.Context, deploymentUUID string) error {
	if err := c.do(ctx, call{method: http.MethodPost, route: "/deployments/{uuid}/cancel",
		path: "/deployments/" + pathEscape(deploymentUUID) + "/cancel", urgent: true}, nil); err != nil {
		return fmt.Errorf("cancel deployment %s: %w", deploymentUUID, err)
	}
	return nil
}

// WaitDeployment waits until a deployment ends, and returns it:
//   - finished: the deployment, nil;
//   - failed: the deployment, an error wrapping [ErrDeploymentFailed];
//   - cancelled-by-user: the deployment, an error wrapping [ErrDeploymentCancelled];
//   - still queued or in_progress after timeout (timeout <= 0: no limit): Coolify has no reaper
//     for stuck deployments, so WaitDeployment cancels it and returns the last state read and an
//     error wrapping [ErrDeploymentTimeout] (joined with the cancel's error if that failed; if the
//     cancel finds the deployment ended meanwhile, that end is returned instead).
//
// It looks at the team's active deployments once a tick, a look every wait of the client
// (and of the clients sharing its [Board]) shares, and reads the deployment itself only when
// that list no longer shows it; its end is seen within one tick. The tick adapts to the
// application's recent deployment durations and to the budget (see watch.go).
//
// Transient failures while looking (5xx, 429, unreachable, after each call's own retries) are
// ridden out until the deadline; [ErrNotFound], [ErrUnauthorized] and [ErrForbidden] end the
// wait. When ctx ends, the context's error is returned and the deployment is left alone.
func (c *Client) WaitDeployment(ctx context.Context, deploymentUUID string, timeout time.Duration) (*Deployment, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	var last *Deployment
	var lastErr error
	var tick, paced time.Duration
	appID, begun := "", time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		// The first look is at the next point too: a list taken at an earlier point may
		// predate the deployment.
		tick = c.tick(appID, time.Since(begun), tick, paced)
		at := nextPoint(time.Now(), tick)
		wait := time.Until(at)
		if !deadline.IsZero() {
			wait = min(wait, time.Until(deadline))
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("wait deployment %s: %w", deploymentUUID, ctx.Err())
		case <-timer.C:
		}
		var waited atomic.Int64
		d, ended, err := c.look(withPaced(ctx, &waited), deploymentUUID, minTime(at, time.Now())) // woken early by the deadline: now
		paced = time.Duration(waited.Load())
		switch {
		case err == nil:
			last, lastErr = d, nil
			appID = cmp.Or(d.ApplicationID, appID)
			if ended {
				c.watch.learn(d)
				return d, endError(d)
			}
		case ctx.Err() != nil:
			return last, fmt.Errorf("wait deployment %s: %w", deploymentUUID, ctx.Err())
		case waitEnded(err):
			return last, fmt.Errorf("wait deployment: %w", err)
		default:
			lastErr = err
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return c.cancelStuck(ctx, deploymentUUID, timeout, last, lastErr)
		}
	}
}

// look is one look at a deployment as of grid point at: the shared list while it shows the
// deployment active, else the deployment itself. ended says it has ended.
func (c *Client) look(ctx context.Context, id string, at time.Time) (*Deployment, bool, error) {
	ctx = WithPurpose(ctx, PurposePoll)
	active, err := c.activeAt(ctx, at)
	if err != nil {
		return nil, false, fmt.Errorf("wait deployment %s: %w", id, err)
	}
	if d, ok := active[id]; ok {
		return &d, false, nil
	}
	// Gone from the list: it ended (or the list was taken before it was queued, or lags).
	d, err := c.GetDeployment(ctx, id)
	if err != nil {
		return nil, false, err
	}
	return d, d.Status.Terminal(), nil
}

// cancelStuck cancels a deployment that outlived its wait and reports how it ended.
func (c *Client) cancelStuck(ctx context.Context, id string, timeout time.Duration, last *Deployment, lastErr error) (*Deployment, error) {
	status := "unknown"
	if last != nil {
		status = string(last.Status)
	}
	timeoutErr := fmt.Errorf("wait deployment %s: %w after %s (status %s)", id, ErrDeploymentTimeout, timeout, status)
	if lastErr != nil {
		timeoutErr = errors.Join(timeoutErr, lastErr)
	}
	cerr := c.CancelDeployment(ctx, id)
	if errors.Is(cerr, ErrBadRequest) {
		// It ended between our last poll and the cancel: report the real end.
		if d, err := c.GetDeployment(ctx, id); err == nil && d.Status.Terminal() {
			return d, endError(d)
		}
	}
	if cerr != nil {
		return last, errors.Join(timeoutErr, cerr)
	}
	if d, err := c.GetDeployment(ctx, id); err == nil {
		last = d
	}
	return last, timeoutErr
}

// Err says how the deployment ended: nil when it finished (or has not ended yet), an error
// wrapping [ErrDeploymentFailed] or [ErrDeploymentCancelled] otherwise, as [Client.WaitDeployment]
// reports them.
func (d *Deployment) Err() error { return endError(d) }

func endError(d *Deployment) error {
	switch d.Status {
	case StatusFailed:
		return fmt.Errorf("deployment %s: %w", d.UUID, ErrDeploymentFailed)
	case StatusCancelledByUser:
		return fmt.Errorf("deployment %s: %w", d.UUID, ErrDeploymentCancelled)
	}
	return nil
}
