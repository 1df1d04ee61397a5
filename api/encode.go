package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// encode writes v as the JSON body of an answer with the given status.
func encode(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(true)
	if err := enc.Encode(v); err != nil {
		// Only a programming error (an unencodable type) gets here.
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"could not encode the answer"}}` + "\n")
	}
	writeJSON(w, status, buf.Bytes())
}

// writeJSON writes body, already JSON, as an answer with the given status.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	writeJSONHeader(w, status)
	_, _ = w.Write(body)
}

// writeJSONHeader sends the status and the headers of a JSON answer.
func writeJSONHeader(w http.ResponseWriter, status int) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
}

// decode reads the request body (readJSON) as one JSON value into v (decodeValue): unknown
// fields, a wrong type, malformed JSON or data after the value answer 400 naming the field
// when there is one. An empty body decodes as {} when allowEmpty is set, else answers 400.
func decode(r *http.Request, v any, allowEmpty bool) error {
	body, err := readJSON(r)
	if err != nil {
		return err
	}
	return decodeBytes(body, v, allowEmpty)
}

// decodeBytes is decode on a body already read.
func decodeBytes(body []byte, v any, allowEmpty bool) error {
	if isBlank(body) {
		if allowEmpty {
			return nil
		}
		return errEmpty(nameRequestBody)
	}
	return decodeValue(body, v)
}

// readJSON reads the body of a request that must be JSON: a Content-Type other than JSON
// (none is taken as JSON) answers 415, a body over the route's limit 413.
func readJSON(r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, &httpError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
				message: "the body must be JSON (Content-Type: application/json)", field: "Content-Type"}
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, bodyError(err)
	}
	return body, nil
}

// What the answers of decodeObject call the JSON they judge.
const (
	nameRequestBody = "request body"
	nameFormPayload = "payload field" // a form-encoded GitHub delivery's
)

// decodeObject is the rule for a body that must be exactly one JSON object (a trigger, a
// webhook delivery): it returns the object's members, raw. An empty body, another kind of
// value (null included), malformed JSON or data after the object is a 400 invalid_json;
// name is what the answer calls the body (nameRequestBody, nameFormPayload).
func decodeObject(body []byte, name string) (map[string]json.RawMessage, error) {
	if isBlank(body) {
		return nil, errEmpty(name)
	}
	if bytes.TrimLeft(body, " \t\r\n")[0] != '{' {
		return nil, &httpError{status: http.StatusBadRequest, code: "invalid_json", message: "the " + name + " must be a JSON object"}
	}
	var obj map[string]json.RawMessage
	if err := decodeValue(body, &obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// decodeValue decodes body, which must hold exactly one JSON value, into v. Malformed JSON, a
// member of the wrong type or one v does not name (v a struct), and data after the value are
// errors that answer 400 and name the field when there is one.
func decodeValue(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &httpError{status: http.StatusBadRequest, code: "invalid_json", message: "unexpected data after the JSON value"}
	}
	return nil
}

// isBlank reports whether a body holds nothing but white space.
func isBlank(body []byte) bool { return len(bytes.TrimSpace(body)) == 0 }

// errEmpty is the answer to an empty body, called name.
func errEmpty(name string) error {
	return &httpError{status: http.StatusBadRequest, code: "invalid_json", message: "the " + name + " is empty; send a JSON object"}
}

// bodyError turns a failed body read into its answer: 413 when the body was over the limit.
func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &httpError{status: http.StatusRequestEntityTooLarge, code: "body_too_large",
			message: fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit)}
	}
	if errors.Is(err, errBodyBudget) {
		return errBusy()
	}
	if isTimeout(err) {
		return &httpError{status: http.StatusRequestTimeout, code: "body_timeout",
			message: "the request body did not arrive in time; send it whole within a few seconds of the headers"}
	}
	return &httpError{status: http.StatusBadRequest, code: "bad_body", message: "could not read the request body"}
}

// jsonError turns a json decoding error into a 400 that names the field when it can.
func jsonError(err error) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syn):
		return &httpError{status: http.StatusBadRequest, code: "invalid_json",
			message: fmt.Sprintf("malformed JSON at byte %d", syn.Offset)}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &httpError{status: http.StatusBadRequest, code: "invalid_json", message: "the JSON body ends too soon"}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return &httpError{status: http.StatusBadRequest, code: "invalid", field: field,
			message: fmt.Sprintf("invalid %s: got a JSON %s, want %s", field, typ.Value, jsonKind(typ.Type.String()))}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return unknownField(strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`))
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return bodyError(err)
	}
	return &httpError{status: http.StatusBadRequest, code: "invalid_json", message: "the body is not valid JSON for this request"}
}

// unknownField is the answer to a body with a field the request does not take.
func unknownField(field string) error {
	return &httpError{status: http.StatusBadRequest, code: "unknown_field", field: field,
		message: fmt.Sprintf("unknown field %q", field)}
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "struct"), strings.HasPrefix(goType, "api."):
		return "an object"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"), strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "bool":
		return "a boolean"
	}
	return goType
}
