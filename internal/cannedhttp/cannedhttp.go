// Package cannedhttp is an http.RoundTripper that answers every request with one status and
// body, so the fuzz tests of the outside-API clients drive their real decoding path without a
// network.
package cannedhttp

import (
	"bytes"
	"io"
	"net/http"
)

// Transport answers every request with Status and Body as JSON, with Retry-After: 1.
type Transport struct {
	Status int
	Body   []byte
}

// RoundTrip implements http.RoundTripper. It drains and closes the request body.
func (t Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{
		StatusCode: t.Status, Status: http.StatusText(t.Status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/json"}, "Retry-After": {"1"}},
		Body:    io.NopCloser(bytes.NewReader(t.Body)),
		Request: r,
	}, nil
}
