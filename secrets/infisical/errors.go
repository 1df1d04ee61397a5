package infisical

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Sentinel errors matched (errors.Is) by *APIError.
var (
	// ErrUnauthorized: the credentials or the token were refused (401, or 403 with error
	// "TokenError"). The client has already logged in again once when it sees this.
	ErrUnauthorized = errors.New("infisical: unauthorized")
	// ErrForbidden: the identity lacks a permission (403 other than TokenError), including a
	// listed secret that references one whose value the identity may not read (Infisical
	// refuses the whole list: "Failed to expand one or more secret references", with a detail
	// naming both secrets; a Source then reads the keys asked for one by one, and only the
	// referencing key fails).
	ErrForbidden = errors.New("infisical: permission denied")
	// ErrNotFound: the project, environment or folder does not exist or is out of the
	// identity's scope (Infisical answers 404 for both).
	ErrNotFound = errors.New("infisical: not found")
	// ErrRateLimited: 429 after every retry was spent.
	ErrRateLimited = errors.New("infisical: rate limited")
	// ErrHiddenValue is matched by *HiddenValueError.
	ErrHiddenValue = errors.New("infisical: secret value hidden")
	// ErrUnresolvedReference is matched by *UnresolvedReferenceError.
	ErrUnresolvedReference = errors.New("infisical: unresolved secret reference")
)

// APIError is a non-2xx answer from Infisical. It keeps the request's method and path (never
// the query or body), the status and the server's error body {reqId, statusCode, message,
// error, details}. Message and Details never contain the client secret or an access token: the
// client scrubs them.
type APIError struct {
	Method     string
	Path       string
	StatusCode int
	// Code is the server's "error" field: "TokenError", "NotFound", "ValidationFailure", …
	Code string
	// Message is the server's message; a 422's array of issues is joined with "; ".
	Message string
	// ReqID is the server's request id, for Infisical support.
	ReqID string
	// Details are the text entries of the server's details (a ForbiddenRequestError's list of
	// reasons, e.g. which secret references one the identity may not read), at most
	// maxDetails, each bounded like Message; details that are not text are dropped.
	Details []string
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "infisical: %s %s: %d", e.Method, e.Path, e.StatusCode)
	if e.Code != "" {
		b.WriteString(" ")
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if len(e.Details) > 0 {
		b.WriteString(": ")
		b.WriteString(strings.Join(e.Details, "; "))
	}
	if e.ReqID != "" {
		fmt.Fprintf(&b, " (reqId %s)", e.ReqID)
	}
	return b.String()
}

// Is matches the sentinel errors of this package by status and error name.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.tokenRejected()
	case ErrForbidden:
		return e.StatusCode == http.StatusForbidden && !e.tokenRejected()
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests
	}
	return false
}

// tokenRejected reports an answer after which logging in again may help: 401 (bad or
// exhausted token), or 403 with error "TokenError" (expired, malformed or badly signed JWT).
func (e *APIError) tokenRejected() bool {
	return e.StatusCode == http.StatusUnauthorized ||
		(e.StatusCode == http.StatusForbidden && e.Code == "TokenError")
}

// HiddenValueError reports requested secrets whose values Infisical hid
// (secretValueHidden=true): the machine identity may see that the secret exists but lacks the
// permission to read its value. Grant the identity read-value permission on the path.
type HiddenValueError struct {
	Scope Scope
	Keys  []string
}

func (e *HiddenValueError) Error() string {
	return fmt.Sprintf("%s: value hidden for %s (the identity may not read secret values)",
		e.Scope, strings.Join(e.Keys, ", "))
}

// Is makes errors.Is(err, ErrHiddenValue) true.
func (e *HiddenValueError) Is(target error) bool { return target == ErrHiddenValue }

// UnresolvedReferenceError reports requested secrets whose value still holds a secret
// reference after Infisical expanded references: the referenced secret, folder or
// environment does not exist, the references form a cycle, the chain is deeper than Infisical
// follows, or, in an imported secret, the identity may not read the referenced secret (the
// server then leaves the imported value unexpanded). Infisical leaves such a reference in the value as written, so the value
// is not the secret's and is not used. Fix the reference in Infisical.
//
// It names the keys and the references (the text between ${ and }), never a value.
type UnresolvedReferenceError struct {
	Scope Scope
	// Refs maps each key to the names of the references left in its value.
	Refs map[string][]string
}

// Bounds on what an UnresolvedReferenceError prints of each key.
const (
	maxRefsShown   = 5
	maxRefNameShow = 128
)

func (e *UnresolvedReferenceError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: unresolved secret reference in ", e.Scope)
	for i, k := range slices.Sorted(maps.Keys(e.Refs)) {
		if i > 0 {
			b.WriteString(", ")
		}
		refs := e.Refs[k]
		shown := make([]string, 0, min(len(refs), maxRefsShown))
		for _, r := range refs[:min(len(refs), maxRefsShown)] {
			if len(r) > maxRefNameShow {
				r = r[:maxRefNameShow] + "…"
			}
			shown = append(shown, "${"+r+"}")
		}
		if len(refs) > maxRefsShown {
			shown = append(shown, fmt.Sprintf("%d more", len(refs)-maxRefsShown))
		}
		fmt.Fprintf(&b, "%s (%s)", k, strings.Join(shown, " "))
	}
	b.WriteString(": Infisical left the reference in the value (the referenced secret, folder or " +
		"environment does not exist, the references form a cycle, or, in an imported secret, the " +
		"identity may not read the referenced secret)")
	return b.String()
}

// Is makes errors.Is(err, ErrUnresolvedReference) true.
func (e *UnresolvedReferenceError) Is(target error) bool { return target == ErrUnresolvedReference }

// maxMessage bounds the server message, and each detail, kept in an APIError; maxDetails
// bounds how many details are kept.
const (
	maxMessage = 512
	maxDetails = 5
)

// decodeAPIError builds an APIError from a response body, leniently: message may be a string,
// an array of strings or zod issues ({message, path}), or anything else; a body that is not
// JSON at all (a proxy's HTML page) becomes a truncated text message. scrub removes secrets.
func decodeAPIError(method, path string, status int, body []byte, scrub func(string) string) *APIError {
	e := &APIError{Method: method, Path: path, StatusCode: status}
	var raw struct {
		ReqID   string          `json:"reqId"`
		Error   string          `json:"error"`
		Message json.RawMessage `json:"message"`
		Details json.RawMessage `json:"details"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		e.Message = truncate(scrub(strings.TrimSpace(string(body))))
		return e
	}
	e.ReqID, e.Code = raw.ReqID, raw.Error
	e.Message = truncate(scrub(messageText(raw.Message)))
	var details []json.RawMessage
	if json.Unmarshal(raw.Details, &details) == nil {
		for _, d := range details {
			var text string
			if json.Unmarshal(d, &text) == nil && text != "" && len(e.Details) < maxDetails {
				e.Details = append(e.Details, truncate(scrub(text)))
			}
		}
	}
	return e
}

func messageText(m json.RawMessage) string {
	if len(m) == 0 || string(m) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(m, &s) == nil {
		return s
	}
	var items []json.RawMessage
	if json.Unmarshal(m, &items) == nil {
		parts := make([]string, 0, len(items))
		for _, it := range items {
			var str string
			if json.Unmarshal(it, &str) == nil {
				parts = append(parts, str)
				continue
			}
			var issue struct {
				Message string `json:"message"`
				Path    []any  `json:"path"`
			}
			if json.Unmarshal(it, &issue) == nil && issue.Message != "" {
				if len(issue.Path) > 0 {
					segs := make([]string, len(issue.Path))
					for i, p := range issue.Path {
						segs[i] = fmt.Sprint(p)
					}
					parts = append(parts, strings.Join(segs, ".")+": "+issue.Message)
				} else {
					parts = append(parts, issue.Message)
				}
				continue
			}
			parts = append(parts, string(it))
		}
		return strings.Join(parts, "; ")
	}
	return string(m)
}

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return strings.ToValidUTF8(s[:maxMessage], "") + "…"
}
