package mobile

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/logkey"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
)

// Kind is the JSON type of a feature value as Flagsmith stores it.
type Kind int

// The kinds Flagsmith stores: a string ("unicode"), an integer ("int", 32 bits), a boolean
// ("bool"), or no value at all.
const (
	KindNull Kind = iota
	KindString
	KindInt
	KindBool
)

func (k Kind) String() string {
	switch k {
	case KindString:
		return "string"
	case KindInt:
		return "integer"
	case KindBool:
		return "boolean"
	}
	return "null"
}

// MaxStringValue is Flagsmith's limit on a string value, in characters.
const MaxStringValue = 20000

// Value is a feature state's value with its JSON type. A JSON document such as
// version_state is a KindString value holding the document's text.
type Value struct {
	Kind Kind
	Str  string
	Int  int64
	Bool bool
}

// StringValue returns a string value (a JSON document is one).
func StringValue(s string) Value { return Value{Kind: KindString, Str: s} }

// IntValue returns an integer value (Flagsmith stores 32 bits).
func IntValue(i int64) Value { return Value{Kind: KindInt, Int: i} }

// BoolValue returns a boolean value.
func BoolValue(b bool) Value { return Value{Kind: KindBool, Bool: b} }

// Equal reports whether v and w have the same kind and value.
func (v Value) Equal(w Value) bool { return v == w }

// String renders the value as JSON (a string value is quoted).
func (v Value) String() string {
	b, _ := v.MarshalJSON()
	return string(b)
}

// Text is the value as a person reads it: a string as it is (a JSON document shows as the
// document), anything else as its JSON.
func (v Value) Text() string {
	if v.Kind == KindString {
		return v.Str
	}
	return v.String()
}

// MarshalJSON encodes the value with its JSON type: the type Flagsmith's legacy write infers.
func (v Value) MarshalJSON() ([]byte, error) {
	switch v.Kind {
	case KindString:
		return json.Marshal(v.Str)
	case KindInt:
		return []byte(strconv.FormatInt(v.Int, 10)), nil
	case KindBool:
		return []byte(strconv.FormatBool(v.Bool)), nil
	}
	return []byte("null"), nil
}

// UnmarshalJSON decodes a string, an integer, a boolean or null. Any other JSON (a fraction,
// an object) is an error: Flagsmith never answers with one.
func (v *Value) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*v = Value{}
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = StringValue(s)
	case bytes.Equal(b, []byte("true")), bytes.Equal(b, []byte("false")):
		*v = BoolValue(b[0] == 't')
	default:
		i, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return fmt.Errorf("feature value %.40s: not a string, integer, boolean or null", b)
		}
		*v = IntValue(i)
	}
	return nil
}

// typed is the FeatureStateValue shape the versioning endpoints take:
// {"type":"unicode|int|bool", "string_value"|"integer_value"|"boolean_value": ...}.
type typed struct {
	Type         string  `json:"type"`
	StringValue  *string `json:"string_value,omitempty"`
	IntegerValue *int64  `json:"integer_value,omitempty"`
	BooleanValue *bool   `json:"boolean_value,omitempty"`
}

func (v Value) typed() typed {
	switch v.Kind {
	case KindInt:
		return typed{Type: "int", IntegerValue: &v.Int}
	case KindBool:
		return typed{Type: "bool", BooleanValue: &v.Bool}
	case KindString:
		return typed{Type: "unicode", StringValue: &v.Str}
	}
	empty := ""
	return typed{Type: "unicode", StringValue: &empty}
}

// value is the value the row holds, as Flagsmith's FeatureStateValue.value reads it: the
// column of its type ("int", "bool"; any other type reads string_value), null when that
// column is empty.
func (t typed) value() Value {
	switch t.Type {
	case "int":
		if t.IntegerValue != nil {
			return IntValue(*t.IntegerValue)
		}
	case "bool":
		if t.BooleanValue != nil {
			return BoolValue(*t.BooleanValue)
		}
	default:
		if t.StringValue != nil {
			return StringValue(*t.StringValue)
		}
	}
	return Value{}
}

// validate checks the value against Flagsmith's storage limits before it is sent.
func (v Value) validate() error {
	switch v.Kind {
	case KindString:
		if n := len([]rune(v.Str)); n > MaxStringValue {
			return fmt.Errorf("string value of %d characters is over Flagsmith's limit of %d", n, MaxStringValue)
		}
	case KindInt:
		if v.Int < math.MinInt32 || v.Int > math.MaxInt32 {
			return fmt.Errorf("integer value %d does not fit Flagsmith's 32-bit integer", v.Int)
		}
	}
	return nil
}

// Environment is the part of a Flagsmith environment the orchestrator uses.
type Environment struct {
	ID      int64  `json:"id"`
	APIKey  string `json:"api_key"`
	Name    string `json:"name"`
	Project int64  `json:"project"`
	// V2Versioning decides the write path: versions (true) or feature state updates (false).
	V2Versioning bool `json:"use_v2_feature_versioning"`
	// MinimumChangeRequestApprovals is nil when change requests are off.
	MinimumChangeRequestApprovals *int `json:"minimum_change_request_approvals"`
}

// Feature is a project's feature (flag or remote config).
type Feature struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	Project int64  `json:"project"`
}

// FeatureState is an environment default of a feature: its value and whether it is enabled.
type FeatureState struct {
	ID          int64     `json:"id"`
	Feature     int64     `json:"feature"`
	Environment int64     `json:"environment"`
	Enabled     bool      `json:"enabled"`
	Value       Value     `json:"feature_state_value"`
	UpdatedAt   time.Time `json:"updated_at"`
	// FeatureSegment and Identity are set on segment and identity overrides, never on an
	// environment default.
	FeatureSegment *int64          `json:"feature_segment"`
	Identity       json.RawMessage `json:"identity,omitempty"`
	// Version is the uuid of the environment feature version the state belongs to (v2
	// environments only).
	Version string `json:"environment_feature_version"`
}

// Version is an environment feature version (v2 environments).
type Version struct {
	UUID      string     `json:"uuid"`
	Published bool       `json:"published"`
	IsLive    bool       `json:"is_live"`
	LiveFrom  *time.Time `json:"live_from"`
	CreatedAt time.Time  `json:"created_at"`
	// Description is the version's free text; versions this client creates carry the run,
	// the fence and a token unique to the write.
	Description *string `json:"description"`
}

// VersionDetail is a version as GET /api/v1/environment-feature-versions/{uuid}/ answers
// it (EnvironmentFeatureVersionRetrieveSerializer).
type VersionDetail struct {
	Version
	// Previous is previous_version_uuid: the published version of the same environment and
	// feature with the newest live_from before this version's (Flagsmith's
	// get_previous_version), that is the version this one replaced when it went live; empty
	// when there is none.
	Previous    string `json:"previous_version_uuid"`
	Feature     int64  `json:"feature"`
	Environment int64  `json:"environment"`
}

type page[T any] struct {
	Count   int     `json:"count"`
	Next    *string `json:"next"`
	Results []T     `json:"results"`
}

// Environment returns the environment whose (client-side) API key is envKey.
// Errors: ErrNotFound, ErrUnauthorized, or another *APIError or transport error.
func (c *Client) Environment(ctx context.Context, envKey string) (Environment, error) {
	var env Environment
	err := c.do(ctx, "GET", "/api/v1/environments/{api_key}/", "/api/v1/environments/"+url.PathEscape(envKey)+"/", nil, nil, &env)
	return env, err
}

// Feature finds the feature of project named exactly name (the server's search is a
// case-insensitive substring match; the match here is exact). It reads every page.
// Errors: ErrNotFound when no feature has exactly that name, or an API/transport error.
func (c *Client) Feature(ctx context.Context, project int64, name string) (Feature, error) {
	path := "/api/v1/projects/" + strconv.FormatInt(project, 10) + "/features/"
	for p := 1; ; p++ {
		q := url.Values{"search": {name}, "page_size": {"999"}, "page": {strconv.Itoa(p)}}
		var pg page[Feature]
		if err := c.do(ctx, "GET", "/api/v1/projects/{project_pk}/features/", path, q, nil, &pg); err != nil {
			return Feature{}, err
		}
		for _, f := range pg.Results {
			if f.Name == name {
				return f, nil
			}
		}
		if pg.Next == nil || *pg.Next == "" || len(pg.Results) == 0 {
			return Feature{}, fmt.Errorf("feature %q in project %d: %w", name, project, ErrNotFound)
		}
	}
}

// FeatureState returns the environment default state of feature featureID in the
// environment envKey. On v2 environments this is the state of the live version.
// Errors: ErrNotFound when the environment has no default state for the feature, or an
// API/transport error.
func (c *Client) FeatureState(ctx context.Context, envKey string, featureID int64) (FeatureState, error) {
	path := "/api/v1/environments/" + url.PathEscape(envKey) + "/featurestates/"
	var pg page[FeatureState]
	q := url.Values{"feature": {strconv.FormatInt(featureID, 10)}}
	if err := c.do(ctx, "GET", "/api/v1/environments/{api_key}/featurestates/", path, q, nil, &pg); err != nil {
		return FeatureState{}, err
	}
	var found []FeatureState
	for _, fs := range pg.Results {
		if fs.Feature == featureID && fs.FeatureSegment == nil && isNullJSON(fs.Identity) {
			found = append(found, fs)
		}
	}
	return theDefault(found, fmt.Sprintf("feature %d in environment %q", featureID, envKey))
}

// theDefault returns the one environment default state found among a listing's states:
// ErrNotFound when there is none, an error when there are several. where names the listing.
func theDefault(found []FeatureState, where string) (FeatureState, error) {
	switch len(found) {
	case 0:
		return FeatureState{}, fmt.Errorf("default state of %s: %w", where, ErrNotFound)
	case 1:
		return found[0], nil
	}
	return FeatureState{}, fmt.Errorf("default state of %s: %d states listed, want 1", where, len(found))
}

func isNullJSON(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || bytes.Equal(b, []byte("null"))
}

// UpdateFeatureState writes the value and enabled flag of state stateID in the environment
// envKey (v1 environments: PUT …/featurestates/{id}/). The value is sent with its JSON type,
// which is the type Flagsmith stores. It returns the updated state.
// Errors: ErrLegacyWrite on a v2 environment, ErrNotFound, a validation *APIError (400), or
// an API/transport error.
func (c *Client) UpdateFeatureState(ctx context.Context, envKey string, stateID, featureID int64, v Value, enabled bool) (FeatureState, error) {
	if err := v.validate(); err != nil {
		return FeatureState{}, fmt.Errorf("update feature state %d: %w", stateID, err)
	}
	path := "/api/v1/environments/" + url.PathEscape(envKey) + "/featurestates/" + strconv.FormatInt(stateID, 10) + "/"
	body := struct {
		Feature int64 `json:"feature"`
		Value   Value `json:"feature_state_value"`
		Enabled bool  `json:"enabled"`
	}{featureID, v, enabled}
	var fs FeatureState
	err := c.do(ctx, "PUT", "/api/v1/environments/{api_key}/featurestates/{id}/", path, nil, body, &fs)
	return fs, err
}

// LiveVersion returns the newest live version of feature featureID in the environment with
// integer id envID (v2 environments). Errors: ErrNotFound when none is live, or an
// API/transport error.
func (c *Client) LiveVersion(ctx context.Context, envID, featureID int64) (Version, error) {
	var pg page[Version]
	q := url.Values{"is_live": {"true"}}
	if err := c.do(ctx, "GET", versionsRoute, versionsPath(envID, featureID), q, nil, &pg); err != nil {
		return Version{}, err
	}
	// Results are ordered newest live_from first; the filter may be ignored by older servers.
	for _, v := range pg.Results {
		if v.IsLive {
			return v, nil
		}
	}
	return Version{}, fmt.Errorf("live version of feature %d in environment %d: %w", featureID, envID, ErrNotFound)
}

// PublishVersion creates a version of feature featureID in the environment envID whose
// environment default has value v and the enabled flag, and publishes it at once (v2
// environments: POST …/versions/ with publish_immediately). The server clones the live
// version and applies the change in the same request. It returns the new version.
//
// The POST creates a version each time it is sent, so it is never retried after an ambiguous
// failure (a 5xx but 503, or a connection lost after the request went out). The version's
// description carries a token unique to the call ("orchestrator run <id> fence <n> write
// <token>"); after such a failure PublishVersion lists the feature's versions and returns the
// one with the token when the server did create it. When none has it, the version was not
// created and the original error is returned; when the listing fails too, an error matching
// outbound.ErrOutcomeUnknown (and the original failure) says the outcome is unknown.
// Errors: a validation *APIError (400), ErrNotFound, or an API/transport error.
func (c *Client) PublishVersion(ctx context.Context, envID, featureID int64, v Value, enabled bool) (Version, error) {
	if err := v.validate(); err != nil {
		return Version{}, fmt.Errorf("publish version of feature %d: %w", featureID, err)
	}
	type stateUpdate struct {
		FeatureSegment *int64 `json:"feature_segment"`
		Enabled        bool   `json:"enabled"`
		Value          typed  `json:"feature_state_value"`
	}
	desc := writeDescription(ctx)
	body := struct {
		Update      []stateUpdate `json:"feature_states_to_update"`
		Publish     bool          `json:"publish_immediately"`
		Description string        `json:"description"`
	}{[]stateUpdate{{Enabled: enabled, Value: v.typed()}}, true, desc}
	var ver Version
	err := c.do(ctx, "POST", versionsRoute, versionsPath(envID, featureID), nil, body, &ver)
	if err == nil || !errors.Is(err, outbound.ErrOutcomeUnknown) {
		return ver, err
	}
	found, lerr := c.versionWithDescription(ctx, envID, featureID, desc)
	switch {
	case lerr != nil:
		return Version{}, fmt.Errorf("publish version of feature %d: %w (and reading the versions back to learn whether it was created failed: %v)", featureID, err, lerr)
	case found != nil:
		c.logger.LogAttrs(ctx, slog.LevelWarn, "flagsmith version created despite a failed answer",
			slog.String(logkey.Reason, err.Error()), slog.String(logkey.Version, found.UUID))
		return *found, nil
	}
	// Not created: the error stays, without "outcome unknown".
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return Version{}, fmt.Errorf("publish version of feature %d: not created (read back): %w", featureID, apiErr)
	}
	var oe *outbound.OutcomeUnknownError
	errors.As(err, &oe)
	return Version{}, fmt.Errorf("flagsmith POST %s: not created (read back): %w", versionsPath(envID, featureID), oe.Err)
}

// VersionDetail returns the version with that uuid, with the uuid of the version before it
// (GET /api/v1/environment-feature-versions/{uuid}/). Errors: ErrNotFound, or an
// API/transport error.
func (c *Client) VersionDetail(ctx context.Context, uuid string) (VersionDetail, error) {
	var v VersionDetail
	err := c.do(ctx, "GET", "/api/v1/environment-feature-versions/{id}/",
		"/api/v1/environment-feature-versions/"+url.PathEscape(uuid)+"/", nil, nil, &v)
	return v, err
}

// VersionState returns the environment default (the state of no segment and no identity)
// of version uuid of feature featureID in the environment with integer id envID, published
// or not: GET …/versions/{uuid}/featurestates/, a plain list (no pages) whose values are
// typed objects ({"type": "unicode", "string_value": …}). Its Version is uuid.
// Errors: ErrNotFound when the version does not exist or holds no default state, or an
// API/transport error.
func (c *Client) VersionState(ctx context.Context, envID, featureID int64, uuid string) (FeatureState, error) {
	type versionState struct {
		ID             int64           `json:"id"`
		Feature        int64           `json:"feature"`
		Environment    *int64          `json:"environment"`
		Enabled        bool            `json:"enabled"`
		Value          typed           `json:"feature_state_value"`
		UpdatedAt      time.Time       `json:"updated_at"`
		FeatureSegment json.RawMessage `json:"feature_segment"`
		Identity       json.RawMessage `json:"identity"`
	}
	var list []versionState
	path := versionsPath(envID, featureID) + url.PathEscape(uuid) + "/featurestates/"
	if err := c.do(ctx, "GET", versionsRoute+"{environment_feature_version_pk}/featurestates/", path, nil, nil, &list); err != nil {
		return FeatureState{}, err
	}
	var found []FeatureState
	for _, vs := range list {
		if vs.Feature != featureID || !isNullJSON(vs.FeatureSegment) || !isNullJSON(vs.Identity) {
			continue
		}
		fs := FeatureState{ID: vs.ID, Feature: vs.Feature, Enabled: vs.Enabled, Value: vs.Value.value(),
			UpdatedAt: vs.UpdatedAt, Version: uuid}
		if vs.Environment != nil {
			fs.Environment = *vs.Environment
		}
		found = append(found, fs)
	}
	return theDefault(found, fmt.Sprintf("feature %d in version %s", featureID, uuid))
}

// versionsRoute is the versions path's template, for metrics.
const versionsRoute = "/api/v1/environments/{environment_pk}/features/{feature_pk}/versions/"

// writeDescription is the description of a version this client creates: the run and fence of
// ctx (coolify.WithTrace) and a token no other call uses, for the read-back.
func writeDescription(ctx context.Context) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	d := "orchestrator"
	if runID, fence, ok := trace.From(ctx); ok {
		d += fmt.Sprintf(" run %s fence %d", runID, fence)
	}
	return d + " write " + hex.EncodeToString(b[:])
}

// versionWithDescription finds, among the newest versions of the feature, the one whose
// description is desc; nil when there is none.
func (c *Client) versionWithDescription(ctx context.Context, envID, featureID int64, desc string) (*Version, error) {
	var pg page[Version]
	q := url.Values{"page_size": {"100"}}
	if err := c.do(ctx, "GET", versionsRoute, versionsPath(envID, featureID), q, nil, &pg); err != nil {
		return nil, err
	}
	for _, v := range pg.Results {
		if v.Description != nil && *v.Description == desc {
			return &v, nil
		}
	}
	return nil, nil
}

func versionsPath(envID, featureID int64) string {
	return "/api/v1/environments/" + strconv.FormatInt(envID, 10) + "/features/" + strconv.FormatInt(featureID, 10) + "/versions/"
}
