// Package openapicheck checks HTTP traffic against an OpenAPI 3 description, for the tests of
// the outside clients and their fakes (github, gitlab): a RoundTripper validates every
// request and its answer with kin-openapi's openapi3filter and reports each violation with
// t.Errorf. The answers a server gives on any route without its description listing them (a
// 401, a rate limit, a 5xx fault) are declared once per description, with their reason.
package openapicheck

import (
	"bytes"
	"context"
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

// Options describe how traffic maps onto the description.
type Options struct {
	// Prefix is cut from request paths before they are matched ("/api/v4", "/api/v3").
	Prefix string
	// Undocumented answers, each with its reason.
	Undocumented []Undocumented
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

// ExpectInvalidRequest marks requests made under ctx as breaking the description on purpose
// (a test of how the server answers a bad request): only the answer is validated.
func ExpectInvalidRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, exemptKey{}, true)
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
		tr.t.Errorf("openapi: %s %s: no such operation: %v", req.Method, req.URL.Path, err)
		return nil
	}
	in := &openapi3filter.RequestValidationInput{Request: clone, PathParams: params, Route: route,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true,
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if exempt, _ := req.Context().Value(exemptKey{}).(bool); !exempt {
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
				if !u.Text && !jsonObject(body) {
					tr.t.Errorf("openapi: %d answer to %s %s is not a JSON object: %.200s", resp.StatusCode, method, in.Request.URL.Path, body)
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
}

func jsonObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 1 && b[0] == '{' && b[len(b)-1] == '}'
}
