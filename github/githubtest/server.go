package githubtest

import (
	"net/http/httptest"
	"testing"
)

// Server is a [Fake] listening on a loopback port, for tests.
type Server struct {
	*Fake
	// URL is the API base URL to give the client, with a trailing slash (and the prefix of
	// WithPrefix).
	URL string
	// Token is the token the fake accepts ([DefaultToken] unless WithToken).
	Token string
	// HTTP is the underlying test server.
	HTTP *httptest.Server
}

// NewServer starts a fake GitHub API on a loopback port; it is closed when the test ends.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	f := New(opts...)
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	return &Server{Fake: f, URL: hs.URL + f.prefix + "/", Token: f.token, HTTP: hs}
}
