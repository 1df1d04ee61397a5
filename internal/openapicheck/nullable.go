package openapicheck

import (
	"fmt"

	"github.com/getkin/kin-openapi/openapi3"
)

// Property returns the schema of property prop of the component schema named schema.
func Property(doc *openapi3.T, schema, prop string) (*openapi3.Schema, error) {
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

// AddNull makes a typed schema admit null.
func AddNull(s *openapi3.Schema) {
	if s.Type == nil || s.Type.Includes("null") {
		return
	}
	t := append(openapi3.Types{}, *s.Type...)
	t = append(t, "null")
	s.Type = &t
}

// AdmitNull turns every `nullable: true` schema of the document (components, responses,
// request bodies, parameters) into a type list that includes "null": OpenAPI 3.1 has no
// nullable keyword and kin-openapi ignores it there, but documents generated for 3.1 still
// use it, and their servers send null.
func AdmitNull(doc *openapi3.T) error {
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(r *openapi3.SchemaRef) {
		if r == nil || r.Value == nil || seen[r.Value] {
			return
		}
		s := r.Value
		seen[s] = true
		if s.Nullable {
			AddNull(s)
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
