package coolifytest

import (
	"net/http/httptest"
	"testing"
)

// Server is a [Fake] listening on a loopback port, for tests.
type Server struct {
	*Fake
	// URL is the instance URL to give the client (without /api/v1).
	URL string
	// Token is [DefaultToken], which holds read, write, deploy and read:sensitive.
	Token string
	// HTTP is the underlying test server.
	HTTP *httptest.Server
}

// NewServer starts a fake Coolify on a loopback port; it is closed when the test ends.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	f := New(opts...)
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	return &Server{Fake: f, URL: hs.URL, Token: DefaultToken, HTTP: hs}
}
