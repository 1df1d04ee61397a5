// Package flagspec checks HTTP traffic against Flagsmith's own OpenAPI document
// (testdata/openapi.yaml, a verbatim copy of the file committed in Flagsmith/flagsmith; see
// testdata/SOURCE.txt). Tests of package mobile and of the fake mobile/flagsmithtest wrap
// the fake's handler with Middleware, so every request the client sends and every answer
// the fake gives is validated against the real API's shapes.
//
// Where the real server differs from its generated document, the document is patched in
// memory; every such difference is in knownDifferences below, with its reason.
package flagspec

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/deploy-orchestrator/orchestrator/internal/openapicheck"
)

//go:embed testdata/openapi.yaml
var specYAML []byte

// difference is one place where Flagsmith's behaviour differs from its OpenAPI document.
type difference struct {
	what   string
	reason string
	// patch adjusts the loaded document; nil when the difference is handled elsewhere
	// (named in reason).
	patch func(doc *openapi3.T) error
}

// knownDifferences lists, in one place, every way the validation departs from the document.
var knownDifferences = []difference{
	{
		what: `security scheme "Environment API Key" has spaces in its name`,
		reason: "kin-openapi's doc.Validate refuses the identifier, so the document is not validated as a whole; " +
			`routes, requests and responses are still validated one by one (docs/outside-systems.md, "Differences from the Flagsmith spec")`,
	},
	{
		what:   "servers lists only https://api.flagsmith.com",
		reason: "the fake runs on a loopback address; the server list is dropped so routes match any host",
		patch:  func(doc *openapi3.T) error { doc.Servers = nil; return nil },
	},
	{
		what: "paginated lists mark next/previous with nullable: true",
		reason: "the document is OpenAPI 3.1, where nullable is no keyword (kin-openapi ignores it there), yet the " +
			"paginator's schema uses it and the server sends null on the first and last page; every nullable: true " +
			"becomes a type that admits null",
		patch: openapicheck.AdmitNull,
	},
	{
		what: "FeatureStateSerializerBasic.feature_state_value is readOnly",
		reason: "PUT /api/v1/environments/{key}/featurestates/{id}/ takes feature_state_value and stores it by its JSON " +
			`type (the view handles the field itself; docs/outside-systems.md, "Writing on v1 environments"), which is ` +
			"the legacy write path the client uses",
		patch: func(doc *openapi3.T) error {
			p, err := openapicheck.Property(doc, "FeatureStateSerializerBasic", "feature_state_value")
			if err == nil {
				p.ReadOnly = false
			}
			return err
		},
	},
	{
		what: "FeatureStateSerializerWithIdentity.identity is a required object",
		reason: "environment defaults (the only states the orchestrator lists) carry identity: null; the nested " +
			"serializer allows null but drf-spectacular does not say so",
		patch: func(doc *openapi3.T) error {
			s := doc.Components.Schemas["FeatureStateSerializerWithIdentity"]
			if s == nil || s.Value == nil || s.Value.Properties["identity"] == nil {
				return fmt.Errorf("FeatureStateSerializerWithIdentity.identity not found")
			}
			id := s.Value.Properties["identity"]
			s.Value.Properties["identity"] = openapi3.NewSchemaRef("", &openapi3.Schema{
				OneOf: openapi3.SchemaRefs{id, openapi3.NewSchemaRef("", &openapi3.Schema{Type: &openapi3.Types{"null"}})},
			})
			return nil
		},
	},
	{
		what: "the versions list filter is_live is not a documented parameter",
		reason: `the filterset has it (docs/outside-systems.md, "Writing on v2 environments"); undeclared query ` +
			"parameters are not rejected, so no patch is needed",
	},
	{
		what: "no error response (400, 401, 404, 429, 5xx) is documented",
		reason: "undocumented statuses are allowed; 4xx bodies are checked here to be DRF error bodies ({\"detail\": …} or " +
			"{\"field\": […]}), 429 also to carry Retry-After; 5xx bodies are not checked (proxies answer them in HTML)",
	},
}

// KnownDifferences describes the departures from the document, one line each.
func KnownDifferences() []string {
	out := make([]string, len(knownDifferences))
	for i, d := range knownDifferences {
		out[i] = d.what + ": " + d.reason
	}
	return out
}

var (
	loadOnce sync.Once
	router   routers.Router
	loadErr  error
)

// Router returns the router over the patched document, loading it once per process.
func Router() (routers.Router, error) {
	loadOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(specYAML)
		if err != nil {
			loadErr = fmt.Errorf("load flagsmith openapi: %w", err)
			return
		}
		for _, d := range knownDifferences {
			if d.patch != nil {
				if err := d.patch(doc); err != nil {
					loadErr = fmt.Errorf("patch flagsmith openapi (%s): %w", d.what, err)
					return
				}
			}
		}
		router, loadErr = gorillamux.NewRouter(doc)
	})
	return router, loadErr
}

// authenticate accepts the two Admin API schemes the spec names for our routes, checking the
// header's form (the fake checks the key itself).
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	h := in.RequestValidationInput.Request.Header.Get("Authorization")
	switch in.SecuritySchemeName {
	case "Master API Key":
		if k, ok := strings.CutPrefix(h, "Api-Key "); ok && k != "" {
			return nil
		}
	case "tokenAuth":
		if k, ok := strings.CutPrefix(h, "Token "); ok && k != "" {
			return nil
		}
	}
	return fmt.Errorf("no %s credentials", in.SecuritySchemeName)
}

// Check validates one exchange. It returns every problem found, nil when it conforms.
func Check(req *http.Request, reqBody []byte, status int, header http.Header, respBody []byte) error {
	rt, err := Router()
	if err != nil {
		return err
	}
	route, params, err := rt.FindRoute(req)
	if err != nil {
		return fmt.Errorf("%s %s: no such route in the spec: %w", req.Method, req.URL.Path, err)
	}
	r2 := req.Clone(req.Context())
	r2.Body = http.NoBody
	if reqBody != nil {
		r2.Body = readCloser{bytes.NewReader(reqBody)}
	}
	in := &openapi3filter.RequestValidationInput{Request: r2, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: authenticate, MultiError: true}}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
		return fmt.Errorf("%s %s: request does not match the spec: %w", req.Method, req.URL.Path, err)
	}
	if status >= 400 {
		return checkError(req, status, header, respBody)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	out.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		return fmt.Errorf("%s %s: %d response does not match the spec: %w", req.Method, req.URL.Path, status, err)
	}
	return nil
}

// checkError checks an undocumented error answer against DRF's shapes.
func checkError(req *http.Request, status int, header http.Header, body []byte) error {
	if status >= 500 {
		return nil
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return fmt.Errorf("%s %s: %d body is not a DRF error object: %q", req.Method, req.URL.Path, status, body)
	}
	if d, ok := obj["detail"]; ok {
		if _, isStr := d.(string); !isStr {
			return fmt.Errorf("%s %s: %d detail is not a string", req.Method, req.URL.Path, status)
		}
	}
	if status == http.StatusTooManyRequests && header.Get("Retry-After") == "" {
		return fmt.Errorf("%s %s: 429 without Retry-After", req.Method, req.URL.Path)
	}
	return nil
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// Middleware validates every exchange through the wrapped handler and reports each
// mismatch with t.Errorf.
func Middleware(t testing.TB) func(http.Handler) http.Handler {
	if _, err := Router(); err != nil {
		t.Fatalf("flagspec: %v", err)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body []byte
			if r.Body != nil {
				var buf bytes.Buffer
				_, _ = buf.ReadFrom(r.Body)
				body = buf.Bytes()
				r.Body = readCloser{bytes.NewReader(body)}
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			if err := Check(r, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
				t.Errorf("flagspec: %v", err)
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		})
	}
}
