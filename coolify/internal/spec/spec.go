// Package spec checks HTTP traffic to Coolify against Coolify's official OpenAPI spec
// (coolify/testdata/openapi.yaml), for the tests of coolify and coolify/coolifytest: every
// request the client sends and every answer the fake gives is validated by
// internal/openapicheck, except where the real server is known to differ from its spec
// (docs/outside-systems.md, "Differences from the Coolify spec"). Those differences are
// listed in this file, in [specPatches], [undocumentedStatuses] and [notInSpec], each with its
// reason (citing the section of docs/outside-systems.md that describes the server), and
// nowhere else.
package spec

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/deploy-orchestrator/orchestrator/internal/openapicheck"
)

// specPatches are the places where the server's answers differ from the spec's schemas. Each
// edits the loaded document so that validation accepts what the real server sends.
var specPatches = []openapicheck.Patch{
	{
		Reason: "the spec marks fields `nullable: true`, an OpenAPI 3.0 keyword that 3.1 ignores; " +
			"the server sends null for them (e.g. docker_registry_image_tag, fqdn, comment)",
		Apply: openapicheck.AdmitNull,
	},
	{
		Reason: `docs/outside-systems.md, "Applications and the image tag": image applications have ` +
			`build_pack "dockerimage", missing from the spec's enum`,
		Apply: func(doc *openapi3.T) error {
			s, err := openapicheck.Property(doc, "Application", "build_pack")
			if err == nil {
				s.Enum = append(s.Enum, "dockerimage")
			}
			return err
		},
	},
	{
		Reason: `docs/outside-systems.md, "The env PATCH wipes what it omits": the env PATCH stores null ` +
			"in is_multiline/is_shown_once when they are omitted, and null in value when it is omitted " +
			"(issue #9977); the spec types them non-null",
		Apply: func(doc *openapi3.T) error {
			for _, name := range []string{"is_multiline", "is_shown_once", "value", "real_value"} {
				s, err := openapicheck.Property(doc, "EnvironmentVariable", name)
				if err != nil {
					return err
				}
				openapicheck.AddNull(s)
			}
			return nil
		},
	},
	{
		Reason: `docs/outside-systems.md, "Applications and the image tag": PATCH /applications/{uuid} ` +
			"accepts docker_registry_image_tag null (nullable in the server's validation) and stores null; " +
			"the spec types it a non-null string",
		Apply: func(doc *openapi3.T) error {
			op := doc.Paths.Find("/applications/{uuid}")
			if op == nil || op.Patch == nil || op.Patch.RequestBody == nil {
				return fmt.Errorf("no PATCH /applications/{uuid} body")
			}
			s := op.Patch.RequestBody.Value.Content["application/json"].Schema.Value.Properties["docker_registry_image_tag"]
			if s == nil || s.Value == nil {
				return fmt.Errorf("no docker_registry_image_tag in PATCH /applications/{uuid}")
			}
			openapicheck.AddNull(s.Value)
			return nil
		},
	},
	{
		Reason: `docs/outside-systems.md, "Deployment statuses and the queue": GET ` +
			"/deployments/applications/{uuid} answers {count, deployments: [deployment]}, not the array " +
			"of Application the spec says",
		Apply: func(doc *openapi3.T) error {
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
		Reason: `docs/outside-systems.md, "Deployment statuses and the queue": GET /deployments sorts ` +
			"its rows with Laravel's Collection::sortBy, which keeps each row's " +
			"key: when that reorders them (a row updated after a newer one was created) the answer is a " +
			"JSON object of rows keyed by position, not the array the spec says",
		Apply: func(doc *openapi3.T) error {
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
var undocumentedStatuses = []openapicheck.Undocumented{
	{Status: http.StatusForbidden, Reason: `docs/outside-systems.md, "Coolify tokens and abilities": a token without the route's ability gets 403 (the spec documents 403 on one route)`},
	{Status: http.StatusTooManyRequests, Reason: `docs/outside-systems.md, "Coolify rate limit": the throttle answers 429 on every route`},
	{Status: http.StatusInternalServerError, Reason: "server errors (and faults the fake injects on purpose)"},
	{Status: http.StatusBadGateway, Reason: "a proxy in front of Coolify (faults the fake injects on purpose)"},
	{Status: http.StatusServiceUnavailable, Reason: "maintenance mode or a proxy (faults the fake injects on purpose)"},
	{Status: http.StatusGatewayTimeout, Reason: "a proxy in front of Coolify (faults the fake injects on purpose)"},
	{Status: http.StatusUnprocessableEntity, Reason: `docs/outside-systems.md, "Coolify errors": 422 validation errors on routes whose spec omits them (app PATCH, app env writes)`},
	{Method: "POST", Route: "/applications/{uuid}/envs", Status: http.StatusConflict, Reason: `docs/outside-systems.md, "The env PATCH wipes what it omits": 409 when the key exists in that scope`},
	{Method: "POST", Route: "/services/{uuid}/envs", Status: http.StatusConflict, Reason: `docs/outside-systems.md, "Service env vars": 409 when the key exists`},
	{Method: "POST", Route: "/deploy", Status: http.StatusNotFound, Reason: `docs/outside-systems.md, "Deploy and its dedup": 404 "No resources found."`},
	{Method: "GET", Route: "/deployments/applications/{uuid}", Status: http.StatusNotFound, Reason: "unknown application: 404 \"Application not found.\""},
	{Method: "POST", Route: "/deployments/{uuid}/cancel", Status: http.StatusInternalServerError, Reason: `docs/outside-systems.md, "Cancel": before 4.3.7 an API cancel answered 500`},
}

// notInSpec are requests the real server answers that the spec has no operation for.
var notInSpec = []openapicheck.NotDescribed{
	{Method: "GET", Route: "/deploy", Reason: `docs/outside-systems.md, "Deploy and its dedup": GET on action routes answers 405 since v4.2.0`},
	{Method: "GET", Route: "/applications/{uuid}/start", Reason: `docs/outside-systems.md, "Deploy and its dedup": GET on action routes answers 405`},
	{Method: "GET", Route: "/applications/{uuid}/restart", Reason: `docs/outside-systems.md, "Deploy and its dedup": GET on action routes answers 405`},
	{Method: "GET", Route: "/applications/{uuid}/stop", Reason: `docs/outside-systems.md, "Deploy and its dedup": GET on action routes answers 405`},
	{Method: "GET", Route: "/servers/{uuid}/validate", Reason: `docs/outside-systems.md, "Coolify tokens and abilities": the GET answers 405 past the write ability check (routes/api.php; the ability probe)`},
	{Method: "GET", Route: "/api/health", Reason: "the unversioned alias of /api/v1/health"},
}

// Load returns the validator of Coolify's spec, patched where the server differs from it.
func Load(t testing.TB) *openapicheck.Validator {
	t.Helper()
	// /health answers text/html "OK"; kin-openapi has no decoder for it by default.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "openapi.yaml")
	return openapicheck.Load(t, path, openapicheck.Options{
		Prefix: "/api/v1", Patches: specPatches, Undocumented: undocumentedStatuses, NotDescribed: notInSpec,
		Authenticate: bearer, ErrorMessage: "message",
	})
}

// bearer is the spec's security requirement: a bearer token (its value is the server's to judge).
func bearer(_ context.Context, ai *openapi3filter.AuthenticationInput) error {
	if !strings.HasPrefix(ai.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
		return fmt.Errorf("no bearer token")
	}
	return nil
}
