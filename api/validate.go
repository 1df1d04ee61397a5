package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Validation of everything a client sends, in one place (a trigger's values in
// orchestrator.Trigger.Validate). Each check returns a *orchestrator.FieldError naming the
// field, so the answer says what to fix.

var (
	// runIDPattern accepts run IDs (ULIDs) and other IDs a store may hand out.
	runIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	// idempotencyKeyPattern bounds Idempotency-Key headers.
	idempotencyKeyPattern = regexp.MustCompile(`^[\x21-\x7e]{1,200}$`)
)

// Limits on the lock routes' values (a trigger's are orchestrator.Trigger.Validate's).
const (
	maxName   = 256 // holder, by
	maxReason = 1024
)

// pathParam returns a path parameter unescaped. chi routes on the escaped path, so "%2F" and
// "%2e%2e" arrive here and are judged like the characters they stand for.
func pathParam(raw, field string) (string, error) {
	v, err := url.PathUnescape(raw)
	if err != nil {
		return "", fieldErr(field, "not a valid path segment")
	}
	return v, nil
}

// validPipelineName checks a {name} path parameter.
func validPipelineName(raw string) (string, error) {
	name, err := pathParam(raw, "name")
	if err != nil {
		return "", err
	}
	if !config.PipelineNamePattern.MatchString(name) {
		return "", fieldErr("name", "a pipeline name is 1-63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit")
	}
	return name, nil
}

// validRunID checks an {id} path parameter.
func validRunID(raw string) (string, error) {
	id, err := pathParam(raw, "id")
	if err != nil {
		return "", err
	}
	if !runIDPattern.MatchString(id) {
		return "", fieldErr("id", "not a run ID")
	}
	return id, nil
}

// validLockKey checks a {key} path parameter with orchestrator.CheckLockKey, the CLI's rule too.
func validLockKey(raw string) (string, error) {
	key, err := pathParam(raw, "key")
	if err != nil {
		return "", err
	}
	var ke *orchestrator.LockKeyError
	if err := orchestrator.CheckLockKey(key); errors.As(err, &ke) {
		return "", fieldErr("key", "%s", ke.Reason)
	}
	return key, nil
}

// decodeTrigger decodes the body of POST /v1/pipelines/{name}/runs (triggerBody: a field
// the server sets is refused as unknown) and validates the trigger it asks for
// (orchestrator.Trigger.Validate). Every problem is in one answer, as FieldErrors: each field
// of a wrong type, each unknown field, and each value Validate refuses among the others. The
// engine checks a body without problems against the pipeline (required values, the resolved
// image tag, versions) on top.
func decodeTrigger(r *http.Request) (triggerBody, error) {
	var b triggerBody
	obj, err := readJSONObject(r)
	if err != nil {
		return triggerBody{}, err
	}
	es := decodeFields(obj, true, b.fields()...)
	wrong := map[string]bool{}
	for _, e := range es {
		wrong[e.Field] = true
	}
	for _, e := range orchestrator.AsFieldErrors(b.trigger().Validate()) {
		if !wrong[e.Field] && !(strings.HasPrefix(e.Field, "params") && wrong["params"]) {
			es = append(es, e)
		}
	}
	return b, es.Err()
}

// readJSONObject reads a request body that must be one JSON object (readJSON, decodeObject)
// and returns its members.
func readJSONObject(r *http.Request) (map[string]json.RawMessage, error) {
	body, err := readJSON(r)
	if err != nil {
		return nil, err
	}
	return decodeObject(body, nameRequestBody)
}

// validIdempotencyKey checks the Idempotency-Key header ("" when absent).
func validIdempotencyKey(v string) error {
	if v != "" && !idempotencyKeyPattern.MatchString(v) {
		return fieldErr("Idempotency-Key", "1-200 printable ASCII characters without spaces")
	}
	return nil
}

// listQuery is GET /v1/runs's query: pipeline, status (repeated or comma-separated), limit,
// cursor.
func validListQuery(q url.Values) (runs.Filter, error) {
	var f runs.Filter
	if p := q.Get("pipeline"); p != "" {
		if !config.PipelineNamePattern.MatchString(p) {
			return f, fieldErr("pipeline", "not a pipeline name")
		}
		f.Pipeline = p
	}
	for _, v := range q["status"] {
		for _, s := range strings.Split(v, ",") {
			st := runs.Status(strings.TrimSpace(s))
			if !st.Valid() {
				return f, fieldErr("status", "unknown status %q; one of %s", truncate(string(st), 32), statusList())
			}
			f.Status = append(f.Status, st)
		}
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > runs.MaxLimit {
			return f, fieldErr("limit", "a number from 1 to %d", runs.MaxLimit)
		}
		f.Limit = n
	}
	if c := q.Get("cursor"); c != "" {
		if len(c) > 512 {
			return f, fieldErr("cursor", "not a cursor from a previous page")
		}
		f.Cursor = c
	}
	return f, nil
}

func statusList() string {
	names := make([]string, len(runs.Statuses))
	for i, s := range runs.Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// planQuery is GET /v1/pipelines/{name}/plan's query: build, image_tag, commit, app_version,
// param=KEY=VALUE (repeated) and rollback=true, the same values a trigger body carries.
func validPlanQuery(q url.Values) (orchestrator.Trigger, error) {
	b := orchestrator.Trigger{Build: q.Get("build"), ImageTag: q.Get("image_tag"), Commit: q.Get("commit"), AppVersion: q.Get("app_version"),
		Rollback: q.Get("rollback") == "true"}
	for _, kv := range q["param"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return orchestrator.Trigger{}, fieldErr("param", "write param=KEY=VALUE")
		}
		if b.Params == nil {
			b.Params = map[string]string{}
		}
		b.Params[k] = v
	}
	return b, b.Validate()
}

// forceBody is the body of POST /v1/locks/{key}/release.
type forceBody struct {
	// Fence or Holder: what the operator saw, exactly one.
	Fence  int64  `json:"fence"`
	Holder string `json:"holder"`
	Reason string `json:"reason"`
	// By names the operator for the audit log (optional; the token's role is always recorded).
	By string `json:"by"`
}

func validForce(b forceBody) error {
	switch {
	case b.Fence < 0:
		return fieldErr("fence", "a fence is a positive number")
	case b.Fence == 0 && b.Holder == "":
		return fieldErr("fence", "name the fence or the holder you saw (GET /v1/locks), so a newer lease is not removed by mistake")
	case b.Fence != 0 && b.Holder != "":
		return fieldErr("holder", "name the fence or the holder you saw, not both")
	case strings.TrimSpace(b.Reason) == "":
		return fieldErr("reason", "a forced release needs a reason for the audit log")
	}
	if err := orchestrator.CheckText("holder", b.Holder, maxName); err != nil {
		return err
	}
	if err := orchestrator.CheckText("reason", b.Reason, maxReason); err != nil {
		return err
	}
	return orchestrator.CheckText("by", b.By, maxName)
}

// freezeBody is the body of POST /v1/locks/{key}/freeze: a message and either an absolute
// expiry (until, RFC 3339) or a duration from now (for, e.g. "30m").
type freezeBody struct {
	Message string    `json:"message"`
	Until   time.Time `json:"until"`
	For     string    `json:"for"`
	By      string    `json:"by"`
}

// validFreeze checks a freeze and returns when it ends.
func validFreeze(b freezeBody, now time.Time) (time.Time, error) {
	if strings.TrimSpace(b.Message) == "" {
		return time.Time{}, fieldErr("message", "a freeze needs a message saying why")
	}
	if err := orchestrator.CheckText("message", b.Message, maxReason); err != nil {
		return time.Time{}, err
	}
	if err := orchestrator.CheckText("by", b.By, maxName); err != nil {
		return time.Time{}, err
	}
	until := b.Until
	switch {
	case b.For != "" && !until.IsZero():
		return time.Time{}, fieldErr("for", "give until or for, not both")
	case b.For != "":
		d, err := time.ParseDuration(b.For)
		if err != nil || d <= 0 {
			return time.Time{}, fieldErr("for", "a positive duration such as \"30m\" or \"2h\"")
		}
		until = now.Add(d)
	case until.IsZero():
		return time.Time{}, fieldErr("until", "give until (RFC 3339) or for (a duration such as \"30m\")")
	}
	if !until.After(now) {
		return time.Time{}, fieldErr("until", "must be in the future")
	}
	if until.Sub(now) > orchestrator.MaxFreeze {
		return time.Time{}, fieldErr("until", "at most %s from now", orchestrator.MaxFreeze)
	}
	return until, nil
}

// unfreezeBody is the optional body of DELETE /v1/locks/{key}/freeze.
type unfreezeBody struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
}

func validUnfreeze(b unfreezeBody) error {
	if err := orchestrator.CheckText("reason", b.Reason, maxReason); err != nil {
		return err
	}
	return orchestrator.CheckText("by", b.By, maxName)
}

// validLastEventID checks the SSE Last-Event-ID header (an event Seq; "" means from the start).
func validLastEventID(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fieldErr("Last-Event-ID", "an event sequence number")
	}
	return n, nil
}

// validAuditLimit checks GET /v1/locks/audit's limit.
func validAuditLimit(v string) (int, error) {
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, fieldErr("limit", "a number from 1 to 1000")
	}
	return n, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s…", s[:n])
}
