// Package hmacsig is the one definition of the "sha256=<hex>" body signature: the value of
// X-Signature-256 (and GitHub's X-Hub-Signature-256), the hex HMAC-SHA256 of the body under a
// shared secret. The daemon verifies it on webhook deliveries (api) and writes it on the
// notifications it sends (notify).
package hmacsig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// Errors of Parse and Verify; their text reads after the header's name.
var (
	ErrMissing   = errors.New("is missing")
	ErrMalformed = errors.New("must be sha256=<64 hex digits>")
	ErrMismatch  = errors.New("does not match the body")
)

// Sign returns "sha256=" and the hex HMAC-SHA256 of body under secret.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Parse reads a "sha256=<hex>" value: ErrMissing when it is empty, ErrMalformed when it is
// not of that shape.
func Parse(value string) ([]byte, error) {
	if value == "" {
		return nil, ErrMissing
	}
	hexSig, ok := strings.CutPrefix(value, "sha256=")
	if !ok {
		return nil, ErrMalformed
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return nil, ErrMalformed
	}
	return got, nil
}

// Verify checks value against body under secret in constant time: nil, or an error of Parse,
// or ErrMismatch.
func Verify(value string, secret, body []byte) error {
	got, err := Parse(value)
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrMismatch
	}
	return nil
}
