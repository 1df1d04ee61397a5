package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/hmacsig"
)

// The verify step: what a delivery must carry to be read (a well-formed signature header or
// GitLab's token, a JSON or, from GitHub, form Content-Type) and its signature's check over
// the body read.

// bodyType checks the delivery's Content-Type and reports whether its body is a form
// (application/x-www-form-urlencoded) instead of JSON. A GitHub webhook may be set to either
// (its content type "form", the default when a hook is created, puts the JSON in the form's
// one field, payload); GitLab and the generic webhook send JSON only. Anything else is a 415.
// No Content-Type is allowed: the body must then be JSON.
func bodyType(provider config.Provider, h http.Header) (form bool, err error) {
	ct := h.Get("Content-Type")
	if ct == "" {
		return false, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return false, nil
	case mt == "application/x-www-form-urlencoded" && provider == config.ProviderGitHub:
		return true, nil
	}
	msg := "the delivery's Content-Type must be application/json; set the webhook's content type to JSON"
	if provider == config.ProviderGitHub {
		msg = "the delivery's Content-Type must be application/json or application/x-www-form-urlencoded (the webhook's content type json or form)"
	}
	return false, &httpError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type", field: "Content-Type", message: msg}
}

// formPayload returns the JSON a form-encoded GitHub delivery carries in its one payload
// field, and that JSON's object (decodeObject). A body that is not a form, holds no payload
// field or more than one, or whose payload is not one JSON object, is a 400 naming the field.
func formPayload(body []byte) ([]byte, map[string]json.RawMessage, error) {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, nil, &httpError{status: http.StatusBadRequest, code: "invalid_form",
			message: "the form-encoded body is malformed: " + err.Error()}
	}
	if n := len(vals["payload"]); n != 1 {
		return nil, nil, &httpError{status: http.StatusBadRequest, code: "invalid_form", field: "payload",
			message: fmt.Sprintf("a form-encoded GitHub delivery must hold exactly one payload field, holding the JSON; it holds %d", n)}
	}
	payload := []byte(vals["payload"][0])
	obj, err := decodeObject(payload, nameFormPayload)
	if err != nil {
		var he *httpError
		if errors.As(err, &he) && he.field == "" {
			he.field = "payload"
		}
		return nil, nil, err
	}
	return payload, obj, nil
}

// errBadSignature is the answer to a delivery whose signature or token does not verify.
func errBadSignature(msg string) error {
	return &httpError{status: http.StatusUnauthorized, code: "bad_signature", message: msg}
}

// verifyDelivery checks a delivery's signature (github, generic) or token (gitlab) in
// constant time. It returns a 401 *httpError when it does not verify.
func verifyDelivery(provider config.Provider, secret []byte, h http.Header, body []byte) error {
	if len(secret) == 0 {
		return errBadSignature("no secret configured")
	}
	switch provider {
	case config.ProviderGitLab:
		tok := h.Get(headerGitLabToken)
		if tok == "" {
			return errBadSignature("missing " + headerGitLabToken)
		}
		a, b := sha256.Sum256([]byte(tok)), sha256.Sum256(secret)
		if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			return errBadSignature(headerGitLabToken + " does not match")
		}
		return nil
	case config.ProviderGitHub, config.ProviderGeneric:
		name := headerGitHubSignature
		if provider == config.ProviderGeneric {
			name = headerGenericSig
		}
		return verifyHMAC(name, h.Get(name), secret, body)
	}
	return errBadSignature("unknown provider")
}

// verifyShape checks what can be checked before the body is read: GitLab's token whole,
// the others' signature header present and well-formed.
func verifyShape(provider config.Provider, secret []byte, h http.Header) error {
	switch provider {
	case config.ProviderGitHub:
		_, err := parseSignature(headerGitHubSignature, h.Get(headerGitHubSignature))
		return err
	case config.ProviderGeneric:
		_, err := parseSignature(headerGenericSig, h.Get(headerGenericSig))
		return err
	}
	return verifyDelivery(provider, secret, h, nil)
}

// parseSignature checks the shape of a "sha256=<hex>" header value.
func parseSignature(header, value string) ([]byte, error) {
	got, err := hmacsig.Parse(value)
	return got, signatureError(header, err)
}

// verifyHMAC checks "sha256=<hex>" against HMAC-SHA256(secret, body).
func verifyHMAC(header, value string, secret, body []byte) error {
	return signatureError(header, hmacsig.Verify(value, secret, body))
}

// signatureError turns an hmacsig error on header into the 401 answer (nil stays nil).
func signatureError(header string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, hmacsig.ErrMissing):
		return errBadSignature("missing " + header)
	}
	return errBadSignature(header + " " + err.Error())
}

// Sign returns the value of X-Signature-256 (and GitHub's X-Hub-Signature-256) for body:
// "sha256=" and the hex HMAC-SHA256 of body under secret. CI scripts calling the generic
// webhook and tests use it.
func Sign(secret, body []byte) string { return hmacsig.Sign(secret, body) }
