package hmacsig_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator/internal/hmacsig"
)

// TestSignVerify: a signature verifies under its secret and body only; malformed and
// missing values are told apart.
func TestSignVerify(t *testing.T) {
	secret, body := []byte("s3cret-0123456789"), []byte(`{"event":"failed"}`)
	sig := hmacsig.Sign(secret, body)
	// Reference value: printf '{"event":"failed"}' | openssl dgst -sha256 -hmac s3cret-0123456789
	if want := "sha256=bd7a658eb9b9d1ccfb33f1a2b22eec1dca7db9f731a3781a202824cf40821a7e"; sig != want {
		t.Fatalf("Sign = %q, want %q", sig, want)
	}
	for _, tc := range []struct {
		name   string
		value  string
		secret []byte
		body   []byte
		want   error
	}{
		{"good", sig, secret, body, nil},
		{"other body", sig, secret, []byte(`{"event":"succeeded"}`), hmacsig.ErrMismatch},
		{"other secret", sig, []byte("another"), body, hmacsig.ErrMismatch},
		{"missing", "", secret, body, hmacsig.ErrMissing},
		{"no prefix", strings.TrimPrefix(sig, "sha256="), secret, body, hmacsig.ErrMalformed},
		{"short", sig[:20], secret, body, hmacsig.ErrMalformed},
		{"not hex", "sha256=" + strings.Repeat("z", 64), secret, body, hmacsig.ErrMalformed},
	} {
		if err := hmacsig.Verify(tc.value, tc.secret, tc.body); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
}
