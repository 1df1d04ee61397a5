package githubtest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// installationTokenTTL is how long an installation token lives (GitHub: one hour).
const installationTokenTTL = time.Hour

// exchange answers POST /app/installations/{id}/access_tokens: the JWT must be RS256-signed
// with the App's key, name the App as its issuer and be current (GitHub refuses an exp more
// than ten minutes ahead).
func (f *Fake) exchange(w http.ResponseWriter, r *http.Request, rawID string, now time.Time) string {
	if f.app == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return ""
	}
	scheme, jwt, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "bearer") {
		writeError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return ""
	}
	if msg := f.verifyJWT(jwt, now); msg != "" {
		writeError(w, http.StatusUnauthorized, msg)
		return ""
	}
	if id, err := strconv.ParseInt(rawID, 10, 64); err != nil || id != f.app.installation {
		writeError(w, http.StatusNotFound, "Not Found")
		return "jwt"
	}
	var body struct {
		Permissions map[string]string `json:"permissions"`
	}
	if r.Body != nil {
		_ = json.NewDecoder(r.Body).Decode(&body)
	}
	f.tokenPerms = append(f.tokenPerms, body.Permissions)
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	token := "ghs_" + hex.EncodeToString(buf)
	exp := now.Add(installationTokenTTL)
	f.instTokens[token] = exp
	f.exchanges++
	writeJSON(w, http.StatusCreated, map[string]any{
		"token":                token,
		"expires_at":           exp.UTC().Format(time.RFC3339),
		"permissions":          cmpPerms(body.Permissions),
		"repository_selection": "all",
	})
	return "jwt"
}

// verifyJWT returns "" for a good App JWT, else GitHub's message.
func (f *Fake) verifyJWT(jwt string, now time.Time) string {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return "A JSON web token could not be decoded"
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if decodeSegment(parts[0], &header) != nil || header.Alg != "RS256" {
		return "A JSON web token could not be decoded"
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "A JSON web token could not be decoded"
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(&f.app.key.PublicKey, crypto.SHA256, digest[:], sig) != nil {
		return "A JSON web token could not be decoded"
	}
	var claims struct {
		Iss any   `json:"iss"`
		Iat int64 `json:"iat"`
		Exp int64 `json:"exp"`
	}
	if decodeSegment(parts[1], &claims) != nil {
		return "A JSON web token could not be decoded"
	}
	iss := ""
	switch v := claims.Iss.(type) {
	case string:
		iss = v
	case float64:
		iss = strconv.FormatInt(int64(v), 10)
	}
	switch {
	case iss != strconv.FormatInt(f.app.id, 10):
		return "Integration not found"
	case claims.Exp <= now.Unix():
		return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires"
	case claims.Exp-now.Unix() > 600, claims.Iat > now.Unix()+60:
		return "'Expiration time' claim ('exp') is too far in the future"
	}
	return ""
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// cmpPerms is the permissions a token gets: those asked for, or the App's.
func cmpPerms(asked map[string]string) map[string]string {
	if len(asked) > 0 {
		return asked
	}
	return map[string]string{"deployments": "write", "statuses": "write", "metadata": "read", "contents": "read"}
}

// TokenPermissions returns the permissions each installation token request asked for, in
// order (nil for a request that asked for none: all of the App's).
func (f *Fake) TokenPermissions() []map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tokenPerms)
}
