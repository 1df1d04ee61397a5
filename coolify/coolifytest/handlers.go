package coolifytest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Coolify's validation rules.
var (
	tagRule       = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	imageNameRule = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?:@sha256)?$`)
	commitRule    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._\-/]*$`)
	envKeyRule    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)
)

// version is what the fake reports as the Coolify version of the rows it creates.
const version = "4.3.11"

func laravelTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func (f *Fake) health(*reqCtx) response {
	return response{status: http.StatusOK, body: []byte("OK"), header: http.Header{"Content-Type": {"text/html; charset=utf-8"}}}
}

func (f *Fake) movedToPost(*reqCtx) response {
	resp := jsonError(http.StatusMethodNotAllowed, "This endpoint has changed to a POST request.")
	resp.header = http.Header{"Allow": {"POST"}}
	return resp
}

func (f *Fake) appHealth(c *reqCtx) response {
	a := f.apps[c.r.PathValue("uuid")]
	if a == nil {
		return jsonError(http.StatusNotFound, "Application not found.")
	}
	if a.NotRunning || a.unhealthy {
		return jsonError(http.StatusServiceUnavailable, "unhealthy")
	}
	return response{status: http.StatusOK, body: []byte("OK"), header: http.Header{"Content-Type": {"text/plain"}}}
}

// --- applications ---

// appJSON is an application as the API answers it, without id (removeSensitiveData hides it).
func (f *Fake) appJSON(a *app) map[string]any {
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	return map[string]any{
		"uuid": a.UUID, "name": a.Name, "description": nil,
		"fqdn": nullable(a.FQDN), "build_pack": a.BuildPack,
		"docker_registry_image_name": nullable(a.ImageName),
		"docker_registry_image_tag":  nullable(a.ImageTag),
		"git_repository":             "coollabsio/coolify", "git_branch": "main",
		"git_commit_sha": a.GitCommitSHA, "git_full_url": nil,
		"status": f.appStatus(a), "ports_exposes": "80", "config_hash": fmt.Sprintf("%x", a.updatedAt.UnixNano()),
		"health_check_enabled": a.HealthCheckEnabled, "health_check_type": "http", "health_check_command": nil,
		"health_check_path": a.HealthCheckPath, "health_check_port": nil, "health_check_host": "localhost",
		"health_check_method": "GET", "health_check_return_code": 200, "health_check_scheme": "http",
		"health_check_response_text": nil, "health_check_interval": 5, "health_check_timeout": 5,
		"health_check_retries": 10, "health_check_start_period": 5, "custom_healthcheck_found": false,
		"environment_id": 1, "destination_id": 0, "destination_type": "App\\Models\\StandaloneDocker",
		"created_at": laravelTime(a.createdAt), "updated_at": laravelTime(a.updatedAt),
	}
}

func (f *Fake) listApplications(c *reqCtx) response {
	tag := c.r.URL.Query().Get("tag")
	out := []map[string]any{}
	for _, a := range f.sortedApps() {
		if tag == "" || hasTag(a.Tags, tag) {
			out = append(out, withSensitive(f.appJSON(a), c.sensitive, appSensitiveFields))
		}
	}
	return jsonResponse(http.StatusOK, out)
}

func (f *Fake) sortedApps() []*app {
	out := make([]*app, 0, len(f.apps))
	for _, a := range f.apps {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func hasTag(tags []string, t string) bool {
	for _, x := range tags {
		if x == t {
			return true
		}
	}
	return false
}

func (f *Fake) getApplication(c *reqCtx) response {
	a := f.apps[c.r.PathValue("uuid")]
	if a == nil {
		return jsonError(http.StatusNotFound, "Application not found.")
	}
	return jsonResponse(http.StatusOK, withSensitive(f.appJSON(a), c.sensitive, appSensitiveFields))
}

// Fields Coolify's models hide ($hidden) and its API shows only to a token that may read
// secrets (read:sensitive or root, held by a team admin/owner); otherwise the keys are absent.
var (
	appSensitiveFields = map[string]any{"http_basic_auth_password": nil, "manual_webhook_secret_github": nil,
		"manual_webhook_secret_gitlab": nil, "manual_webhook_secret_bitbucket": nil, "manual_webhook_secret_gitea": nil,
		"dockerfile": nil, "docker_compose": nil, "docker_compose_raw": nil, "custom_labels": nil}
	serviceSensitiveFields = map[string]any{"docker_compose": "services: {}\n", "docker_compose_raw": "services: {}\n"}
)

func withSensitive(m map[string]any, sensitive bool, fields map[string]any) map[string]any {
	if sensitive {
		for k, v := range fields {
			m[k] = v
		}
	}
	return m
}

// appPatchFields are the keys PATCH /applications/{uuid} accepts; any other key is a 422.
// (The spec also lists project_uuid, server_uuid, environment_name, destination_uuid and
// github_app_uuid; the code rejects them.)
var appPatchFields = toSet("git_repository", "git_branch", "ports_exposes", "build_pack", "name",
	"description", "domains", "noindex_domains", "git_commit_sha", "docker_registry_image_name",
	"docker_registry_image_tag", "is_static", "is_spa", "is_auto_deploy_enabled", "is_force_https_enabled",
	"is_preview_deployments_enabled", "install_command", "build_command", "start_command", "ports_mappings",
	"base_directory", "publish_directory", "health_check_enabled", "health_check_path", "health_check_port",
	"health_check_host", "health_check_method", "health_check_return_code", "health_check_scheme",
	"health_check_response_text", "health_check_interval", "health_check_timeout", "health_check_retries",
	"health_check_start_period", "health_check_type", "health_check_command", "limits_memory",
	"limits_memory_swap", "limits_memory_swappiness", "limits_memory_reservation", "limits_cpus",
	"limits_cpuset", "limits_cpu_shares", "custom_labels", "custom_docker_run_options",
	"post_deployment_command", "post_deployment_command_container", "pre_deployment_command",
	"pre_deployment_command_container", "manual_webhook_secret_github", "manual_webhook_secret_gitlab",
	"manual_webhook_secret_bitbucket", "manual_webhook_secret_gitea", "redirect", "instant_deploy",
	"dockerfile", "dockerfile_location", "docker_compose_location", "docker_compose_custom_start_command",
	"docker_compose_custom_build_command", "docker_compose_domains", "watch_paths", "use_build_server",
	"use_build_secrets", "is_git_submodules_enabled", "is_git_lfs_enabled", "is_git_shallow_clone_enabled",
	"disable_build_cache", "inject_build_args_to_dockerfile", "include_source_commit_in_build",
	"is_env_sorting_enabled", "is_pr_deployments_public_enabled", "stop_grace_period",
	"docker_images_to_keep", "is_gzip_enabled", "is_stripprefix_enabled", "is_raw_compose_deployment_enabled",
	"is_log_drain_enabled", "is_gpu_enabled", "gpu_driver", "gpu_count", "gpu_device_ids", "gpu_options",
	"is_consistent_container_name_enabled", "custom_internal_name", "preview_url_template",
	"max_restart_count", "connect_to_docker_network", "force_domain_override",
	"is_container_label_escape_enabled", "is_preserve_repository_enabled")

func toSet(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

func unknownFields(body map[string]any, allowed map[string]bool) map[string]any {
	errs := map[string]any{}
	for k := range body {
		if !allowed[k] {
			errs[k] = []string{"This field is not allowed."}
		}
	}
	return errs
}

func (f *Fake) patchApplication(c *reqCtx) response {
	a := f.apps[c.r.PathValue("uuid")]
	if a == nil {
		return jsonError(http.StatusNotFound, "Application not found.")
	}
	body, bad := decodeObject(c, true)
	if bad != nil {
		return *bad
	}
	if errs := unknownFields(body, appPatchFields); len(errs) > 0 {
		return validationError(errs)
	}
	errs := map[string]any{}
	str := func(k string) (string, bool) {
		v, ok := body[k]
		if !ok {
			return "", false
		}
		s, isStr := v.(string)
		if !isStr && v != nil {
			errs[k] = []string{fmt.Sprintf("The %s field must be a string.", strings.ReplaceAll(k, "_", " "))}
		}
		return s, true
	}
	tag, hasTag := str("docker_registry_image_tag")
	if hasTag && tag != "" && !tagRule.MatchString(tag) {
		errs["docker_registry_image_tag"] = []string{"The docker registry image tag field format is invalid."}
	}
	image, hasImage := str("docker_registry_image_name")
	if hasImage && image != "" && (len(image) > 255 || !imageNameRule.MatchString(image)) {
		errs["docker_registry_image_name"] = []string{"The docker registry image name field format is invalid."}
	}
	commit, hasCommit := str("git_commit_sha")
	if hasCommit && !commitRule.MatchString(commit) {
		// One of the branches that answers with a plain string instead of an array.
		errs["git_commit_sha"] = "The git commit sha format is invalid."
	}
	name, hasName := str("name")
	domains, hasDomains := str("domains")
	hcPath, hasHCPath := str("health_check_path")
	hcEnabled, hasHC := body["health_check_enabled"]
	var hcOn bool
	if hasHC {
		var ok bool
		if hcOn, ok = asBool(hcEnabled); !ok {
			errs["health_check_enabled"] = []string{"The health check enabled field must be true or false."}
		}
	}
	instant := false
	if v, ok := body["instant_deploy"]; ok {
		b, ok := asBool(v)
		if !ok {
			errs["instant_deploy"] = []string{"The instant deploy field must be true or false."}
		}
		instant = b
	}
	if len(errs) > 0 {
		return validationError(errs)
	}
	if hasTag {
		a.ImageTag = tag
	}
	if hasImage {
		a.ImageName = image
	}
	if hasCommit {
		a.GitCommitSHA = commit
	}
	if hasName {
		a.Name = name
	}
	if hasDomains {
		a.FQDN = domains
	}
	if hasHCPath {
		a.HealthCheckPath = hcPath
	}
	if hasHC {
		a.HealthCheckEnabled = hcOn
		f.noteStatusLocked(a, f.clock.Now())
	}
	for k, v := range body {
		switch k {
		case "docker_registry_image_tag", "docker_registry_image_name", "git_commit_sha", "name", "domains",
			"health_check_path", "health_check_enabled", "instant_deploy":
		default:
			a.Extra[k] = v
		}
	}
	a.updatedAt = f.clock.Now()
	if instant {
		id, skipped := f.queueLocked(a, false, false, c.rec.RunID, c.rec.Fence)
		c.rec.DeploymentUUID = id
		if skipped {
			return jsonResponse(http.StatusOK, map[string]any{"message": "Deployment already queued for this commit."})
		}
	}
	return jsonResponse(http.StatusOK, map[string]any{"uuid": a.UUID})
}

// asBool accepts what Laravel's boolean rule accepts.
func asBool(v any) (bool, bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case json.Number:
		switch x.String() {
		case "1":
			return true, true
		case "0":
			return false, true
		}
	case string:
		switch x {
		case "1", "true":
			return true, true
		case "0", "false":
			return false, true
		}
	}
	return false, false
}

func (f *Fake) startApplication(c *reqCtx) response {
	a := f.apps[c.r.PathValue("uuid")]
	if a == nil {
		return jsonError(http.StatusNotFound, "Application not found.")
	}
	force, _ := asBool(c.r.URL.Query().Get("force"))
	if f.queuedCountLocked() >= f.queueLimit {
		// Queue-full is not checked here: the answer carries a uuid that does not exist.
		id := newUUID()
		c.rec.DeploymentUUID = id
		return jsonResponse(http.StatusOK, map[string]any{"message": "Deployment request queued.", "deployment_uuid": id})
	}
	id, skipped := f.queueLocked(a, force, false, c.rec.RunID, c.rec.Fence)
	if skipped {
		return jsonResponse(http.StatusOK, map[string]any{"message": "Deployment already queued for this commit."})
	}
	c.rec.DeploymentUUID = id
	return jsonResponse(http.StatusOK, map[string]any{"message": "Deployment request queued.", "deployment_uuid": id})
}

func (f *Fake) restartApplication(c *reqCtx) response {
	a := f.apps[c.r.PathValue("uuid")]
	if a == nil {
		return jsonError(http.StatusNotFound, "Application not found.")
	}
	restartOnly := a.BuildPack != "dockerimage" && a.BuildPack != "dockerfile"
	id, skipped := f.queueLocked(a, false, restartOnly, c.rec.RunID, c.rec.Fence)
	if skipped {
		return jsonResponse(http.StatusOK, map[string]any{"message": "Deployment already queued for this commit."})
	}
	c.rec.DeploymentUUID = id
	return jsonResponse(http.StatusOK, map[string]any{"message": "Restart request queued.", "deployment_uuid": id})
}

func (f *Fake) stopApplication(c *reqCtx) response {
	a := f.apps[c.r.PathValue("uuid")]
	if a == nil {
		return jsonError(http.StatusNotFound, "Application not found.")
	}
	a.NotRunning = true
	f.noteStatusLocked(a, f.clock.Now())
	return jsonResponse(http.StatusOK, map[string]any{"message": "Application stopping request queued."})
}

// --- services ---

// serviceJSON is a service as the API answers it, without id (removeSensitiveData hides it).
func (f *Fake) serviceJSON(s *service) map[string]any {
	return map[string]any{
		"uuid": s.UUID, "name": s.Name, "description": s.Description,
		"service_type": s.ServiceType, "status": f.serviceStatus(s), "environment_id": 1, "server_id": 0,
		"destination_id": 0, "destination_type": "App\\Models\\StandaloneDocker",
		"connect_to_docker_network": false, "config_hash": fmt.Sprintf("%x", s.updatedAt.UnixNano()),
		"created_at": laravelTime(s.createdAt), "updated_at": laravelTime(s.updatedAt),
	}
}

func (f *Fake) listServices(c *reqCtx) response {
	var all []*service
	for _, s := range f.services {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	out := []map[string]any{}
	for _, s := range all {
		out = append(out, withSensitive(f.serviceJSON(s), c.sensitive, serviceSensitiveFields))
	}
	return jsonResponse(http.StatusOK, out)
}

func (f *Fake) getService(c *reqCtx) response {
	s := f.services[c.r.PathValue("uuid")]
	if s == nil {
		return jsonError(http.StatusNotFound, "Service not found.")
	}
	return jsonResponse(http.StatusOK, withSensitive(f.serviceJSON(s), c.sensitive, serviceSensitiveFields))
}

// startServiceLocked queues a (re)start the way Coolify does: the answer comes before the job
// runs, and until it starts the service reads as before (see serviceStatus).
func (f *Fake) startServiceLocked(s *service) {
	now := f.clock.Now()
	s.before = f.serviceStatus(s)
	s.NotRunning = false
	s.Restarts++
	s.jobAt = now.Add(f.timing.Queued)
	s.startingUntil = s.jobAt.Add(f.drawRunLocked())
	s.updatedAt = now
}

func (f *Fake) startService(c *reqCtx) response {
	s := f.services[c.r.PathValue("uuid")]
	if s == nil {
		return jsonError(http.StatusNotFound, "Service not found.")
	}
	if !s.NotRunning {
		return jsonError(http.StatusBadRequest, "Service is already running.")
	}
	f.startServiceLocked(s)
	return jsonResponse(http.StatusOK, map[string]any{"message": "Service starting request queued."})
}

func (f *Fake) restartService(c *reqCtx) response {
	s := f.services[c.r.PathValue("uuid")]
	if s == nil {
		return jsonError(http.StatusNotFound, "Service not found.")
	}
	f.startServiceLocked(s)
	return jsonResponse(http.StatusOK, map[string]any{"message": "Service restarting request queued."})
}

func (f *Fake) stopService(c *reqCtx) response {
	s := f.services[c.r.PathValue("uuid")]
	if s == nil {
		return jsonError(http.StatusNotFound, "Service not found.")
	}
	if s.NotRunning {
		return jsonError(http.StatusBadRequest, "Service is already stopped.")
	}
	s.NotRunning = true
	return jsonResponse(http.StatusOK, map[string]any{"message": "Service stopping request queued."})
}

// --- env vars ---

// resourceOf resolves {uuid} to an application (isApp) or a service, by the route's prefix.
func (f *Fake) resourceOf(c *reqCtx) (uuid string, isApp bool, notFound *response) {
	uuid = c.r.PathValue("uuid")
	if strings.HasPrefix(c.r.URL.Path, "/api/v1/applications/") {
		if f.apps[uuid] == nil {
			r := jsonError(http.StatusNotFound, "Application not found.")
			return "", true, &r
		}
		return uuid, true, nil
	}
	if f.services[uuid] == nil {
		r := jsonError(http.StatusNotFound, "Service not found.")
		return "", false, &r
	}
	return uuid, false, nil
}

// envJSON is an env row as the API answers it: without id and resourceable_* (the
// controllers' removeSensitiveData hides them), the value only with read:sensitive.
func (f *Fake) envJSON(e *env, sensitive bool) map[string]any {
	m := map[string]any{
		"uuid": e.UUID, "key": e.Key,
		"is_preview": e.IsPreview, "is_buildtime": e.IsBuildtime, "is_runtime": e.IsRuntime,
		"is_literal": e.IsLiteral, "is_multiline": nullBool(e.IsMultiline), "is_shown_once": nullBool(e.IsShownOnce),
		"is_shared": false, "comment": nullStr(e.Comment), "version": version,
		"is_really_required": false, "is_buildpack_control": false, "is_coolify": false,
		"created_at": laravelTime(e.createdAt), "updated_at": laravelTime(e.updatedAt),
	}
	if sensitive && (e.IsShownOnce == nil || !*e.IsShownOnce) {
		m["value"] = nullStr(e.Value)
		m["real_value"] = nullStr(e.Value)
	}
	return m
}

func nullBool(p *bool) any {
	if p == nil {
		return nil
	}
	return *p
}

func nullStr(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func (f *Fake) listEnvs(c *reqCtx) response {
	uuid, _, nf := f.resourceOf(c)
	if nf != nil {
		return *nf
	}
	out := []map[string]any{}
	// Non-preview rows by id, then preview rows by id.
	for _, preview := range []bool{false, true} {
		for _, e := range f.envs {
			if e.resource == uuid && e.IsPreview == preview {
				out = append(out, f.envJSON(e, c.sensitive))
			}
		}
	}
	return jsonResponse(http.StatusOK, out)
}

var appEnvFields = toSet("key", "value", "is_preview", "is_literal", "is_multiline", "is_shown_once", "is_runtime", "is_buildtime", "comment")

// envInput is a validated env body: which fields were present, and their values.
type envInput struct {
	key                                  string
	value                                *string
	hasValue                             bool
	preview                              bool
	literal, multiline, shownOnce        *bool
	runtime, buildtime                   *bool
	comment                              *string
	hasComment                           bool
	hasLiteral, hasMultiline, hasShown   bool
	hasRuntime, hasBuildtime, hasPreview bool
}

// parseEnv validates one env object. For applications unknown keys are a 422 (checkUnknown);
// services ignore the keys they do not take.
func parseEnv(body map[string]any, isApp, checkUnknown bool) (envInput, map[string]any) {
	if checkUnknown && isApp {
		if errs := unknownFields(body, appEnvFields); len(errs) > 0 {
			return envInput{}, errs
		}
	}
	errs := map[string]any{}
	var in envInput
	switch k := body["key"].(type) {
	case string:
		in.key = strings.ReplaceAll(strings.TrimSpace(k), " ", "_")
		if in.key == "" {
			errs["key"] = []string{"The key field is required."}
		} else if len(in.key) > 255 || !envKeyRule.MatchString(in.key) {
			errs["key"] = []string{"The key field format is invalid."}
		}
	case nil:
		errs["key"] = []string{"The key field is required."}
	default:
		errs["key"] = []string{"The key field must be a string."}
	}
	if v, ok := body["value"]; ok {
		in.hasValue = true
		switch x := v.(type) {
		case string:
			in.value = &x
		case nil:
		default:
			errs["value"] = []string{"The value field must be a string."}
		}
	}
	if v, ok := body["comment"]; ok {
		in.hasComment = true
		switch x := v.(type) {
		case string:
			if len(x) > 256 {
				errs["comment"] = []string{"The comment field must not be greater than 256 characters."}
			}
			in.comment = &x
		case nil:
		default:
			errs["comment"] = []string{"The comment field must be a string."}
		}
	}
	flag := func(name string, dst **bool, has *bool) {
		v, ok := body[name]
		if !ok {
			return
		}
		*has = true
		if v == nil {
			return
		}
		b, ok := asBool(v)
		if !ok {
			errs[name] = []string{fmt.Sprintf("The %s field must be true or false.", strings.ReplaceAll(name, "_", " "))}
			return
		}
		*dst = &b
	}
	var preview *bool
	flag("is_literal", &in.literal, &in.hasLiteral)
	flag("is_multiline", &in.multiline, &in.hasMultiline)
	flag("is_shown_once", &in.shownOnce, &in.hasShown)
	if isApp {
		flag("is_preview", &preview, &in.hasPreview)
		flag("is_runtime", &in.runtime, &in.hasRuntime)
		flag("is_buildtime", &in.buildtime, &in.hasBuildtime)
	}
	in.preview = preview != nil && *preview
	return in, errs
}

func deref(p *bool) bool { return p != nil && *p }

// newEnv is a new row from a create body: runtime and buildtime default on.
func newEnv(in envInput) Env {
	e := Env{Key: in.key, Value: in.value, IsPreview: in.preview, IsRuntime: true, IsBuildtime: true,
		IsLiteral: deref(in.literal), IsMultiline: Bool(deref(in.multiline)), IsShownOnce: Bool(deref(in.shownOnce)),
		Comment: in.comment}
	if in.runtime != nil {
		e.IsRuntime = *in.runtime
	}
	if in.buildtime != nil {
		e.IsBuildtime = *in.buildtime
	}
	return e
}

// applyPatch updates a row the way the real PATCH does. Applications: value always assigned
// (omitted → wiped), is_literal reset to false when omitted, is_multiline/is_shown_once set to
// null when omitted, is_runtime/is_buildtime/comment only when sent. Services: value always
// assigned, flags only when sent.
func applyPatch(e *env, in envInput) {
	e.Value = in.value
	if e.isApp {
		e.IsLiteral = deref(in.literal)
		e.IsMultiline = in.multiline
		e.IsShownOnce = in.shownOnce
		if in.runtime != nil {
			e.IsRuntime = *in.runtime
		}
		if in.buildtime != nil {
			e.IsBuildtime = *in.buildtime
		}
	} else {
		if in.hasLiteral {
			e.IsLiteral = deref(in.literal)
		}
		if in.hasMultiline {
			e.IsMultiline = in.multiline
		}
		if in.hasShown {
			e.IsShownOnce = in.shownOnce
		}
	}
	if in.hasComment {
		e.Comment = in.comment
	}
}

func (f *Fake) createEnv(c *reqCtx) response {
	uuid, isApp, nf := f.resourceOf(c)
	if nf != nil {
		return *nf
	}
	body, _ := decodeObject(c, false)
	in, errs := parseEnv(body, isApp, true)
	if len(errs) > 0 {
		return validationError(errs)
	}
	if f.findEnv(uuid, in.key, in.preview) != nil {
		return jsonError(http.StatusConflict, "Environment variable already exists. Use PATCH request to update it.")
	}
	row := f.createEnvLocked(uuid, isApp, newEnv(in))
	if isApp {
		return jsonResponse(http.StatusCreated, map[string]any{"uuid": row.UUID})
	}
	// Services answer with the whole row (the spec says {uuid}).
	return jsonResponse(http.StatusCreated, f.envJSON(row, c.sensitive))
}

func (f *Fake) updateEnv(c *reqCtx) response {
	uuid, isApp, nf := f.resourceOf(c)
	if nf != nil {
		return *nf
	}
	body, bad := decodeObject(c, isApp)
	if bad != nil {
		return *bad
	}
	in, errs := parseEnv(body, isApp, true)
	if len(errs) > 0 {
		return validationError(errs)
	}
	row := f.findEnv(uuid, in.key, in.preview)
	if row == nil {
		return jsonError(http.StatusNotFound, "Environment variable not found.")
	}
	applyPatch(row, in)
	row.updatedAt = f.clock.Now()
	return jsonResponse(http.StatusCreated, f.envJSON(row, c.sensitive))
}

func (f *Fake) bulkEnvs(c *reqCtx) response {
	uuid, isApp, nf := f.resourceOf(c)
	if nf != nil {
		return *nf
	}
	body, bad := decodeObject(c, isApp)
	if bad != nil {
		return *bad
	}
	items, _ := body["data"].([]any)
	if len(items) == 0 {
		return jsonError(http.StatusBadRequest, "Bulk data is required.")
	}
	out := []map[string]any{}
	for _, it := range items {
		obj, ok := it.(map[string]any)
		if !ok {
			return validationError(map[string]any{"data": []string{"Each item must be an object."}})
		}
		// Bulk ignores unknown keys (is_build_time is silently dropped here).
		in, errs := parseEnv(obj, isApp, false)
		if len(errs) > 0 {
			// Items before this one are already saved.
			return validationError(errs)
		}
		row := f.findEnv(uuid, in.key, in.preview)
		if row == nil {
			row = f.createEnvLocked(uuid, isApp, newEnv(in))
		} else {
			applyPatch(row, in)
			row.updatedAt = f.clock.Now()
		}
		out = append(out, f.envJSON(row, c.sensitive))
	}
	return jsonResponse(http.StatusCreated, out)
}

func (f *Fake) deleteEnv(c *reqCtx) response {
	uuid, _, nf := f.resourceOf(c)
	if nf != nil {
		return *nf
	}
	id := c.r.PathValue("env_uuid")
	for i, e := range f.envs {
		if e.resource == uuid && e.UUID == id {
			f.envs = append(f.envs[:i:i], f.envs[i+1:]...)
			return jsonResponse(http.StatusOK, map[string]any{"message": "Environment variable deleted."})
		}
	}
	return jsonError(http.StatusNotFound, "Environment variable not found.")
}

// --- deployments ---

func (f *Fake) deploymentJSON(d *deployment, sensitive bool) map[string]any {
	m := map[string]any{
		"id": d.ID, "deployment_uuid": d.UUID, "application_id": strconv.FormatInt(d.appID, 10),
		"application_name": d.AppName, "status": d.Status, "commit": d.Commit,
		"docker_registry_image_tag": nil, "force_rebuild": d.Force, "restart_only": d.RestartOnly,
		"rollback": false, "is_webhook": false, "is_api": d.isAPI, "pull_request_id": d.pr,
		"server_id": 0, "server_name": "localhost", "destination_id": "0", "only_this_server": false,
		"deployment_url": "/project/fake/environment/production/application/" + d.AppUUID + "/deployment/" + d.UUID,
		"git_type":       "other",
		"created_at":     laravelTime(d.CreatedAt), "updated_at": laravelTime(d.updatedAt), "finished_at": nil,
	}
	if !d.FinishedAt.IsZero() {
		m["finished_at"] = laravelTime(d.FinishedAt)
	}
	if sensitive {
		type line struct {
			Command *string `json:"command"`
			Output  string  `json:"output"`
			Type    string  `json:"type"`
			Time    string  `json:"timestamp"`
			Hidden  bool    `json:"hidden"`
			Batch   int     `json:"batch"`
			Order   int     `json:"order"`
		}
		logs := []line{{Output: "Starting deployment of " + d.AppName + ".", Type: "stdout", Time: laravelTime(d.CreatedAt), Batch: 1, Order: 1}}
		if !d.StartedAt.IsZero() {
			logs = append(logs, line{Output: "Pulling image tag " + d.ImageTag + ".", Type: "stdout", Time: laravelTime(d.StartedAt), Batch: 1, Order: 2})
		}
		m["logs"] = string(mustJSON(logs))
	}
	return m
}

func (f *Fake) getDeployment(c *reqCtx) response {
	d := f.findDeployment(c.r.PathValue("uuid"))
	if d == nil {
		return jsonError(http.StatusNotFound, "Deployment not found.")
	}
	return jsonResponse(http.StatusOK, f.deploymentJSON(d, c.sensitive))
}

// listDeployments is GET /deployments: the team's queued and in_progress rows, logs
// included for a read:sensitive token. Coolify reads them in the database's order, which
// after an UPDATE is no longer the id's (PostgreSQL writes the new row version after the
// others), then sorts them by id with Collection::sortBy, which keeps each row's key from the
// first order. Laravel encodes a collection whose keys are not 0, 1, 2… as a JSON object, so
// when a row was updated after a newer one was created (a queued deployment started after
// another was queued) the answer is {"1": {...}, "0": {...}}, rows in id order under their
// database positions; otherwise an array. The fake orders the database by each row's last
// change.
func (f *Fake) listDeployments(c *reqCtx) response {
	var db []*deployment
	for _, d := range f.deployments {
		if d.Status == "queued" || d.Status == "in_progress" {
			db = append(db, d)
		}
	}
	slices.SortStableFunc(db, func(a, b *deployment) int { return a.updatedAt.Compare(b.updatedAt) })
	keys := make([]int, len(db)) // the database position of each row, in id order
	for i := range keys {
		keys[i] = i
	}
	slices.SortStableFunc(keys, func(a, b int) int { return cmp.Compare(db[a].ID, db[b].ID) })
	rows := make([]json.RawMessage, len(keys))
	list := true
	for i, k := range keys {
		rows[i] = mustJSON(f.deploymentJSON(db[k], c.sensitive))
		list = list && k == i
	}
	if list {
		return jsonResponse(http.StatusOK, rows)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:", strconv.Itoa(k))
		b.Write(rows[i])
	}
	b.WriteByte('}')
	return response{status: http.StatusOK, body: b.Bytes()}
}

func (f *Fake) listAppDeployments(c *reqCtx) response {
	a := f.apps[c.r.PathValue("uuid")]
	if a == nil {
		return jsonError(http.StatusNotFound, "Application not found.")
	}
	q := c.r.URL.Query()
	skip, take := 0, 10
	if v, err := strconv.Atoi(q.Get("skip")); err == nil && v >= 0 {
		skip = v
	}
	if v, err := strconv.Atoi(q.Get("take")); err == nil && v >= 1 {
		take = v
	}
	var mine []*deployment
	for i := len(f.deployments) - 1; i >= 0; i-- {
		if f.deployments[i].AppUUID == a.UUID {
			mine = append(mine, f.deployments[i])
		}
	}
	page := []map[string]any{}
	for i := skip; i < len(mine) && i < skip+take; i++ {
		page = append(page, f.deploymentJSON(mine[i], false))
	}
	return jsonResponse(http.StatusOK, map[string]any{"count": len(mine), "deployments": page})
}

func (f *Fake) cancelDeployment(c *reqCtx) response {
	d := f.findDeployment(c.r.PathValue("uuid"))
	if d == nil {
		return jsonError(http.StatusNotFound, "Deployment not found.")
	}
	if d.Status != "queued" && d.Status != "in_progress" {
		return jsonError(http.StatusBadRequest, "Deployment cannot be cancelled. Current status: "+d.Status)
	}
	f.cancelLocked(d)
	if f.cancelBug {
		f.stalled = true
		return jsonError(http.StatusInternalServerError, "Failed to cancel deployment: Call to a member function update() on null")
	}
	f.advanceLocked()
	return jsonResponse(http.StatusOK, map[string]any{
		"message": "Deployment cancelled successfully.", "deployment_uuid": d.UUID, "status": d.Status})
}

// deploy is POST /deploy: parameters from the query string or a JSON body.
func (f *Fake) deploy(c *reqCtx) response {
	params := deployParams(c)
	uuids, tags := params.Get("uuid"), params.Get("tag")
	switch {
	case uuids == "" && tags == "":
		return jsonError(http.StatusBadRequest, "You must provide uuid or tag.")
	case uuids != "" && tags != "":
		return jsonError(http.StatusBadRequest, "You can only use uuid or tag, not both.")
	}
	force, _ := asBool(params.Get("force"))

	targets := f.deployTargetsLocked(uuids, tags)
	anyApp := false
	for _, u := range targets {
		if f.apps[u] != nil {
			anyApp = true
		}
	}
	if anyApp && f.queuedCountLocked() >= f.queueLimit {
		resp := jsonError(http.StatusTooManyRequests, "Deployment queue is full. Please wait for existing deployments to complete.")
		resp.header = http.Header{"Retry-After": {retryAfterSeconds(f.queueRetryAfter)}}
		return resp
	}
	var items []map[string]any
	for _, u := range targets {
		if a := f.apps[u]; a != nil {
			id, skipped := f.queueLocked(a, force, false, c.rec.RunID, c.rec.Fence)
			c.rec.DeploymentUUID = id
			msg := "Application " + a.Name + " deployment queued."
			if skipped {
				msg = "Deployment already queued for this commit."
			}
			items = append(items, map[string]any{"message": msg, "resource_uuid": a.UUID, "deployment_uuid": id})
		} else if s := f.services[u]; s != nil {
			f.startServiceLocked(s)
			items = append(items, map[string]any{"message": "Service " + s.Name + " started. It could take a while, be patient.", "resource_uuid": s.UUID})
		}
	}
	if len(items) == 0 {
		return jsonError(http.StatusNotFound, "No resources found.")
	}
	if tags != "" {
		var msgs []string
		var details []map[string]any
		for _, it := range items {
			msgs = append(msgs, it["message"].(string))
			details = append(details, map[string]any{"resource_uuid": it["resource_uuid"], "deployment_uuid": it["deployment_uuid"]})
		}
		return jsonResponse(http.StatusOK, map[string]any{"message": msgs, "details": details})
	}
	return jsonResponse(http.StatusOK, map[string]any{"deployments": items})
}

// deployTargetsLocked resolves POST /deploy's uuid list, or else its tag list, to resource uuids.
func (f *Fake) deployTargetsLocked(uuids, tags string) []string {
	if uuids != "" {
		return splitList(uuids)
	}
	var targets []string
	for _, t := range splitList(tags) {
		for _, a := range f.sortedApps() {
			if hasTag(a.Tags, t) {
				targets = append(targets, a.UUID)
			}
		}
	}
	return targets
}

// deployParams are POST /deploy's parameters: the query string, then a JSON body's fields.
func deployParams(c *reqCtx) url.Values {
	params := url.Values{}
	for k, v := range c.r.URL.Query() {
		params[k] = v
	}
	if body, _ := decodeObject(c, false); body != nil {
		for k, v := range body {
			if params.Get(k) == "" {
				params.Set(k, fmt.Sprint(v))
			}
		}
	}
	return params
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
