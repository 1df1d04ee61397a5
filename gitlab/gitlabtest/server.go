package gitlabtest

import (
	"net/http/httptest"
	"testing"
)

// Server is a [Fake] listening on a loopback port, for tests.
type Server struct {
	*Fake
	// URL is the instance URL to give the client (without /api/v4).
	URL string
	// Token is the access token the fake accepts ([DefaultToken] unless WithToken).
	Token string
	// HTTP is the underlying test server.
	HTTP *httptest.Server
}

// NewServer starts a fake GitLab on a loopback port; it is closed when the test ends.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	f := New(opts...)
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	return &Server{Fake: f, URL: hs.URL, Token: f.token, HTTP: hs}
}
