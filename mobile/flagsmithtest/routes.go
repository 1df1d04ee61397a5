package flagsmithtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// routes is the map of the fake API. Every path keeps Flagsmith's trailing slash; a path
// without it is answered with a redirect to the path with the slash (ServeMux's rule; the
// real server's APPEND_SLASH answers 301), which a client that keeps the slash never sees.
func (f *Fake) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/environments/{api_key}/{$}", f.getEnvironment)
	mux.HandleFunc("GET /api/v1/projects/{project_pk}/features/{$}", f.listFeatures)
	mux.HandleFunc("GET /api/v1/environments/{environment_api_key}/featurestates/{$}", f.listFeatureStates)
	mux.HandleFunc("GET /api/v1/environments/{environment_api_key}/featurestates/{id}/{$}", f.getFeatureState)
	mux.HandleFunc("PUT /api/v1/environments/{environment_api_key}/featurestates/{id}/{$}", f.updateFeatureState)
	mux.HandleFunc("PATCH /api/v1/environments/{environment_api_key}/featurestates/{id}/{$}", f.updateFeatureState)
	mux.HandleFunc("GET /api/v1/environments/{environment_pk}/features/{feature_pk}/versions/{$}", f.listVersions)
	mux.HandleFunc("POST /api/v1/environments/{environment_pk}/features/{feature_pk}/versions/{$}", f.createVersion)
	mux.HandleFunc("GET /api/v1/environments/{environment_pk}/features/{feature_pk}/versions/{environment_feature_version_pk}/featurestates/{$}", f.listVersionStates)
	mux.HandleFunc("GET /api/v1/environment-feature-versions/{id}/{$}", f.getVersion)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { notFound(w) })
	return f.serve(mux)
}

// --- wire shapes ---

type environmentJSON struct {
	ID                            int64  `json:"id"`
	UUID                          string `json:"uuid"`
	Name                          string `json:"name"`
	APIKey                        string `json:"api_key"`
	Description                   any    `json:"description"`
	Project                       int64  `json:"project"`
	MinimumChangeRequestApprovals *int   `json:"minimum_change_request_approvals"`
	AllowClientTraits             bool   `json:"allow_client_traits"`
	HideSensitiveData             bool   `json:"hide_sensitive_data"`
	UseV2FeatureVersioning        bool   `json:"use_v2_feature_versioning"`
	UseMVV2Evaluation             bool   `json:"use_mv_v2_evaluation"`
	IsCreating                    bool   `json:"is_creating"`
	Metadata                      []any  `json:"metadata"`
	TotalSegmentOverrides         int    `json:"total_segment_overrides"`
}

type featureJSON struct {
	ID                    int64   `json:"id"`
	Name                  string  `json:"name"`
	Type                  string  `json:"type"`
	DefaultEnabled        bool    `json:"default_enabled"`
	InitialValue          *string `json:"initial_value"`
	CreatedDate           string  `json:"created_date"`
	Description           *string `json:"description"`
	Tags                  []int64 `json:"tags"`
	MultivariateOptions   []any   `json:"multivariate_options"`
	IsArchived            bool    `json:"is_archived"`
	Owners                []int64 `json:"owners"`
	GroupOwners           []int64 `json:"group_owners"`
	UUID                  string  `json:"uuid"`
	Project               int64   `json:"project"`
	NumSegmentOverrides   int     `json:"num_segment_overrides"`
	IsServerKeyOnly       bool    `json:"is_server_key_only"`
	EnvironmentFeatState  any     `json:"environment_feature_state"`
	SegmentFeatureState   any     `json:"segment_feature_state"`
	NumIdentityOverrides  *int    `json:"num_identity_overrides"`
	IsNumIdentityComplete bool    `json:"is_num_identity_overrides_complete"`
	Metadata              []any   `json:"metadata"`
}

// stateJSON is FeatureStateSerializerBasic (single state, PUT answer); the list adds
// "identity" (null for environment defaults).
type stateJSON struct {
	ID                             int64   `json:"id"`
	FeatureStateValue              any     `json:"feature_state_value"`
	MultivariateFeatureStateValues []any   `json:"multivariate_feature_state_values"`
	Identity                       *int64  `json:"identity"`
	DeletedAt                      *string `json:"deleted_at"`
	UUID                           string  `json:"uuid"`
	Enabled                        bool    `json:"enabled"`
	CreatedAt                      string  `json:"created_at"`
	UpdatedAt                      string  `json:"updated_at"`
	LiveFrom                       *string `json:"live_from"`
	Version                        *int64  `json:"version"`
	Feature                        int64   `json:"feature"`
	Environment                    int64   `json:"environment"`
	FeatureSegment                 *int64  `json:"feature_segment"`
	ChangeRequest                  *int64  `json:"change_request"`
	EnvironmentFeatureVersion      *string `json:"environment_feature_version"`
}

type versionJSON struct {
	CreatedAt   string  `json:"created_at"`
	UpdatedAt   string  `json:"updated_at"`
	Published   bool    `json:"published"`
	LiveFrom    *string `json:"live_from"`
	UUID        string  `json:"uuid"`
	IsLive      bool    `json:"is_live"`
	PublishedBy *int64  `json:"published_by"`
	CreatedBy   *int64  `json:"created_by"`
	Description *string `json:"description"`
}

// versionDetailJSON is EnvironmentFeatureVersionRetrieveSerializer: a version with the uuid
// of the one before it, its feature and its environment.
type versionDetailJSON struct {
	versionJSON
	PreviousVersionUUID *string `json:"previous_version_uuid"`
	Feature             int64   `json:"feature"`
	Environment         int64   `json:"environment"`
}

// typedJSON is FeatureStateValueSerializer: the stored row, every column present.
type typedJSON struct {
	Type         string  `json:"type"`
	StringValue  *string `json:"string_value"`
	IntegerValue *int64  `json:"integer_value"`
	BooleanValue *bool   `json:"boolean_value"`
}

// versionStateJSON is CustomEnvironmentFeatureVersionFeatureStateSerializer, the shape of a
// version's feature states (the value nested and typed, unlike FeatureStateSerializerBasic).
type versionStateJSON struct {
	ID                             int64     `json:"id"`
	Feature                        int64     `json:"feature"`
	Enabled                        bool      `json:"enabled"`
	FeatureStateValue              typedJSON `json:"feature_state_value"`
	FeatureSegment                 *int64    `json:"feature_segment"` // always null: segments are not modelled
	DeletedAt                      *string   `json:"deleted_at"`
	UUID                           string    `json:"uuid"`
	CreatedAt                      string    `json:"created_at"`
	UpdatedAt                      string    `json:"updated_at"`
	LiveFrom                       *string   `json:"live_from"`
	Environment                    *int64    `json:"environment"`
	Identity                       *int64    `json:"identity"`
	ChangeRequest                  *int64    `json:"change_request"`
	MultivariateFeatureStateValues []any     `json:"multivariate_feature_state_values"`
}

type pageJSON[T any] struct {
	Count    int     `json:"count"`
	Next     *string `json:"next"`
	Previous *string `json:"previous"`
	Results  []T     `json:"results"`
}

func (f *Fake) stateJSON(st *state) stateJSON {
	out := stateJSON{ID: st.id, FeatureStateValue: st.value.goValue(), MultivariateFeatureStateValues: []any{},
		UUID: st.uuid, Enabled: st.enabled, CreatedAt: ts(st.created), UpdatedAt: ts(st.updated),
		LiveFrom: tsPtr(st.liveFrom), Feature: st.feature, Environment: st.env}
	if st.version != "" {
		v := st.version
		out.EnvironmentFeatureVersion = &v
	}
	return out
}

func versionStateOut(st *state) versionStateJSON {
	env := st.env
	return versionStateJSON{ID: st.id, Feature: st.feature, Enabled: st.enabled,
		FeatureStateValue: typedJSON{Type: st.value.typ, StringValue: st.value.str, IntegerValue: st.value.num, BooleanValue: st.value.flag},
		UUID:              st.uuid, CreatedAt: ts(st.created), UpdatedAt: ts(st.updated), LiveFrom: tsPtr(st.liveFrom),
		Environment: &env, MultivariateFeatureStateValues: []any{}}
}

func versionOut(v *version, now time.Time) versionJSON {
	return versionJSON{CreatedAt: ts(v.created), UpdatedAt: ts(v.updated), Published: v.published,
		LiveFrom: tsPtr(v.liveFrom), UUID: v.uuid, IsLive: v.isLive(now), Description: v.desc}
}

// paginate cuts items into DRF's page shape with absolute next/previous links.
func paginate[T any](r *http.Request, items []T, defaultSize, maxSize int) (pageJSON[T], bool) {
	q := r.URL.Query()
	p, size := 1, min(defaultSize, maxSize)
	if s := q.Get("page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return pageJSON[T]{}, false
		}
		p = n
	}
	if s := q.Get("page_size"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			size = min(n, maxSize)
		}
	}
	start := (p - 1) * size
	if start > len(items) || (start == len(items) && p > 1) {
		return pageJSON[T]{}, false
	}
	end := min(start+size, len(items))
	out := pageJSON[T]{Count: len(items), Results: items[start:end]}
	if out.Results == nil {
		out.Results = []T{}
	}
	link := func(n int) *string {
		u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path}
		qq := r.URL.Query()
		qq.Set("page", strconv.Itoa(n))
		u.RawQuery = qq.Encode()
		s := u.String()
		return &s
	}
	if end < len(items) {
		out.Next = link(p + 1)
	}
	if p > 1 {
		out.Previous = link(p - 1)
	}
	return out, true
}

// --- handlers ---

func (f *Fake) getEnvironment(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	env, ok := f.envs[r.PathValue("api_key")]
	var out environmentJSON
	if ok {
		out = environmentJSON{ID: env.id, UUID: env.uuid, Name: env.name, APIKey: env.apiKey, Project: env.project,
			MinimumChangeRequestApprovals: env.approvals, UseV2FeatureVersioning: env.v2, Metadata: []any{}}
	}
	f.mu.Unlock()
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (f *Fake) listFeatures(w http.ResponseWriter, r *http.Request) {
	project, err := strconv.ParseInt(r.PathValue("project_pk"), 10, 64)
	if err != nil {
		notFound(w)
		return
	}
	search := strings.ToLower(r.URL.Query().Get("search"))
	f.mu.Lock()
	if !f.projects[project] {
		f.mu.Unlock()
		notFound(w)
		return
	}
	var items []featureJSON
	for _, ft := range f.features {
		if ft.project != project || !strings.Contains(strings.ToLower(ft.name), search) {
			continue
		}
		items = append(items, featureJSON{ID: ft.id, Name: ft.name, Type: "STANDARD", CreatedDate: ts(ft.created),
			Tags: []int64{}, MultivariateOptions: []any{}, Owners: []int64{}, GroupOwners: []int64{}, UUID: ft.uuid,
			Project: ft.project, IsNumIdentityComplete: true, Metadata: []any{}})
	}
	f.mu.Unlock()
	slices.SortFunc(items, func(a, b featureJSON) int { return int(a.ID - b.ID) }) // created_date order
	pg, ok := paginate(r, items, 50, f.maxPage)
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, pg)
}

func (f *Fake) listFeatureStates(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var featureID int64
	if s := q.Get("feature"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, fieldErrors("feature", "Enter a number."))
			return
		}
		featureID = n
	}
	name := q.Get("feature_name")
	f.mu.Lock()
	env, ok := f.envs[r.PathValue("environment_api_key")]
	if !ok {
		f.mu.Unlock()
		notFound(w)
		return
	}
	var ids []int64
	for id, ft := range f.features {
		if ft.project != env.project || (featureID != 0 && id != featureID) || (name != "" && !strings.EqualFold(ft.name, name)) {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var items []stateJSON
	for _, id := range ids {
		if st := f.currentState(env, id); st != nil {
			items = append(items, f.stateJSON(st))
		}
	}
	pg, ok := paginate(r, items, 100, f.maxPage)
	if ok {
		for _, id := range ids {
			f.afterRead(env, id)
		}
	}
	f.mu.Unlock()
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, pg)
}

// stateFor finds state {id} of the path's environment; it must be the current default.
func (f *Fake) stateFor(r *http.Request) (*environment, *state, bool) {
	env, ok := f.envs[r.PathValue("environment_api_key")]
	if !ok {
		return nil, nil, false
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return nil, nil, false
	}
	st, ok := f.states[id]
	if !ok || st.env != env.id || f.currentState(env, st.feature) != st {
		return nil, nil, false
	}
	return env, st, true
}

func (f *Fake) getFeatureState(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	env, st, ok := f.stateFor(r)
	var out stateJSON
	if ok {
		out = f.stateJSON(st)
		f.afterRead(env, st.feature)
	}
	f.mu.Unlock()
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// updateFeatureState is the legacy write (PUT and PATCH act alike: always partial). The
// stored type follows the JSON type of feature_state_value.
func (f *Fake) updateFeatureState(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, fieldErrors("non_field_errors", "Invalid data. Expected a dictionary."))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	env, st, ok := f.stateFor(r)
	if !ok {
		notFound(w)
		return
	}
	if env.v2 {
		writeJSON(w, http.StatusBadRequest, detail(LegacyWriteDetail))
		return
	}
	f.beforeWrite(env, st.feature) // v1 updates the state in place: st stays the default
	if raw, ok := body["feature"]; ok {
		var fid int64
		if json.Unmarshal(raw, &fid) != nil || fid != st.feature {
			writeJSON(w, http.StatusBadRequest, fieldErrors("feature", "Feature does not match the feature state."))
			return
		}
	}
	var enabled *bool
	if raw, ok := body["enabled"]; ok {
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			writeJSON(w, http.StatusBadRequest, fieldErrors("enabled", "Must be a valid boolean."))
			return
		}
		enabled = &b
	}
	sv := st.value
	if raw, ok := body["feature_state_value"]; ok {
		var field, msg string
		sv, field, msg = inferStored(raw)
		if field != "" {
			writeJSON(w, http.StatusBadRequest, fieldErrors(field, msg))
			return
		}
	}
	st = f.write(env, f.features[st.feature], sv, enabled)
	writeJSON(w, http.StatusOK, f.stateJSON(st))
}

// inferStored applies Flagsmith's rule: the JSON type of the value decides the stored type
// (string → unicode, integer → int, boolean → bool, anything else → its text as unicode).
// It returns a field name and message on a validation error.
func inferStored(raw json.RawMessage) (stored, string, string) {
	raw = bytes.TrimSpace(raw)
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return stored{}, "feature_state_value", "Invalid value."
	}
	switch t := v.(type) {
	case string:
		if utf8.RuneCountInString(t) > 20000 {
			return stored{}, "string_value", "Ensure this field has no more than 20000 characters."
		}
		return stored{typ: "unicode", str: &t}, "", ""
	case bool:
		return stored{typ: "bool", flag: &t}, "", ""
	case json.Number:
		if n, err := t.Int64(); err == nil {
			if n > math.MaxInt32 {
				return stored{}, "integer_value", "Ensure this value is less than or equal to 2147483647."
			}
			if n < math.MinInt32 {
				return stored{}, "integer_value", "Ensure this value is greater than or equal to -2147483648."
			}
			return stored{typ: "int", num: &n}, "", ""
		}
		s := t.String()
		return stored{typ: "unicode", str: &s}, "", ""
	case nil:
		return stored{typ: "unicode"}, "", ""
	}
	s := string(raw)
	return stored{typ: "unicode", str: &s}, "", ""
}

// versionRoute resolves the environment (v2 only) and feature of a versions path.
func (f *Fake) versionRoute(w http.ResponseWriter, r *http.Request) (*environment, *feature, bool) {
	envID, err1 := strconv.ParseInt(r.PathValue("environment_pk"), 10, 64)
	featID, err2 := strconv.ParseInt(r.PathValue("feature_pk"), 10, 64)
	if err1 != nil || err2 != nil {
		notFound(w)
		return nil, nil, false
	}
	env := f.envByID(envID)
	ft := f.features[featID]
	if env == nil || ft == nil || ft.project != env.project {
		notFound(w)
		return nil, nil, false
	}
	if !env.v2 {
		writeJSON(w, http.StatusBadRequest, detail("Environment must use v2 feature versioning."))
		return nil, nil, false
	}
	return env, ft, true
}

func (f *Fake) listVersions(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	env, ft, ok := f.versionRoute(w, r)
	if !ok {
		f.mu.Unlock()
		return
	}
	now := f.horizon()
	filter := r.URL.Query().Get("is_live")
	vs := slices.Clone(f.versions[pair{env.id, ft.id}])
	// Newest live_from first; drafts (no live_from) last.
	slices.SortStableFunc(vs, func(a, b *version) int {
		switch {
		case a.liveFrom == nil && b.liveFrom == nil:
			return b.created.Compare(a.created)
		case a.liveFrom == nil:
			return 1
		case b.liveFrom == nil:
			return -1
		}
		return b.liveFrom.Compare(*a.liveFrom)
	})
	var items []versionJSON
	for _, v := range vs {
		if (filter == "true" && !v.isLive(now)) || (filter == "false" && v.isLive(now)) {
			continue
		}
		items = append(items, versionOut(v, now))
	}
	f.mu.Unlock()
	pg, ok := paginate(r, items, 100, f.maxPage)
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, pg)
}

type typedValue struct {
	Type         *string          `json:"type"`
	StringValue  *string          `json:"string_value"`
	IntegerValue *json.RawMessage `json:"integer_value"`
	BooleanValue *bool            `json:"boolean_value"`
}

type versionStateIn struct {
	FeatureSegment    json.RawMessage `json:"feature_segment"`
	Enabled           *bool           `json:"enabled"`
	FeatureStateValue *typedValue     `json:"feature_state_value"`
}

type createVersionIn struct {
	FeatureStatesToUpdate       []versionStateIn  `json:"feature_states_to_update"`
	FeatureStatesToCreate       []json.RawMessage `json:"feature_states_to_create"`
	SegmentIDsToDeleteOverrides []int64           `json:"segment_ids_to_delete_overrides"`
	PublishImmediately          bool              `json:"publish_immediately"`
	LiveFrom                    *time.Time        `json:"live_from"`
	Description                 *string           `json:"description"`
}

// createVersion clones the live version's state, applies feature_states_to_update (the
// environment default only; segments are not modelled) and publishes at once when asked.
func (f *Fake) createVersion(w http.ResponseWriter, r *http.Request) {
	var in createVersionIn
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, fieldErrors("non_field_errors", "Invalid data. Expected a dictionary."))
		return
	}
	if len(in.FeatureStatesToCreate) > 0 || len(in.SegmentIDsToDeleteOverrides) > 0 {
		writeJSON(w, http.StatusBadRequest, detail("flagsmithtest: segment overrides are not modelled by the fake"))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	env, ft, ok := f.versionRoute(w, r)
	if !ok {
		return
	}
	f.beforeWrite(env, ft.id)
	live := f.liveState(env.id, ft.id)
	now := f.now()
	st := &state{id: f.id(), feature: ft.id, env: env.id, uuid: newUUID(), created: now, updated: now, value: stored{typ: "unicode"}}
	if live != nil {
		st.enabled, st.value = live.enabled, live.value
	}
	for _, u := range in.FeatureStatesToUpdate {
		if seg := bytes.TrimSpace(u.FeatureSegment); len(seg) > 0 && !bytes.Equal(seg, []byte("null")) {
			writeJSON(w, http.StatusBadRequest, detail("flagsmithtest: segment overrides are not modelled by the fake"))
			return
		}
		if u.FeatureStateValue == nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"feature_states_to_update": []any{fieldErrors("feature_state_value", "This field is required.")}})
			return
		}
		sv, field, msg := typedStored(*u.FeatureStateValue)
		if field != "" {
			writeJSON(w, http.StatusBadRequest, map[string]any{"feature_states_to_update": []any{map[string]any{"feature_state_value": fieldErrors(field, msg)}}})
			return
		}
		st.value = sv
		if u.Enabled != nil {
			st.enabled = *u.Enabled
		}
	}
	v := &version{uuid: newUUID(), env: env.id, feature: ft.id, created: now, updated: now, desc: in.Description, state: st}
	st.version = v.uuid
	if in.PublishImmediately {
		lf := now
		if in.LiveFrom != nil {
			lf = in.LiveFrom.UTC()
		}
		v.published, v.liveFrom = true, &lf
		st.liveFrom = &lf
	}
	f.states[st.id] = st
	k := pair{env.id, ft.id}
	f.versions[k] = append(f.versions[k], v)
	writeJSON(w, http.StatusCreated, versionOut(v, f.horizon()))
}

// versionByUUID finds a version of any environment and feature.
func (f *Fake) versionByUUID(id string) *version {
	for _, vs := range f.versions {
		for _, v := range vs {
			if v.uuid == id {
				return v
			}
		}
	}
	return nil
}

// previous is Flagsmith's EnvironmentFeatureVersion.get_previous_version: the published
// version of the same environment and feature with the newest live_from before v's (before
// now when v has none), v itself excluded.
func (f *Fake) previous(v *version) *version {
	limit := f.horizon()
	if v.liveFrom != nil {
		limit = *v.liveFrom
	}
	var best *version
	for _, o := range f.versions[pair{v.env, v.feature}] {
		if o == v || !o.published || o.liveFrom == nil || !o.liveFrom.Before(limit) {
			continue
		}
		if best == nil || o.liveFrom.After(*best.liveFrom) {
			best = o
		}
	}
	return best
}

// getVersion is GET /api/v1/environment-feature-versions/{uuid}/: any version by its uuid,
// with previous_version_uuid.
func (f *Fake) getVersion(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	v := f.versionByUUID(r.PathValue("id"))
	var out versionDetailJSON
	if v != nil {
		out = versionDetailJSON{versionJSON: versionOut(v, f.horizon()), Feature: v.feature, Environment: v.env}
		if p := f.previous(v); p != nil {
			u := p.uuid
			out.PreviousVersionUUID = &u
		}
	}
	f.mu.Unlock()
	if v == nil {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// listVersionStates is GET …/versions/{uuid}/featurestates/: the version's feature states as
// a plain list (the view has no pagination), drafts and published versions alike. As on the
// server, an unknown version, environment or feature answers 404, and a version of another
// environment or feature an empty list.
func (f *Fake) listVersionStates(w http.ResponseWriter, r *http.Request) {
	envID, err1 := strconv.ParseInt(r.PathValue("environment_pk"), 10, 64)
	featID, err2 := strconv.ParseInt(r.PathValue("feature_pk"), 10, 64)
	f.mu.Lock()
	v := f.versionByUUID(r.PathValue("environment_feature_version_pk"))
	if err1 != nil || err2 != nil || v == nil || f.envByID(envID) == nil || f.features[featID] == nil {
		f.mu.Unlock()
		notFound(w)
		return
	}
	items := []versionStateJSON{}
	if v.env == envID && v.feature == featID {
		items = append(items, versionStateOut(v.state))
	}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, items)
}

// typedStored reads the FeatureStateValue shape {type, string_value|integer_value|boolean_value}.
func typedStored(tv typedValue) (stored, string, string) {
	typ := "unicode"
	if tv.Type != nil && *tv.Type != "" {
		typ = *tv.Type
	}
	switch typ {
	case "unicode":
		if tv.StringValue != nil && utf8.RuneCountInString(*tv.StringValue) > 20000 {
			return stored{}, "string_value", "Ensure this field has no more than 20000 characters."
		}
		return stored{typ: typ, str: tv.StringValue}, "", ""
	case "int":
		if tv.IntegerValue == nil {
			return stored{typ: typ}, "", ""
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(*tv.IntegerValue)), 10, 64)
		if err != nil {
			return stored{}, "integer_value", "A valid integer is required."
		}
		if n > math.MaxInt32 || n < math.MinInt32 {
			return stored{}, "integer_value", fmt.Sprintf("Ensure this value is between %d and %d.", math.MinInt32, math.MaxInt32)
		}
		return stored{typ: typ, num: &n}, "", ""
	case "bool":
		return stored{typ: typ, flag: tv.BooleanValue}, "", ""
	}
	return stored{}, "type", fmt.Sprintf("%q is not a valid choice.", typ)
}
