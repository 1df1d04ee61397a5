package client

import (
	"fmt"
	"strings"
)

// APIError is the daemon's answer to a request it did not carry out: a status other than
// 2xx, with the API's error body.
type APIError struct {
	Method string // HTTP method
	Path   string // the request's path below the daemon's URL, with its query
	// StatusCode is the answer's status code; Status its status line ("403 Forbidden").
	StatusCode int
	Status     string
	// Code is the API's error code ("unauthorized", "no_token_configured", "lock_not_found",
	// …); "" when the body was not the API's error.
	Code string
	// Message is the API's message, or the body's text when it was not the API's error.
	Message string
	// Field names the request field or header the message is about, when one is.
	Field string
	// Access is the route's access level: which token it takes.
	Access Access
}

// Error reads like `POST /v1/pipelines/prod/runs: 422 Unprocessable Entity: build: …`.
func (e *APIError) Error() string {
	msg := e.Message
	if e.Field != "" && !strings.HasPrefix(msg, e.Field) {
		msg = e.Field + ": " + msg
	}
	return fmt.Sprintf("%s %s: %s: %s", e.Method, e.Path, e.Status, msg)
}

// UnreachableError is a request that got no answer: the connection was refused or dropped,
// or it timed out, after the retries.
type UnreachableError struct {
	Method string
	URL    string // the daemon's URL and the request's path
	Err    error
}

func (e *UnreachableError) Error() string { return fmt.Sprintf("%s %s: %v", e.Method, e.URL, e.Err) }

func (e *UnreachableError) Unwrap() error { return e.Err }

// UnreadableError is a 2xx answer whose body is not the JSON the route answers.
type UnreadableError struct {
	Method string
	Path   string
	Err    error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("%s %s: unreadable answer: %v", e.Method, e.Path, e.Err)
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// URLError is a request that could not be made: the daemon's URL given to New is malformed.
type URLError struct {
	Method string
	URL    string
	Err    error
}

func (e *URLError) Error() string { return fmt.Sprintf("%s %s: %v", e.Method, e.URL, e.Err) }

func (e *URLError) Unwrap() error { return e.Err }
