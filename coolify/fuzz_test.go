package coolify_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/internal/cannedhttp"
)

// The FuzzDecodeCoolify* targets feed arbitrary answers (status and body) to the client's
// real decoding path, through an http.RoundTripper that answers every request with them:
// no network, no retries. Each call must return without panicking or hanging, and every
// refusal must be a clear error: non-empty, valid UTF-8, naming the operation, and an
// *APIError carrying the status for a non-2xx answer.
//
// Run one for a while with e.g.
//
//	go test ./coolify/ -run '^$' -fuzz FuzzDecodeCoolifyApplication -fuzztime 30s

// fuzzStatuses are the statuses a fuzzed answer can have (chosen by index).
var fuzzStatuses = []int{200, 201, 204, 400, 401, 403, 404, 409, 422, 429, 500, 502, 503}

// fuzzClient is a client whose every request gets the answer (status picked by sel).
func fuzzClient(sel uint8, body []byte) (*coolify.Client, int) {
	status := fuzzStatuses[int(sel)%len(fuzzStatuses)]
	return fuzzClientOn(cannedhttp.Transport{Status: status, Body: body}), status
}

// fuzzClientOn is a client sending through rt, with no retries and 1ms polls.
func fuzzClientOn(rt http.RoundTripper) *coolify.Client {
	return coolify.New("http://coolify.invalid", "1|fuzz-token",
		coolify.WithHTTPClient(&http.Client{Transport: rt}),
		coolify.WithRetry(coolify.RetryPolicy{MaxRetries: 0, MinWait: time.Millisecond, MaxWait: time.Millisecond, MaxRetryAfter: time.Millisecond}),
		coolify.WithPollInterval(time.Millisecond))
}

// roundTripFunc is a function as an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// checkErr asserts that err, from an operation named op on an answer with status, is clear.
func checkErr(t *testing.T, op string, status int, err error) {
	t.Helper()
	if err == nil {
		if status >= 300 {
			t.Fatalf("%s: status %d answered no error", op, status)
		}
		return
	}
	msg := err.Error()
	if msg == "" || len(msg) > 64<<10 {
		t.Fatalf("%s: unclear error of %d bytes: %.200q", op, len(msg), msg)
	}
	if !strings.Contains(msg, op) {
		t.Fatalf("%s: error %q does not name the operation", op, msg)
	}
	if status >= 300 {
		var ae *coolify.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("%s: status %d gave %T %q, want an *APIError", op, status, err, msg)
		}
		if ae.StatusCode != status {
			t.Fatalf("%s: APIError status %d, want %d", op, ae.StatusCode, status)
		}
	}
	if status == http.StatusNotFound && !errors.Is(err, coolify.ErrNotFound) {
		t.Fatalf("%s: 404 does not match ErrNotFound: %q", op, msg)
	}
}

// fuzzCtx is a call's context: no answer justifies waiting anywhere near 5s (retries are
// off, polls and deadlines are milliseconds), so a call still running then has hung, which
// the check registered here reports.
func fuzzCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(func() {
		if ctx.Err() != nil {
			t.Errorf("a call ran until its 5s context ended: it hung")
		}
		cancel()
	})
	return ctx
}

func FuzzDecodeCoolifyApplication(f *testing.F) {
	f.Add(uint8(0), []byte(`{"id":1,"uuid":"abc","name":"api","status":"running:healthy","docker_registry_image_name":"ghcr.io/a/api","docker_registry_image_tag":"v1","fqdn":"https://a.test,https://b.test"}`))
	f.Add(uint8(0), []byte(`{"id":"7","uuid":"abc","docker_registry_image_tag":null,"fqdn":null,"health_check_enabled":1}`))
	f.Add(uint8(0), []byte(`[]`))
	f.Add(uint8(0), []byte(`{"id":1e400}`))
	f.Add(uint8(6), []byte(`{"message":"Application not found."}`))
	f.Add(uint8(8), []byte(`{"message":"Validation failed.","errors":{"docker_registry_image_tag":["The tag is invalid."],"x":"plain"}}`))
	f.Add(uint8(10), []byte(`<html>502 Bad Gateway</html>`))
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		c, status := fuzzClient(sel, body)
		app, err := c.GetApplication(fuzzCtx(t), "abc")
		checkErr(t, "get application abc", status, err)
		if err == nil {
			_ = app.URLs()
			_, _ = app.Running(), app.Healthy()
		}
	})
}

func FuzzDecodeCoolifyDeployment(f *testing.F) {
	f.Add(uint8(0), []byte(`{"id":3,"deployment_uuid":"d1","application_id":"1","status":"finished","commit":"HEAD","created_at":"2026-01-02T03:04:05.000000Z","updated_at":"2026-01-02 03:04:09"}`))
	f.Add(uint8(0), []byte(`{"deployment_uuid":"d1","status":"cancelled-by-user","created_at":12}`))
	f.Add(uint8(0), []byte(`{"status":null}`))
	f.Add(uint8(6), []byte(`{"message":"Deployment not found."}`))
	f.Add(uint8(12), []byte(``))
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		c, status := fuzzClient(sel, body)
		d, err := c.GetDeployment(fuzzCtx(t), "d1")
		checkErr(t, "d1", status, err)
		if err == nil {
			_, _ = d.Status.Terminal(), d.Status.Active()
		}
		// The waiter on the same answers ends too: terminal, or its 5ms deadline cancels.
		_, _ = c.WaitDeployment(fuzzCtx(t), "d1", 5*time.Millisecond)
	})
}

// FuzzDecodeCoolifyActiveDeployments answers the application's deployment pages with page
// and GET /deployments with list: the first read pages and may learn the application's id
// from a row, the second then reads list.
func FuzzDecodeCoolifyActiveDeployments(f *testing.F) {
	row := `{"id":3,"deployment_uuid":"d1","application_id":"1","status":"in_progress"}`
	f.Add(uint8(0), []byte(`{"count":1,"deployments":[`+row+`]}`), []byte(`[`+row+`]`))
	f.Add(uint8(0), []byte(`{"count":1,"deployments":[`+row+`]}`),
		[]byte(`{"1":{"id":4,"deployment_uuid":"d2","application_id":1,"status":"queued"},"0":{"id":5,"deployment_uuid":"d3","application_id":"2","status":"queued"}}`))
	f.Add(uint8(0), []byte(`{"count":1,"deployments":[`+row+`]}`), []byte(`{"0":`))
	f.Add(uint8(0), []byte(`{"count":0,"deployments":[]}`), []byte(`null`))
	f.Add(uint8(6), []byte(`{"message":"Application not found"}`), []byte(`{"message":"Not found."}`))
	f.Fuzz(func(t *testing.T, sel uint8, page, list []byte) {
		status := fuzzStatuses[int(sel)%len(fuzzStatuses)]
		pages, lists := cannedhttp.Transport{Status: status, Body: page}, cannedhttp.Transport{Status: status, Body: list}
		c := fuzzClientOn(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasPrefix(r.URL.Path, "/api/v1/deployments/applications/") {
				return pages.RoundTrip(r)
			}
			return lists.RoundTrip(r)
		}))
		for range 2 {
			ds, err := c.ActiveDeployments(fuzzCtx(t), "abc")
			checkErr(t, "active deployments", status, err)
			for _, d := range ds {
				if !d.Status.Active() {
					t.Fatalf("active deployments: got %q among them", d.Status)
				}
			}
		}
	})
}

func FuzzDecodeCoolifyEnvVars(f *testing.F) {
	f.Add(uint8(0), []byte(`[{"uuid":"e1","key":"A","value":"1","is_preview":false,"is_buildtime":true,"is_runtime":true,"is_literal":false,"is_multiline":null,"is_shown_once":null,"comment":null},{"uuid":"e2","key":"A","value":"1","is_preview":true}]`))
	f.Add(uint8(0), []byte(`[{"key":"HIDDEN"}]`))
	f.Add(uint8(0), []byte(`[{"key":1}]`))
	f.Add(uint8(0), []byte(`{"data":[]}`))
	f.Add(uint8(0), []byte(`null`))
	f.Add(uint8(5), []byte(`{"message":"You are not allowed to access sensitive data."}`))
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		c, status := fuzzClient(sel, body)
		envs, err := c.ListEnvs(fuzzCtx(t), coolify.AppRef("abc"))
		checkErr(t, "list envs of application abc", status, err)
		for _, e := range envs {
			if e.IsPreview {
				t.Fatalf("a preview row was returned: %v", e)
			}
			// Formatting an env var never shows its value.
			if e.Value != "" && len(e.Value) > 3 && strings.Contains(e.String(), e.Value) {
				t.Fatalf("String() of %s shows its value", e.Key)
			}
		}
	})
}

func FuzzDecodeCoolifyError(f *testing.F) {
	f.Add(uint8(3), []byte(`{"message":"Deployment dedup","error":"x"}`))
	f.Add(uint8(4), []byte(`{"message":"Unauthenticated."}`))
	f.Add(uint8(5), []byte(`{"message":"Missing ability: deploy"}`))
	f.Add(uint8(8), []byte(`{"message":"Validation failed.","errors":{"uuid":["required"],"tag":"bad","n":7,"o":{"a":1}}}`))
	f.Add(uint8(9), []byte(`{"message":["Too","many"]}`))
	f.Add(uint8(11), []byte("\xff\xfe not json"))
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		sel = 3 + sel%uint8(len(fuzzStatuses)-3) // errors only
		c, status := fuzzClient(sel, body)
		_, err := c.Deploy(fuzzCtx(t), "abc", false)
		checkErr(t, "abc", status, err)
		var ae *coolify.APIError
		if errors.As(err, &ae) {
			_ = ae.MissingPermission()
			if len(ae.Error()) > 64<<10 {
				t.Fatalf("error message of %d bytes", len(ae.Error()))
			}
		}
	})
}
