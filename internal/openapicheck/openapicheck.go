// Package openapicheck checks HTTP traffic against an OpenAPI 3 description, for the tests of
// the outside clients and their fakes (coolify, github, gitlab): a RoundTripper validates
// every request and its answer with kin-openapi's openapi3filter and reports each violation
// with t.Errorf. Where the real server differs from its description, the differences are
// declared once per description, each with its reason: edits to the loaded document
// (Patch), answers the server gives on routes whose description does not list them (a 401, a
// rate limit, a 5xx fault: Undocumented) and requests it answers that the description has
// no operation for (NotDescribed).
package openapicheck

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Undocumented is an answer the real server gives that the description does not list for the
// route: Status on every route (Route "") or on one template. Its body must still be JSON.
type Undocumented struct {
	Method, Route string
	Status        int
	// Text says the body is plain text (a proxy's or a throttle's), not a JSON object.
	Text   bool
	Reason string
}

// Patch is an edit to the loaded description where the real server's answers differ from
// its schemas, so that validation accepts what the server sends.
type Patch struct {
	Reason string
	Apply  func(*openapi3.T) error
}

// NotDescribed is a request the real server answers that the description has no operation
// for (Route is a template like /applications/{uuid}/start, matched after Prefix is cut): it
// and its answer are not validated.
type NotDescribed struct {
	Method, Route string
	Reason        string
}

// Options describe how traffic maps onto the description.
type Options struct {
	// Prefix is cut from request paths before they are matched ("/api/v4", "/api/v3").
	Prefix string
	// Patches are applied, in order, to the description once it is loaded and valid.
	Patches []Patch
	// Undocumented answers, each with its reason.
	Undocumented []Undocumented
	// NotDescribed requests, each with its reason.
	NotDescribed []NotDescribed
	// Authenticate checks a request's credentials against the operation's security
	// requirement; nil accepts every request.
	Authenticate openapi3filter.AuthenticationFunc
	// ErrorMessage, when set, is the string field every error answer (status 400 and above,
	// documented or not, unless Text) must carry in a JSON object.
	ErrorMessage string
}

// Validator validates traffic against one description. Create it with [Load].
type Validator struct {
	doc  *openapi3.T
	opts Options
	rt   routers.Router
}

var (
	mu     sync.Mutex
	loaded = map[string]*Validator{}
)

// specHost is the host requests are matched as if sent to.
const specHost = "spec.test"

// Load reads the description at path (once per test binary and prefix) and returns its validator.
func Load(t testing.TB, path string, opts Options) *Validator {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := path + "\x00" + opts.Prefix
	if v, ok := loaded[key]; ok {
		return v
	}
	doc, err := openapi3.NewLoader().LoadFromFile(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate %s: %v", path, err)
	}
	for _, p := range opts.Patches {
		if err := p.Apply(doc); err != nil {
			t.Fatalf("patch %s (%s): %v", path, p.Reason, err)
		}
	}
	doc.Servers = openapi3.Servers{{URL: "http://" + specHost}}
	rt, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("router for %s: %v", path, err)
	}
	v := &Validator{doc: doc, opts: opts, rt: rt}
	loaded[key] = v
	return v
}

type exemptKey struct{}

// ExpectInvalidRequest marks requests made under ctx as breaking the description on purpose,
// for the reason given (a test of how the server answers a bad request): only the answer is
// validated.
func ExpectInvalidRequest(ctx context.Context, reason string) context.Context {
	return context.WithValue(ctx, exemptKey{}, reason)
}

// Transport returns a RoundTripper that sends through next (nil: http.DefaultTransport) and
// reports every violation of a request or its answer with t.Errorf.
func (v *Validator) Transport(t testing.TB, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{v: v, t: t, next: next}
}

type transport struct {
	v    *Validator
	t    testing.TB
	next http.RoundTripper
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	in := tr.validateRequest(req, body)
	resp, err := tr.next.RoundTrip(req)
	if err != nil || in == nil {
		return resp, err
	}
	respBody, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if rerr == nil {
		tr.validateResponse(in, resp, respBody)
	}
	return resp, nil
}

func (tr *transport) validateRequest(req *http.Request, body []byte) *openapi3filter.RequestValidationInput {
	clone := req.Clone(req.Context())
	clone.Body = io.NopCloser(bytes.NewReader(body))
	clone.URL.Scheme, clone.URL.Host, clone.Host = "http", specHost, specHost
	clone.URL.Path = strings.TrimPrefix(req.URL.Path, tr.v.opts.Prefix)
	clone.URL.RawPath = strings.TrimPrefix(req.URL.RawPath, tr.v.opts.Prefix)
	route, params, err := tr.v.rt.FindRoute(clone)
	if err != nil {
		for _, n := range tr.v.opts.NotDescribed {
			if n.Method == req.Method && matchTemplate(n.Route, clone.URL.Path) {
				return nil
			}
		}
		tr.t.Errorf("openapi: %s %s: no such operation: %v", req.Method, req.URL.Path, err)
		return nil
	}
	auth := tr.v.opts.Authenticate
	if auth == nil {
		auth = openapi3filter.NoopAuthenticationFunc
	}
	in := &openapi3filter.RequestValidationInput{Request: clone, PathParams: params, Route: route,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, AuthenticationFunc: auth}}
	if reason, _ := req.Context().Value(exemptKey{}).(string); reason == "" {
		if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
			tr.t.Errorf("openapi: request %s %s breaks the description: %v", req.Method, req.URL.Path, err)
		}
	}
	in.Request.Body = io.NopCloser(bytes.NewReader(body))
	return in
}

func (tr *transport) validateResponse(in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte) {
	method, tmpl := in.Request.Method, in.Route.Path
	if in.Route.Operation.Responses.Status(resp.StatusCode) == nil {
		for _, u := range tr.v.opts.Undocumented {
			if u.Status == resp.StatusCode && (u.Method == "" || u.Method == method) && (u.Route == "" || u.Route == tmpl) {
				if !u.Text {
					tr.checkErrorBody(in.Request, resp.StatusCode, body)
				}
				return
			}
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)), Options: in.Options}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		tr.t.Errorf("openapi: answer %d to %s %s breaks the description: %v\nbody: %.600s", resp.StatusCode, method, in.Request.URL.Path, err, body)
	}
	if resp.StatusCode >= 400 && tr.v.opts.ErrorMessage != "" {
		tr.checkErrorBody(in.Request, resp.StatusCode, body)
	}
}

// checkErrorBody reports an error answer that is not a JSON object, or that lacks the
// string field Options.ErrorMessage names.
func (tr *transport) checkErrorBody(req *http.Request, status int, body []byte) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		tr.t.Errorf("openapi: %d answer to %s %s is not a JSON object: %.200s", status, req.Method, req.URL.Path, body)
		return
	}
	if f := tr.v.opts.ErrorMessage; f != "" {
		if _, ok := m[f].(string); !ok {
			tr.t.Errorf("openapi: %d answer to %s %s has no string %q: %.200s", status, req.Method, req.URL.Path, f, body)
		}
	}
}

// matchTemplate reports whether path matches a template like /applications/{uuid}/start.
func matchTemplate(tmpl, path string) bool {
	ts, ps := strings.Split(tmpl, "/"), strings.Split(path, "/")
	if len(ts) != len(ps) {
		return false
	}
	for i := range ts {
		if !strings.HasPrefix(ts[i], "{") && ts[i] != ps[i] {
			return false
		}
	}
	return true
}
