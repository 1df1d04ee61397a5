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

// decode reads the request body as one JSON value into v. Unknown fields, trailing data, a
// wrong type, a body that is not JSON or too large are errors that answer 400 or 413 and name
// the field when there is one. An empty body decodes as {} when allowEmpty is set.
func decode(r *http.Request, v any, allowEmpty bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return &httpError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
				message: "the body must be JSON (Content-Type: application/json)", field: "Content-Type"}
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	return decodeBytes(body, v, allowEmpty)
}

// decodeBytes is decode on a body already read.
func decodeBytes(body []byte, v any, allowEmpty bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return &httpError{status: http.StatusBadRequest, code: "invalid_json", message: "the request body is empty; send a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return &httpError{status: http.StatusBadRequest, code: "invalid_json", message: "the body holds more than one JSON value"}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &httpError{status: http.StatusBadRequest, code: "invalid_json", message: "unexpected data after the JSON value"}
	}
	return nil
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
