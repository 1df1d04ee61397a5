package coolify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Application is the part of Coolify's application object the phases use.
type Application struct {
	UUID      string
	Name      string
	BuildPack string // nixpacks, railpack, static, dockerfile, dockercompose, dockerimage
	// ImageName and ImageTag are docker_registry_image_name/_tag ("" when null; Coolify deploys
	// "latest" for an empty tag).
	ImageName string
	ImageTag  string
	// GitCommitSHA is the commit deployments are made of ("HEAD" by default and for image apps).
	GitCommitSHA string
	// FQDN is the comma-separated list of URLs the application is served on.
	FQDN string
	// Status is "state[:health]", e.g. "running:healthy", "running:unknown", "exited"; Coolify
	// refreshes it asynchronously, so it lags a deployment (see [Application.Running]).
	Status      string
	HealthCheck HealthCheck
	UpdatedAt   time.Time
}

// HealthCheck is an application's Coolify health check (health_check_* fields).
type HealthCheck struct {
	Enabled      bool
	Type         string // http or cmd
	Command      string
	Path         string
	Port         string
	Host         string
	Method       string
	Scheme       string
	ReturnCode   int
	ResponseText string
	Interval     int // seconds
	Timeout      int
	Retries      int
	StartPeriod  int
}

// URLs is FQDN split on commas.
func (a *Application) URLs() []string { return splitFQDN(a.FQDN) }

// Running reports whether Status says the application's containers run ("running:*").
func (a *Application) Running() bool { return state(a.Status) == "running" }

// Healthy reports whether Status is "running:healthy" (only reachable when a health check exists).
func (a *Application) Healthy() bool { return a.Status == "running:healthy" }

func state(status string) string {
	s, _, _ := strings.Cut(status, ":")
	return s
}

func splitFQDN(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// UnmarshalJSON decodes Coolify's flat application object leniently (nulls become zero values,
// health_check_port may be a string or a number).
func (a *Application) UnmarshalJSON(data []byte) error {
	var w wireApplication
	if err := json.Unmarshal(data, &w); err != nil {
		return fmt.Errorf("decode application: %w", err)
	}
	*a = w.application()
	return nil
}

// wireApplication is the JSON shape of an application as read. The client decodes answers
// into it directly: going through [Application.UnmarshalJSON] from an outer json.Unmarshal
// scans every answer three times.
type wireApplication struct {
	UUID                    string     `json:"uuid"`
	Name                    string     `json:"name"`
	BuildPack               string     `json:"build_pack"`
	ImageName               string     `json:"docker_registry_image_name"`
	ImageTag                string     `json:"docker_registry_image_tag"`
	GitCommitSHA            string     `json:"git_commit_sha"`
	FQDN                    string     `json:"fqdn"`
	Status                  string     `json:"status"`
	UpdatedAt               flexTime   `json:"updated_at"`
	HealthCheckEnabled      bool       `json:"health_check_enabled"`
	HealthCheckType         string     `json:"health_check_type"`
	HealthCheckCommand      string     `json:"health_check_command"`
	HealthCheckPath         string     `json:"health_check_path"`
	HealthCheckPort         flexString `json:"health_check_port"`
	HealthCheckHost         string     `json:"health_check_host"`
	HealthCheckMethod       string     `json:"health_check_method"`
	HealthCheckScheme       string     `json:"health_check_scheme"`
	HealthCheckReturnCode   int        `json:"health_check_return_code"`
	HealthCheckResponseText string     `json:"health_check_response_text"`
	HealthCheckInterval     int        `json:"health_check_interval"`
	HealthCheckTimeout      int        `json:"health_check_timeout"`
	HealthCheckRetries      int        `json:"health_check_retries"`
	HealthCheckStartPeriod  int        `json:"health_check_start_period"`
}

func (w *wireApplication) application() Application {
	return Application{
		UUID: w.UUID, Name: w.Name, BuildPack: w.BuildPack,
		ImageName: w.ImageName, ImageTag: w.ImageTag, GitCommitSHA: w.GitCommitSHA,
		FQDN: w.FQDN, Status: w.Status, UpdatedAt: time.Time(w.UpdatedAt),
		HealthCheck: HealthCheck{
			Enabled: w.HealthCheckEnabled, Type: w.HealthCheckType, Command: w.HealthCheckCommand,
			Path: w.HealthCheckPath, Port: string(w.HealthCheckPort), Host: w.HealthCheckHost,
			Method: w.HealthCheckMethod, Scheme: w.HealthCheckScheme,
			ReturnCode: w.HealthCheckReturnCode, ResponseText: w.HealthCheckResponseText,
			Interval: w.HealthCheckInterval, Timeout: w.HealthCheckTimeout,
			Retries: w.HealthCheckRetries, StartPeriod: w.HealthCheckStartPeriod,
		},
	}
}

// Service is the part of Coolify's service (docker-compose stack) object the phases use.
// Services have no deployment uuid: after [Client.DeployService] or [Client.RestartService] a
// caller follows the (re)start by the service's status. Coolify answers before the job runs,
// and until it starts the status reads as before ("running:*" for a running service); the job
// shows "starting:*", and the containers read "exited" until Coolify's next status check sees
// them run. The (re)start is done once the status, having shown the service not running,
// reads "running:*" (the phases' deploy step waits so).
type Service struct {
	UUID        string
	Name        string
	Description string
	ServiceType string
	Status      string
	FQDNs       []string // fqdn of the service's applications, when the server lists them
	UpdatedAt   time.Time
}

// Running reports whether Status says the service's containers run ("running:*").
func (s *Service) Running() bool { return state(s.Status) == "running" }

// UnmarshalJSON decodes Coolify's service object leniently.
func (s *Service) UnmarshalJSON(data []byte) error {
	var w struct {
		UUID         string   `json:"uuid"`
		Name         string   `json:"name"`
		Description  string   `json:"description"`
		ServiceType  string   `json:"service_type"`
		Status       string   `json:"status"`
		UpdatedAt    flexTime `json:"updated_at"`
		Applications []struct {
			FQDN string `json:"fqdn"`
		} `json:"applications"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return fmt.Errorf("decode service: %w", err)
	}
	*s = Service{UUID: w.UUID, Name: w.Name, Description: w.Description,
		ServiceType: w.ServiceType, Status: w.Status, UpdatedAt: time.Time(w.UpdatedAt)}
	for _, a := range w.Applications {
		s.FQDNs = append(s.FQDNs, splitFQDN(a.FQDN)...)
	}
	return nil
}

// ResourceKind says whether a [ResourceRef] names an application or a service.
type ResourceKind string

// Resource kinds.
const (
	KindApplication ResourceKind = "application"
	KindService     ResourceKind = "service"
)

// ResourceRef names an application or a service whose env vars are read or written.
type ResourceRef struct {
	Kind ResourceKind
	UUID string
}

// AppRef names an application.
func AppRef(uuid string) ResourceRef { return ResourceRef{Kind: KindApplication, UUID: uuid} }

// ServiceRef names a service.
func ServiceRef(uuid string) ResourceRef { return ResourceRef{Kind: KindService, UUID: uuid} }

func (r ResourceRef) String() string { return string(r.Kind) + " " + r.UUID }

func (r ResourceRef) collection() (string, error) {
	switch r.Kind {
	case KindApplication:
		return "/applications/" + pathEscape(r.UUID), nil
	case KindService:
		return "/services/" + pathEscape(r.UUID), nil
	}
	return "", fmt.Errorf("resource %q: unknown kind %q", r.UUID, r.Kind)
}

// EnvVar is one environment variable of an application or service. Value is a secret: String,
// GoString, Format and LogValue redact it, and the type has no JSON encoding of its own (use
// your own struct if you persist it).
//
// A write sends Value and every flag exactly as given; to keep a variable's flags, start from
// the EnvVar that [Client.ListEnvs] returned and change Value; for a new variable start from
// [NewEnvVar], which carries Coolify's defaults (runtime and buildtime on).
type EnvVar struct {
	UUID  string // server id ("" for a variable not created yet)
	Key   string
	Value string // raw value ({{...}} references unresolved)

	IsPreview   bool // applications only: the preview-deployment scope
	IsBuildtime bool // applications only
	IsRuntime   bool // applications only
	IsLiteral   bool
	IsMultiline bool
	IsShownOnce bool
	IsShared    bool // read-only: the value references a shared variable
	Comment     string

	valueHidden bool
}

// NewEnvVar is a non-preview variable with Coolify's defaults for new variables: available at
// runtime and at build time, not literal, not multiline.
func NewEnvVar(key, value string) EnvVar {
	return EnvVar{Key: key, Value: value, IsRuntime: true, IsBuildtime: true}
}

// Stored is what Coolify keeps of a value or comment sent to it: Laravel's TrimStrings
// middleware trims white space (Unicode's, and the byte-order mark, zero-width space and
// left-to-right mark) from both ends, the env model trims again, and ConvertEmptyStringsToNull
// stores an empty one as null, which reads back as "". A value ending in a newline (a PEM file)
// reads back without it: compare what is wanted with what is read in this form.
func Stored(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || r == 0 || r == '\uFEFF' || r == '\u200B' || r == '\u200E'
	})
}

// ValueHidden reports whether the server withheld the value when this variable was read (token
// without read:sensitive, or is_shown_once). Such a variable cannot be written back as is.
func (e EnvVar) ValueHidden() bool { return e.valueHidden }

// WithValue returns a copy with Value set (and no longer hidden).
func (e EnvVar) WithValue(v string) EnvVar {
	e.Value, e.valueHidden = v, false
	return e
}

// SameAs reports whether e and o have the same key, scope, value and flags (UUID, IsShared and
// hidden-ness aside): a variable that is SameAs its desired state needs no write.
func (e EnvVar) SameAs(o EnvVar) bool {
	return e.Key == o.Key && e.Value == o.Value && e.IsPreview == o.IsPreview &&
		e.IsBuildtime == o.IsBuildtime && e.IsRuntime == o.IsRuntime && e.IsLiteral == o.IsLiteral &&
		e.IsMultiline == o.IsMultiline && e.IsShownOnce == o.IsShownOnce && e.Comment == o.Comment &&
		!e.valueHidden && !o.valueHidden
}

func (e EnvVar) redacted() string {
	v := "<redacted>"
	if e.valueHidden {
		v = "<hidden>"
	}
	var flags []string
	for _, f := range []struct {
		on   bool
		name string
	}{{e.IsPreview, "preview"}, {e.IsBuildtime, "buildtime"}, {e.IsRuntime, "runtime"},
		{e.IsLiteral, "literal"}, {e.IsMultiline, "multiline"}, {e.IsShownOnce, "shown_once"}, {e.IsShared, "shared"}} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	return fmt.Sprintf("%s=%s [%s]", e.Key, v, strings.Join(flags, ","))
}

// String is "KEY=<redacted> [flags]".
func (e EnvVar) String() string { return e.redacted() }

// GoString is like String, so %#v does not print the value either.
func (e EnvVar) GoString() string { return "coolify.EnvVar{" + e.redacted() + "}" }

// Format makes every fmt verb print the redacted form.
func (e EnvVar) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = f.Write([]byte(e.GoString()))
		return
	}
	_, _ = f.Write([]byte(e.redacted()))
}

// LogValue logs the key, uuid and flags, never the value.
func (e EnvVar) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("key", e.Key), slog.String("uuid", e.UUID), slog.Bool("is_preview", e.IsPreview),
		slog.Bool("is_buildtime", e.IsBuildtime), slog.Bool("is_runtime", e.IsRuntime),
		slog.Bool("is_literal", e.IsLiteral), slog.Bool("is_multiline", e.IsMultiline),
		slog.Bool("is_shown_once", e.IsShownOnce), slog.Bool("value_hidden", e.valueHidden),
	)
}

// wireEnv is the JSON shape of an env var written (and of a create's answer, for its uuid).
type wireEnv struct {
	UUID        string  `json:"uuid,omitempty"`
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	IsPreview   *bool   `json:"is_preview,omitempty"`
	IsBuildtime *bool   `json:"is_buildtime,omitempty"`
	IsRuntime   *bool   `json:"is_runtime,omitempty"`
	IsLiteral   *bool   `json:"is_literal,omitempty"`
	IsMultiline *bool   `json:"is_multiline,omitempty"`
	IsShownOnce *bool   `json:"is_shown_once,omitempty"`
	Comment     *string `json:"comment,omitempty"`
}

// readEnv is the JSON shape of an env var as Coolify answers it (listed, or updated): the
// flags as plain bools (null and absent read as false), so a listing does not allocate a
// pointer per flag; the comment a pointer (null: no comment).
type readEnv struct {
	UUID        string   `json:"uuid"`
	Key         string   `json:"key"`
	Value       envValue `json:"value"`
	IsPreview   bool     `json:"is_preview"`
	IsBuildtime bool     `json:"is_buildtime"`
	IsRuntime   bool     `json:"is_runtime"`
	IsLiteral   bool     `json:"is_literal"`
	IsMultiline bool     `json:"is_multiline"`
	IsShownOnce bool     `json:"is_shown_once"`
	IsShared    bool     `json:"is_shared"`
	Comment     *string  `json:"comment"`
}

// envValue is an env var's value as read: absent when Coolify withholds it (a token without
// read:sensitive, or is_shown_once), null for an empty value (Coolify stores "" as null,
// see [Stored]), else the text.
type envValue struct {
	s       string
	present bool
}

// UnmarshalJSON is called only for a value that is present, null included.
func (v *envValue) UnmarshalJSON(b []byte) error {
	v.present = true
	if string(b) == "null" {
		return nil
	}
	return json.Unmarshal(b, &v.s)
}

func (r *readEnv) envVar() EnvVar {
	e := EnvVar{
		UUID: r.UUID, Key: r.Key,
		IsPreview: r.IsPreview, IsBuildtime: r.IsBuildtime, IsRuntime: r.IsRuntime,
		IsLiteral: r.IsLiteral, IsMultiline: r.IsMultiline, IsShownOnce: r.IsShownOnce,
		IsShared: r.IsShared,
	}
	e.Value, e.valueHidden = r.Value.s, !r.Value.present
	if r.Comment != nil {
		e.Comment = *r.Comment
	}
	return e
}

// DeploymentStatus is the status of a deployment (ApplicationDeploymentStatus).
type DeploymentStatus string

// Deployment statuses. The last three are terminal.
const (
	StatusQueued          DeploymentStatus = "queued"
	StatusInProgress      DeploymentStatus = "in_progress"
	StatusFinished        DeploymentStatus = "finished"
	StatusFailed          DeploymentStatus = "failed"
	StatusCancelledByUser DeploymentStatus = "cancelled-by-user"
)

// Terminal reports whether the deployment has ended.
func (s DeploymentStatus) Terminal() bool {
	return s == StatusFinished || s == StatusFailed || s == StatusCancelledByUser
}

// Active reports whether the deployment is queued or in progress.
func (s DeploymentStatus) Active() bool { return s == StatusQueued || s == StatusInProgress }

// Deployment is one row of Coolify's deployment queue.
type Deployment struct {
	UUID            string // deployment_uuid
	ID              int64
	ApplicationID   string
	ApplicationName string
	Status          DeploymentStatus
	Commit          string
	ForceRebuild    bool
	RestartOnly     bool
	PullRequestID   int
	ServerName      string
	DeploymentURL   string // path of the deployment's page in Coolify's UI
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      time.Time // zero until it ends
}

// UnmarshalJSON decodes Coolify's ApplicationDeploymentQueue object leniently.
func (d *Deployment) UnmarshalJSON(data []byte) error {
	var w wireDeployment
	if err := json.Unmarshal(data, &w); err != nil {
		return fmt.Errorf("decode deployment: %w", err)
	}
	*d = w.deployment()
	return nil
}

// wireDeployment is the JSON shape of a deployment as read; the client decodes answers into
// it directly (see [wireApplication]).
type wireDeployment struct {
	UUID            string           `json:"deployment_uuid"`
	ID              int64            `json:"id"`
	ApplicationID   flexString       `json:"application_id"`
	ApplicationName string           `json:"application_name"`
	Status          DeploymentStatus `json:"status"`
	Commit          string           `json:"commit"`
	ForceRebuild    bool             `json:"force_rebuild"`
	RestartOnly     bool             `json:"restart_only"`
	PullRequestID   int              `json:"pull_request_id"`
	ServerName      string           `json:"server_name"`
	DeploymentURL   string           `json:"deployment_url"`
	CreatedAt       flexTime         `json:"created_at"`
	UpdatedAt       flexTime         `json:"updated_at"`
	FinishedAt      flexTime         `json:"finished_at"`
}

func (w *wireDeployment) deployment() Deployment {
	return Deployment{
		UUID: w.UUID, ID: w.ID, ApplicationID: string(w.ApplicationID), ApplicationName: w.ApplicationName,
		Status: w.Status, Commit: w.Commit, ForceRebuild: w.ForceRebuild, RestartOnly: w.RestartOnly,
		PullRequestID: w.PullRequestID, ServerName: w.ServerName, DeploymentURL: w.DeploymentURL,
		CreatedAt: time.Time(w.CreatedAt), UpdatedAt: time.Time(w.UpdatedAt), FinishedAt: time.Time(w.FinishedAt),
	}
}

// deploymentRows is the answer of GET /deployments. Coolify sorts the rows by id with
// Laravel's Collection::sortBy, which keeps each row's key from the database's order: when
// the two orders differ (a row updated after a newer one was created), the answer is a JSON
// object keyed by those positions ({"1": {...}, "0": {...}}) instead of an array. Both
// decode here; the object's rows in no particular order (the caller sorts by id).
type deploymentRows []wireDeployment

func (r *deploymentRows) UnmarshalJSON(data []byte) error {
	if d := bytes.TrimSpace(data); len(d) > 0 && d[0] == '{' {
		var byPosition map[string]wireDeployment
		if err := json.Unmarshal(d, &byPosition); err != nil {
			return err
		}
		*r = slices.Collect(maps.Values(byPosition))
		return nil
	}
	return json.Unmarshal(data, (*[]wireDeployment)(r))
}

// DeployResult is a deployment Coolify accepted and stored.
type DeployResult struct {
	DeploymentUUID string
	ResourceUUID   string
	Message        string
	// Deployment is the deployment as the confirming read found it (nil when that read
	// failed). When it has ended already, there is nothing to wait for: see [Deployment.Err].
	Deployment *Deployment
}

// flexString decodes a JSON string, number or null into a string.
type flexString string

func (f *flexString) UnmarshalJSON(data []byte) error {
	if s, ok := plainString(data); ok {
		*f = flexString(s)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*f = flexString(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(data, &n); err == nil {
		*f = flexString(n.String())
		return nil
	}
	if string(data) == "null" {
		*f = ""
		return nil
	}
	return fmt.Errorf("want string or number, got %.40s", data)
}

// flexTime decodes Laravel timestamps ("2026-08-22T15:22:50.000000Z", RFC 3339, or
// "2006-01-02 15:04:05") and null.
type flexTime time.Time

func (t *flexTime) UnmarshalJSON(data []byte) error {
	s, ok := plainString(data)
	if !ok && (string(data) == "null" || json.Unmarshal(data, &s) != nil) || s == "" {
		*t = flexTime{}
		return nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05"} {
		if v, err := time.Parse(layout, s); err == nil {
			*t = flexTime(v)
			return nil
		}
	}
	*t = flexTime{}
	return nil
}

// plainString returns the text of a JSON string literal that needs no unescaping (no
// backslash, valid UTF-8): the common case, read without a second pass of encoding/json over
// a value the decoder calling UnmarshalJSON has already checked. ok is false for anything
// else, which the caller decodes the general way.
func plainString(data []byte) (string, bool) {
	n := len(data)
	if n < 2 || data[0] != '"' || data[n-1] != '"' {
		return "", false
	}
	in := data[1 : n-1]
	if bytes.IndexByte(in, '\\') >= 0 || bytes.IndexByte(in, '"') >= 0 || !utf8.Valid(in) {
		return "", false
	}
	return string(in), true
}
