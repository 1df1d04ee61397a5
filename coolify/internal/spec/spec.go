// Package spec checks HTTP traffic to Coolify against Coolify's official OpenAPI spec
// (coolify/testdata/openapi.yaml), for the tests of coolify and coolify/coolifytest: every
// request the client sends and every answer the fake gives is validated with kin-openapi's
// openapi3filter, except where the real server is known to differ from its spec
// (docs/outside-systems.md, "Differences from the Coolify spec"). Those differences are
// listed in this file, in [specPatches], [undocumentedStatuses] and [notInSpec], each with its
// reason (citing the section of docs/outside-systems.md that describes the server), and
// nowhere else.
package spec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// specPatches are the places where the server's answers differ from the spec's schemas. Each
// edits the loaded document so that validation accepts what the real server sends.
var specPatches = []struct {
	reason string
	apply  func(*openapi3.T) error
}{
	{
		reason: "the spec marks fields `nullable: true`, an OpenAPI 3.0 keyword that 3.1 ignores; " +
			"the server sends null for them (e.g. docker_registry_image_tag, fqdn, comment)",
		apply: nullableToTypeNull,
	},
	{
		reason: `docs/outside-systems.md, "Applications and the image tag": image applications have ` +
			`build_pack "dockerimage", missing from the spec's enum`,
		apply: func(doc *openapi3.T) error {
			s, err := property(doc, "Application", "build_pack")
			if err == nil {
				s.Enum = append(s.Enum, "dockerimage")
			}
			return err
		},
	},
	{
		reason: `docs/outside-systems.md, "The env PATCH wipes what it omits": the env PATCH stores null ` +
			"in is_multiline/is_shown_once when they are omitted, and null in value when it is omitted " +
			"(issue #9977); the spec types them non-null",
		apply: func(doc *openapi3.T) error {
			for _, name := range []string{"is_multiline", "is_shown_once", "value", "real_value"} {
				s, err := property(doc, "EnvironmentVariable", name)
				if err != nil {
					return err
				}
				addNull(s)
			}
			return nil
		},
	},
	{
		reason: `docs/outside-systems.md, "Applications and the image tag": PATCH /applications/{uuid} ` +
			"accepts docker_registry_image_tag null (nullable in the server's validation) and stores null; " +
			"the spec types it a non-null string",
		apply: func(doc *openapi3.T) error {
			op := doc.Paths.Find("/applications/{uuid}")
			if op == nil || op.Patch == nil || op.Patch.RequestBody == nil {
				return fmt.Errorf("no PATCH /applications/{uuid} body")
			}
			s := op.Patch.RequestBody.Value.Content["application/json"].Schema.Value.Properties["docker_registry_image_tag"]
			if s == nil || s.Value == nil {
				return fmt.Errorf("no docker_registry_image_tag in PATCH /applications/{uuid}")
			}
			addNull(s.Value)
			return nil
		},
	},
	{
		reason: `docs/outside-systems.md, "Deployment statuses and the queue": GET ` +
			"/deployments/applications/{uuid} answers {count, deployments: [deployment]}, not the array " +
			"of Application the spec says",
		apply: func(doc *openapi3.T) error {
			op := doc.Paths.Find("/deployments/applications/{uuid}")
			if op == nil || op.Get == nil {
				return fmt.Errorf("no GET /deployments/applications/{uuid}")
			}
			queue := doc.Components.Schemas["ApplicationDeploymentQueue"]
			op.Get.Responses.Status(200).Value.Content["application/json"].Schema = openapi3.NewSchemaRef("",
				openapi3.NewObjectSchema().
					WithProperty("count", openapi3.NewIntegerSchema()).
					WithPropertyRef("deployments", &openapi3.SchemaRef{Value: openapi3.NewArraySchema().WithItems(queue.Value)}).
					WithRequired([]string{"count", "deployments"}))
			return nil
		},
	},
	{
		reason: `docs/outside-systems.md, "Deployment statuses and the queue": GET /deployments sorts ` +
			"its rows with Laravel's Collection::sortBy, which keeps each row's " +
			"key: when that reorders them (a row updated after a newer one was created) the answer is a " +
			"JSON object of rows keyed by position, not the array the spec says",
		apply: func(doc *openapi3.T) error {
			op := doc.Paths.Find("/deployments")
			if op == nil || op.Get == nil {
				return fmt.Errorf("no GET /deployments")
			}
			queue := doc.Components.Schemas["ApplicationDeploymentQueue"]
			byPosition := openapi3.NewObjectSchema()
			byPosition.AdditionalProperties = openapi3.AdditionalProperties{Schema: queue}
			op.Get.Responses.Status(200).Value.Content["application/json"].Schema = openapi3.NewSchemaRef("",
				openapi3.NewOneOfSchema(openapi3.NewArraySchema().WithItems(queue.Value), byPosition))
			return nil
		},
	},
}

// undocumentedStatuses are answers the real server gives that the spec does not list for the
// route. Route "" means any route. Their bodies are still checked to be JSON with a "message".
var undocumentedStatuses = []struct {
	method, route string
	status        int
	reason        string
}{
	{"", "", http.StatusForbidden, `docs/outside-systems.md, "Coolify tokens and abilities": a token without the route's ability gets 403 (the spec documents 403 on one route)`},
	{"", "", http.StatusTooManyRequests, `docs/outside-systems.md, "Coolify rate limit": the throttle answers 429 on every route`},
	{"", "", http.StatusInternalServerError, "server errors (and faults the fake injects on purpose)"},
	{"", "", http.StatusBadGateway, "a proxy in front of Coolify (faults the fake injects on purpose)"},
	{"", "", http.StatusServiceUnavailable, "maintenance mode or a proxy (faults the fake injects on purpose)"},
	{"", "", http.StatusGatewayTimeout, "a proxy in front of Coolify (faults the fake injects on purpose)"},
	{"", "", http.StatusUnprocessableEntity, `docs/outside-systems.md, "Coolify errors": 422 validation errors on routes whose spec omits them (app PATCH, app env writes)`},
	{"POST", "/applications/{uuid}/envs", http.StatusConflict, `docs/outside-systems.md, "The env PATCH wipes what it omits": 409 when the key exists in that scope`},
	{"POST", "/services/{uuid}/envs", http.StatusConflict, `docs/outside-systems.md, "Service env vars": 409 when the key exists`},
	{"POST", "/deploy", http.StatusNotFound, `docs/outside-systems.md, "Deploy and its dedup": 404 "No resources found."`},
	{"GET", "/deployments/applications/{uuid}", http.StatusNotFound, "unknown application: 404 \"Application not found.\""},
	{"POST", "/deployments/{uuid}/cancel", http.StatusInternalServerError, `docs/outside-systems.md, "Cancel": before 4.3.7 an API cancel answered 500`},
}

// notInSpec are requests the real server answers that the spec has no operation for.
var notInSpec = []struct {
	method, route string
	reason        string
}{
	{"GET", "/deploy", `docs/outside-systems.md, "Deploy and its dedup": GET on action routes answers 405 since v4.2.0`},
	{"GET", "/applications/{uuid}/start", `docs/outside-systems.md, "Deploy and its dedup": GET on action routes answers 405`},
	{"GET", "/applications/{uuid}/restart", `docs/outside-systems.md, "Deploy and its dedup": GET on action routes answers 405`},
	{"GET", "/applications/{uuid}/stop", `docs/outside-systems.md, "Deploy and its dedup": GET on action routes answers 405`},
	{"GET", "/servers/{uuid}/validate", `docs/outside-systems.md, "Coolify tokens and abilities": the GET answers 405 past the write ability check (routes/api.php; the ability probe)`},
}

// Validator validates requests and responses against the spec. Create it with [Load].
type Validator struct {
	doc *openapi3.T
	mu  sync.Mutex
	rt  routers.Router
}

var (
	loadOnce sync.Once
	loaded   *Validator
	loadErr  error
)

// Load reads and patches the spec (once per test binary) and returns the validator.
func Load(t testing.TB) *Validator {
	t.Helper()
	loadOnce.Do(func() {
		var doc *openapi3.T
		if doc, loadErr = load(); loadErr == nil {
			loaded = &Validator{doc: doc}
			// Build the router now, outside any request's timeout.
			_, loadErr = loaded.router()
		}
	})
	if loadErr != nil {
		t.Fatalf("load coolify openapi spec: %v", loadErr)
	}
	return loaded
}

func load() (*openapi3.T, error) {
	// /health answers text/html "OK"; kin-openapi has no decoder for it by default.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "openapi.yaml")
	doc, err := openapi3.NewLoader().LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("validate %s: %w", path, err)
	}
	for _, p := range specPatches {
		if err := p.apply(doc); err != nil {
			return nil, fmt.Errorf("patch spec (%s): %w", p.reason, err)
		}
	}
	return doc, nil
}

// specHost is the server the router is built for; requests are matched as if sent to it, so
// one router serves every test server's random port.
const specHost = "coolify.test"

func (v *Validator) router() (routers.Router, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.rt != nil {
		return v.rt, nil
	}
	doc := *v.doc
	doc.Servers = openapi3.Servers{{URL: "http://" + specHost + "/api/v1"}}
	r, err := gorillamux.NewRouter(&doc)
	if err != nil {
		return nil, err
	}
	v.rt = r
	return r, nil
}

type exemptKey struct{}

// ExpectInvalidRequest marks requests made under ctx as deliberately breaking the spec (a test
// of how the server answers a bad request): the request is not validated, the answer still is.
func ExpectInvalidRequest(ctx context.Context, reason string) context.Context {
	return context.WithValue(ctx, exemptKey{}, reason)
}

// Transport returns a RoundTripper that sends through next (nil: http.DefaultTransport) and
// reports every spec violation of a request or its response with t.Errorf.
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
	var reqBody []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	in, skip := tr.validateRequest(req, reqBody)
	resp, err := tr.next.RoundTrip(req)
	if err != nil || in == nil {
		return resp, err
	}
	respBody, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if rerr != nil {
		return resp, nil // a dropped connection mid-body: the client sees it
	}
	if !skip {
		tr.validateResponse(in, resp, respBody)
	}
	return resp, nil
}

// validateRequest checks the request and returns the input for validating its response.
func (tr *transport) validateRequest(req *http.Request, body []byte) (*openapi3filter.RequestValidationInput, bool) {
	rt, err := tr.v.router()
	if err != nil {
		tr.t.Errorf("spec router: %v", err)
		return nil, true
	}
	rel := strings.TrimPrefix(req.URL.Path, "/api/v1")
	clone := req.Clone(req.Context())
	clone.Body = io.NopCloser(bytes.NewReader(body))
	clone.URL.Scheme, clone.URL.Host, clone.Host = "http", specHost, specHost
	route, params, err := rt.FindRoute(clone)
	if err != nil {
		for _, n := range notInSpec {
			if n.method == req.Method && matchTemplate(n.route, rel) {
				return nil, true
			}
		}
		if strings.HasPrefix(req.URL.Path, "/api/health") {
			return nil, true // the unversioned alias of /api/v1/health
		}
		tr.t.Errorf("spec: %s %s: no such operation: %v", req.Method, req.URL.Path, err)
		return nil, true
	}
	in := &openapi3filter.RequestValidationInput{
		Request: clone, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			AuthenticationFunc: func(_ context.Context, ai *openapi3filter.AuthenticationInput) error {
				if !strings.HasPrefix(ai.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
					return fmt.Errorf("no bearer token")
				}
				return nil
			},
		},
	}
	if reason, ok := req.Context().Value(exemptKey{}).(string); !ok || reason == "" {
		if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
			tr.t.Errorf("spec: request %s %s breaks the spec: %v", req.Method, req.URL.Path, err)
		}
	}
	in.Request.Body = io.NopCloser(bytes.NewReader(body))
	return in, false
}

func (tr *transport) validateResponse(in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte) {
	method, tmpl := in.Request.Method, in.Route.Path
	if in.Route.Operation.Responses.Status(resp.StatusCode) == nil {
		for _, u := range undocumentedStatuses {
			if u.status == resp.StatusCode && (u.method == "" || u.method == method) && (u.route == "" || u.route == tmpl) {
				checkErrorBody(tr.t, method, in.Request.URL.Path, resp, body)
				return
			}
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: in.Options,
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		tr.t.Errorf("spec: response %d to %s %s breaks the spec: %v\nbody: %.600s", resp.StatusCode, method, in.Request.URL.Path, err, body)
	}
	if resp.StatusCode >= 400 {
		checkErrorBody(tr.t, method, in.Request.URL.Path, resp, body)
	}
}

// checkErrorBody: error bodies are always JSON with a string "message" (docs/outside-systems.md,
// "Coolify errors").
func checkErrorBody(t testing.TB, method, path string, resp *http.Response, body []byte) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Errorf("spec: %d answer to %s %s is not a JSON object: %.200s", resp.StatusCode, method, path, body)
		return
	}
	if _, ok := m["message"].(string); !ok {
		t.Errorf("spec: %d answer to %s %s has no string message: %.200s", resp.StatusCode, method, path, body)
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

func property(doc *openapi3.T, schema, prop string) (*openapi3.Schema, error) {
	s := doc.Components.Schemas[schema]
	if s == nil || s.Value == nil {
		return nil, fmt.Errorf("no schema %s", schema)
	}
	p := s.Value.Properties[prop]
	if p == nil || p.Value == nil {
		return nil, fmt.Errorf("no property %s.%s", schema, prop)
	}
	return p.Value, nil
}

func addNull(s *openapi3.Schema) {
	if s.Type == nil || s.Type.Includes("null") {
		return
	}
	t := append(openapi3.Types{}, *s.Type...)
	t = append(t, "null")
	s.Type = &t
}

// nullableToTypeNull turns every `nullable: true` schema in the document into a type list
// that includes "null", which is what the spec's authors meant.
func nullableToTypeNull(doc *openapi3.T) error {
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(r *openapi3.SchemaRef) {
		if r == nil || r.Value == nil || seen[r.Value] {
			return
		}
		s := r.Value
		seen[s] = true
		if s.Nullable {
			addNull(s)
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		if s.AdditionalProperties.Schema != nil {
			walk(s.AdditionalProperties.Schema)
		}
		for _, l := range [][]*openapi3.SchemaRef{s.AllOf, s.OneOf, s.AnyOf} {
			for _, x := range l {
				walk(x)
			}
		}
	}
	for _, s := range doc.Components.Schemas {
		walk(s)
	}
	for _, r := range doc.Components.Responses {
		if r.Value != nil {
			for _, mt := range r.Value.Content {
				walk(mt.Schema)
			}
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				for _, mt := range op.RequestBody.Value.Content {
					walk(mt.Schema)
				}
			}
			for _, p := range op.Parameters {
				if p.Value != nil {
					walk(p.Value.Schema)
				}
			}
			for _, r := range op.Responses.Map() {
				if r.Value != nil {
					for _, mt := range r.Value.Content {
						walk(mt.Schema)
					}
				}
			}
		}
	}
	return nil
}
