package infisicaltest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// maxBody bounds a request body.
const maxBody = 1 << 20

// routes is the map of the fake API.
func (h *Handler) routes() {
	h.mux.HandleFunc("POST /api/v1/auth/universal-auth/login", h.handleLogin)
	h.mux.HandleFunc("GET /api/v3/secrets/raw", h.handleList("workspaceId"))
	h.mux.HandleFunc("GET /api/v4/secrets", h.handleList("projectId"))
	h.mux.HandleFunc("GET /api/v3/secrets/raw/{secretName}", h.handleGet)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, reqID := fromContext(r.Context())
		writeErrorNamed(w, reqID, http.StatusNotFound, "Not Found", fmt.Sprintf("Route %s:%s not found", r.Method, r.URL.Path))
	})
}

// ServeHTTP records the request, applies the latency and fault knobs, then routes it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	req := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, UserAgent: r.UserAgent()}

	h.mu.Lock()
	h.reqSeq++
	reqID := fmt.Sprintf("req-%d", h.reqSeq)
	latency, hook := h.latency, h.onRequest
	var fault func()
	switch {
	case h.rateLimit.n > 0:
		h.rateLimit.n--
		secs := h.rateLimit.seconds
		fault = func() {
			writeError(rec, reqID, http.StatusTooManyRequests,
				fmt.Sprintf("Rate limit exceeded. Please try again in %d seconds", secs))
		}
	case h.failNext.n > 0:
		h.failNext.n--
		status := h.failNext.status
		fault = func() { writeError(rec, reqID, status, "Something went wrong") }
	}
	h.mu.Unlock()

	// Read the body now: the server notices a client that went away (and cancels
	// r.Context()) only once the body has been read to its end.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		fault = func() { writeError(rec, reqID, http.StatusRequestEntityTooLarge, "Request body is too large") }
	}

	if hook != nil {
		hook(req)
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	if fault != nil {
		fault()
	} else {
		h.mux.ServeHTTP(rec, r.WithContext(withReqID(r.Context(), reqID, rec)))
	}

	req.Status, req.ClientID = rec.status, rec.clientID
	h.mu.Lock()
	h.requests = append(h.requests, req)
	h.mu.Unlock()
}

// recorder keeps the status and the identity a handler attributed the call to.
type recorder struct {
	http.ResponseWriter
	status   int
	clientID string
}

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, reqID string, status int, message any) {
	writeErrorNamed(w, reqID, status, errorNames[status], message)
}

func writeErrorNamed(w http.ResponseWriter, reqID string, status int, name string, message any) {
	if name == "" {
		name = http.StatusText(status)
	}
	writeJSON(w, status, apiError{ReqID: reqID, StatusCode: status, Message: message, Error: name})
}

type loginBody struct {
	ClientID     *string `json:"clientId"`
	ClientSecret *string `json:"clientSecret"`
}

type issue struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Path    []string `json:"path"`
}

func (h *Handler) handleLogin(w http.ResponseWriter, r *http.Request) {
	rec, reqID := fromContext(r.Context())
	var body loginBody
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, reqID, http.StatusBadRequest, "Body is not valid JSON")
		return
	}
	var issues []issue
	if body.ClientID == nil {
		issues = append(issues, issue{Code: "invalid_type", Message: "Required", Path: []string{"clientId"}})
	}
	if body.ClientSecret == nil {
		issues = append(issues, issue{Code: "invalid_type", Message: "Required", Path: []string{"clientSecret"}})
	}
	if len(issues) > 0 {
		writeError(w, reqID, http.StatusUnprocessableEntity, issues)
		return
	}

	h.mu.Lock()
	id, ok := h.identities[*body.ClientID]
	if !ok || id.ClientSecret != *body.ClientSecret {
		h.mu.Unlock()
		writeError(w, reqID, http.StatusUnauthorized, "Invalid credentials")
		return
	}
	rec.clientID = id.ClientID
	tok := "fake-infisical-token-" + newID()
	ttl := id.TokenTTL
	h.tokens[tok] = token{clientID: id.ClientID, expires: h.now().Add(ttl)}
	h.mu.Unlock()

	secs := int64(ttl / time.Second)
	writeJSON(w, http.StatusOK, map[string]any{
		"accessToken":       tok,
		"expiresIn":         secs,
		"accessTokenMaxTTL": secs,
		"tokenType":         "Bearer",
	})
}

// authenticate returns the identity behind the bearer token, or writes the error the real
// server answers.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (*Identity, bool) {
	rec, reqID := fromContext(r.Context())
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		writeError(w, reqID, http.StatusUnauthorized, "Failed to authenticate: missing bearer token")
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.tokens[tok]
	if !ok {
		writeErrorNamed(w, reqID, http.StatusForbidden, "TokenError", "Invalid token")
		return nil, false
	}
	rec.clientID = t.clientID
	if !h.now().Before(t.expires) {
		writeErrorNamed(w, reqID, http.StatusForbidden, "TokenError", "Your token has expired. Please re-authenticate.")
		return nil, false
	}
	id, ok := h.identities[t.clientID]
	if !ok {
		writeErrorNamed(w, reqID, http.StatusForbidden, "TokenError", "Invalid token")
		return nil, false
	}
	cp := *id
	return &cp, true
}

// secretJSON is one secret as the raw list routes return it.
type secretJSON struct {
	ID                string    `json:"id"`
	ID2               string    `json:"_id"`
	Workspace         string    `json:"workspace"`
	Environment       string    `json:"environment"`
	Version           int       `json:"version"`
	Type              string    `json:"type"`
	SecretKey         string    `json:"secretKey"`
	SecretValue       string    `json:"secretValue"`
	SecretComment     string    `json:"secretComment"`
	SecretValueHidden bool      `json:"secretValueHidden"`
	SecretPath        string    `json:"secretPath"`
	CreatedAt         time.Time `json:"createdAt"`
	UpdatedAt         time.Time `json:"updatedAt"`
	Tags              []any     `json:"tags"`
	SecretMetadata    []any     `json:"secretMetadata"`
}

type importJSON struct {
	SecretPath  string       `json:"secretPath"`
	Environment string       `json:"environment"`
	FolderID    string       `json:"folderId"`
	Secrets     []secretJSON `json:"secrets"`
}

// secretsRequest is what the secrets routes read from a request: its id, the identity, the
// folder and the flags.
type secretsRequest struct {
	reqID                     string
	id                        *Identity
	f                         Folder
	expand, withImports, view bool
}

// secretsQuery authenticates r and reads its folder (the project from projectParam) and its
// flags, or writes the error the server answers.
func (h *Handler) secretsQuery(w http.ResponseWriter, r *http.Request, projectParam string) (secretsRequest, bool) {
	_, reqID := fromContext(r.Context())
	id, ok := h.authenticate(w, r)
	if !ok {
		return secretsRequest{}, false
	}
	q := r.URL.Query()
	f := Folder{ProjectID: q.Get(projectParam), Environment: q.Get("environment"), Path: q.Get("secretPath")}.norm()
	if f.ProjectID == "" || f.Environment == "" {
		writeError(w, reqID, http.StatusBadRequest, "Missing project id or environment")
		return secretsRequest{}, false
	}
	return secretsRequest{reqID: reqID, id: id, f: f,
		expand:      q.Get("expandSecretReferences") == "true",
		withImports: q.Get("include_imports") == "true",
		view:        q.Get("viewSecretValue") != "false", // the server's default is true
	}, true
}

func (h *Handler) handleList(projectParam string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sq, ok := h.secretsQuery(w, r, projectParam)
		if !ok {
			return
		}
		reqID, id, f := sq.reqID, sq.id, sq.f

		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.envs[[2]string{f.ProjectID, f.Environment}] {
			writeError(w, reqID, http.StatusNotFound,
				fmt.Sprintf("Environment with slug '%s' in project with ID '%s' not found", f.Environment, f.ProjectID))
			return
		}
		fo, ok := h.folders[f]
		if !ok {
			writeError(w, reqID, http.StatusNotFound,
				fmt.Sprintf("Folder with path '%s' in environment with slug '%s' not found", f.Path, f.Environment))
			return
		}
		if sq.view && h.refuseUnreadable && slices.ContainsFunc(fo.order, func(k string) bool { return !id.canRead(f, k) }) {
			// getSecrets checks read-value permission on each secret it lists, before expanding.
			writeErrorNamed(w, reqID, http.StatusForbidden, "ForbiddenError", "You do not have permission to read secret values")
			return
		}
		own, denied := h.render(f, fo, id, listing{expand: sq.expand, view: sq.view})
		if len(denied) > 0 {
			// The server expands each secret and, when any expansion was refused, answers
			// ForbiddenRequestError with one detail per refused secret.
			writeJSON(w, http.StatusForbidden, apiError{ReqID: reqID, StatusCode: http.StatusForbidden,
				Message: "Failed to expand one or more secret references", Error: "ForbiddenError", Details: denied})
			return
		}
		out := struct {
			Secrets []secretJSON `json:"secrets"`
			Imports []importJSON `json:"imports,omitempty"`
		}{Secrets: own}
		if sq.withImports {
			out.Imports = []importJSON{}
			for _, imp := range fo.imports {
				ifo, ok := h.folders[imp]
				if !ok {
					continue
				}
				secs, _ := h.render(imp, ifo, id, listing{expand: sq.expand, view: sq.view, imported: true})
				out.Imports = append(out.Imports, importJSON{
					SecretPath: imp.Path, Environment: imp.Environment, FolderID: ifo.id, Secrets: secs,
				})
			}
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// handleGet serves one secret by name, as the server's getSecretByName does: the folder's own
// secret, else the last import of the folder that has it (with include_imports).
func (h *Handler) handleGet(w http.ResponseWriter, r *http.Request) {
	sq, ok := h.secretsQuery(w, r, "workspaceId")
	if !ok {
		return
	}
	reqID, id, f, name := sq.reqID, sq.id, sq.f, r.PathValue("secretName")

	h.mu.Lock()
	defer h.mu.Unlock()
	fo, ok := h.folders[f]
	if !ok {
		writeError(w, reqID, http.StatusNotFound,
			fmt.Sprintf("Folder with path '%s' in environment with slug '%s' not found", f.Path, f.Environment))
		return
	}
	at, s := f, fo.secrets[name]
	imported := false
	for i := len(fo.imports) - 1; s == nil && sq.withImports && i >= 0; i-- {
		if ifo, ok := h.folders[fo.imports[i]]; ok && ifo.secrets[name] != nil {
			at, s, imported = fo.imports[i], ifo.secrets[name], true
		}
	}
	if s == nil {
		writeError(w, reqID, http.StatusNotFound, fmt.Sprintf("Secret with name '%s' not found", name))
		return
	}
	v := s.value
	if sq.expand && sq.view {
		ev, err := h.expandValue(at, name, v, id)
		switch {
		case err == nil:
			v = ev
		case !imported: // an imported secret keeps its raw value, as in the list
			writeErrorNamed(w, reqID, http.StatusForbidden, "ForbiddenError", err.Error())
			return
		}
	}
	if sq.view && !id.canRead(at, name) {
		what := "secret value"
		if imported {
			what = "secret import value"
		}
		writeErrorNamed(w, reqID, http.StatusForbidden, "ForbiddenReadSecretError",
			fmt.Sprintf("You do not have permission to view %s on secret with name '%s'", what, name))
		return
	}
	if !sq.view {
		v = HiddenValue
	}
	writeJSON(w, http.StatusOK, map[string]secretJSON{"secret": s.json(at, name, v, !sq.view)})
}

// json is secret key of folder f as the routes return it, with value v.
func (s *secret) json(f Folder, key, v string, hidden bool) secretJSON {
	return secretJSON{
		ID: s.id, ID2: s.id, Workspace: f.ProjectID, Environment: f.Environment,
		Version: s.version, Type: "shared", SecretKey: key, SecretValue: v,
		SecretValueHidden: hidden, SecretPath: f.Path,
		CreatedAt: s.createdAt, UpdatedAt: s.updatedAt, Tags: []any{}, SecretMetadata: []any{},
	}
}

// listing is how a folder is rendered: the list's expandSecretReferences and viewSecretValue,
// and whether the folder is an import of the one listed.
type listing struct {
	expand, view, imported bool
}

// render returns a folder's secrets as the identity sees them, and a message for each secret
// whose expansion was refused because it references a secret the identity may not read. Such a
// secret keeps its raw value: the server drops the refusal for an imported secret and answers
// 403 for the folder's own. When values are asked for (view), an imported secret whose value
// the identity may not read is left out, as the server's fnSecretsV2FromImports does; one of
// the folder's own comes back hidden. Without view every value is hidden. Callers hold mu.
func (h *Handler) render(f Folder, fo *folder, id *Identity, l listing) ([]secretJSON, []string) {
	out := make([]secretJSON, 0, len(fo.order))
	var denied []string
	for _, k := range fo.order {
		s := fo.secrets[k]
		v := s.value
		readable := id.canRead(f, k)
		if l.imported && l.view && !readable {
			continue
		}
		hidden := !l.view || !readable
		switch {
		case hidden:
			v = HiddenValue // hidden before expansion: the placeholder holds no reference
		case l.expand:
			if ev, err := h.expandValue(f, k, v, id); err != nil {
				denied = append(denied, err.Error())
			} else {
				v = ev
			}
		}
		out = append(out, s.json(f, k, v, hidden))
	}
	return out, denied
}

// canRead reports whether the identity may read the value of secret key of folder f.
func (id *Identity) canRead(f Folder, key string) bool {
	return !id.HideValues && !slices.Contains(id.HiddenKeys, key) && !slices.Contains(id.HiddenFolders, f.norm())
}

// refDenied is a reference to a secret the identity may not read, with the server's message.
type refDenied struct {
	target, from       Folder
	targetKey, fromKey string
}

func (e *refDenied) Error() string {
	return fmt.Sprintf("You do not have permission to read secret '%s' in environment '%s' at path '%s', "+
		"which is referenced by secret '%s' in environment '%s' at path '%s'.",
		e.targetKey, e.target.Environment, e.target.Path, e.fromKey, e.from.Environment, e.from.Path)
}

// expandValue expands the references in v, the value of secret key of folder f, the way
// Infisical does: ${KEY} is a key of f, ${env.KEY} a key at the root of environment env,
// ${env.a.b.KEY} a key of folder /a/b there. A reference to a secret, folder or environment
// that does not exist, or to another project, stays as written; a reference back into its own
// chain (a cycle) is replaced by the raw value of the secret it names, references and all; a
// chain is followed maxRefDepth levels deep. When expanding formed references that were not
// there before (${env.${KEY}.X}), further passes expand them, at most maxRefDepth. A reference,
// even to a secret that does not exist, to a secret whose value id may not read ends the
// expansion with a *refDenied. Callers hold mu.
func (h *Handler) expandValue(f Folder, key, v string, id *Identity) (string, error) {
	self := f.Environment + ":" + f.Path + ":" + key
	before := refIDs(v)
	for pass := 0; len(before) > 0; pass++ {
		x := expansion{h: h, id: id, root: f, rootKey: key}
		v = x.refs(f, v, map[string]bool{self: true}, 0)
		if x.denied != nil {
			return "", x.denied
		}
		if pass == maxRefDepth {
			break
		}
		after := refIDs(v)
		formed := false
		for r := range after {
			formed = formed || !before[r]
		}
		if !formed {
			break
		}
		before = after
	}
	return v, nil
}

// expansion is one pass over the value of secret rootKey of folder root.
type expansion struct {
	h       *Handler
	id      *Identity
	root    Folder
	rootKey string
	denied  *refDenied // the first reference to a secret id may not read
}

// refs replaces the references in v, seen from folder f, by the expanded values they name;
// visiting holds the secrets of the chain that led here. Callers hold mu.
func (x *expansion) refs(f Folder, v string, visiting map[string]bool, depth int) string {
	if depth > maxRefDepth {
		return v
	}
	return refRe.ReplaceAllStringFunc(v, func(m string) string {
		if x.denied != nil {
			return m
		}
		env, p, key, kind := splitRef(m[2 : len(m)-1])
		target := f
		switch kind {
		case refCrossProject:
			return m
		case refNested:
			target = Folder{ProjectID: f.ProjectID, Environment: env, Path: p}
		}
		if !x.id.canRead(target, key) {
			x.denied = &refDenied{target: target, targetKey: key, from: x.root, fromKey: x.rootKey}
			return m
		}
		fo, ok := x.h.folders[target]
		if !ok {
			return m
		}
		s, ok := fo.secrets[key]
		if !ok {
			return m
		}
		id := target.Environment + ":" + target.Path + ":" + key
		if visiting[id] {
			return s.value
		}
		visiting[id] = true
		defer delete(visiting, id)
		return x.refs(target, s.value, visiting, depth+1)
	})
}

type ctxKey struct{}

type reqInfo struct {
	rec   *recorder
	reqID string
}

func withReqID(ctx context.Context, reqID string, rec *recorder) context.Context {
	return context.WithValue(ctx, ctxKey{}, reqInfo{rec: rec, reqID: reqID})
}

// fromContext returns the recorder and request id ServeHTTP attached.
func fromContext(ctx context.Context) (*recorder, string) {
	ri, _ := ctx.Value(ctxKey{}).(reqInfo)
	if ri.rec == nil {
		ri.rec = &recorder{}
	}
	return ri.rec, ri.reqID
}
