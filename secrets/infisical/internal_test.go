package infisical

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestDecodeAPIErrorLeniently(t *testing.T) {
	noScrub := func(s string) string { return s }
	for _, tc := range []struct {
		name, body         string
		wantName, wantMsg  string
		wantReqID          string
		wantUnauth, wantNF bool
		status             int
	}{
		{
			name:   "string message",
			status: 403, body: `{"reqId":"r1","statusCode":403,"message":"Your token has expired. Please re-authenticate.","error":"TokenError"}`,
			wantName: "TokenError", wantMsg: "Your token has expired. Please re-authenticate.", wantReqID: "r1", wantUnauth: true,
		},
		{
			name:   "422 with an array of zod issues",
			status: 422, body: `{"reqId":"r2","statusCode":422,"message":[{"code":"invalid_type","message":"Required","path":["clientSecret"]},{"message":"Too short","path":["body",0]},"plain"],"error":"ValidationFailure"}`,
			wantName: "ValidationFailure", wantMsg: "clientSecret: Required; body.0: Too short; plain", wantReqID: "r2",
		},
		{
			name:   "object message",
			status: 404, body: `{"statusCode":404,"message":{"detail":"gone"},"error":"NotFound"}`,
			wantName: "NotFound", wantMsg: `{"detail":"gone"}`, wantNF: true,
		},
		{
			name:   "not JSON (a proxy page)",
			status: 502, body: "<html>Bad Gateway</html>\n",
			wantMsg: "<html>Bad Gateway</html>",
		},
		{
			name:   "403 permission, not a token problem",
			status: 403, body: `{"message":"You are not allowed to read secrets","error":"PermissionDenied"}`,
			wantName: "PermissionDenied", wantMsg: "You are not allowed to read secrets",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := decodeAPIError("GET", "/p", tc.status, []byte(tc.body), noScrub)
			if e.Code != tc.wantName || e.Message != tc.wantMsg || e.ReqID != tc.wantReqID || e.StatusCode != tc.status {
				t.Errorf("got %+v, want name %q message %q reqId %q", e, tc.wantName, tc.wantMsg, tc.wantReqID)
			}
			if got := errors.Is(e, ErrUnauthorized); got != tc.wantUnauth {
				t.Errorf("Is(ErrUnauthorized) = %v, want %v", got, tc.wantUnauth)
			}
			if got := errors.Is(e, ErrNotFound); got != tc.wantNF {
				t.Errorf("Is(ErrNotFound) = %v, want %v", got, tc.wantNF)
			}
			if tc.status == 403 && !tc.wantUnauth && !errors.Is(e, ErrForbidden) {
				t.Errorf("a non-token 403 should match ErrForbidden")
			}
		})
	}
}

func TestAPIErrorScrubsAndTruncates(t *testing.T) {
	c := &Client{clientSecret: "the-client-secret"}
	body := `{"message":"bad secret the-client-secret and token tok-123 ` + strings.Repeat("x", 2000) + `","error":"BadRequest"}`
	e := decodeAPIError("POST", "/login", 400, []byte(body), func(s string) string { return c.scrub(s, "tok-123") })
	if strings.Contains(e.Error(), "the-client-secret") || strings.Contains(e.Error(), "tok-123") {
		t.Errorf("error leaks a credential: %s", e)
	}
	if len(e.Message) > maxMessage+len("…") {
		t.Errorf("message is %d bytes, want at most %d", len(e.Message), maxMessage)
	}
}

// response429 is a 429 as Infisical sends it: the wait only in the message.
func response429(body string, header http.Header) *http.Response {
	if header == nil {
		header = http.Header{}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://x/api/v3/secrets/raw", nil)
	return &http.Response{StatusCode: 429, Header: header, Body: io.NopCloser(strings.NewReader(body)), Request: req}
}

func TestRateLimitWaitComesFromTheMessage(t *testing.T) {
	body := `{"reqId":"r","statusCode":429,"message":"Rate limit exceeded. Please try again in 7 seconds","error":"RateLimitExceeded"}`
	resp := response429(body, nil)
	if got, ok := retryAfterFromMessage(resp); !ok || got != 7*time.Second {
		t.Errorf("wait = %v, %v; want 7s from the message", got, ok)
	}
	// The body is still whole for the error built if retries run out.
	if b, _ := io.ReadAll(resp.Body); string(b) != body {
		t.Errorf("body after peek = %q, want it unchanged", b)
	}
	if got, ok := retryAfterFromMessage(response429(`{"message":"slow down"}`, nil)); ok {
		t.Errorf("no wait in the message: got %v, want none", got)
	}
	resp.StatusCode = http.StatusBadGateway
	if got, ok := retryAfterFromMessage(resp); ok {
		t.Errorf("a 502: got %v, want none (only 429 messages name a wait)", got)
	}
}

func TestRefreshMargin(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		30 * 24 * time.Hour: time.Minute,
		10 * time.Minute:    time.Minute,
		60 * time.Second:    6 * time.Second,
	} {
		if got := refreshMargin(ttl); got != want {
			t.Errorf("refreshMargin(%v) = %v, want %v", ttl, got, want)
		}
	}
}

// A value holding ${...} is a value when the text is not Infisical's reference syntax; a
// reference left in a readable value makes the key unresolved (a hidden one is only hidden).
func TestMergeFlagsUnresolvedReferences(t *testing.T) {
	r := listResponse{Secrets: []rawSecret{
		{SecretKey: "TPL", SecretValue: "a ${prod.X} b ${Y} ${prod.X}"},
		{SecretKey: "SHELL", SecretValue: "${HOME:-/} ${a b} $Y ${}"},
		{SecretKey: "HID", SecretValue: "<hidden-by-infisical>", SecretValueHidden: true},
	}}
	l := r.merge()
	if _, ok := l.Values.Get("TPL"); ok {
		t.Errorf("with expansion: TPL is in Values")
	}
	if got := fmt.Sprint(l.Unresolved); got != "map[TPL:[prod.X Y]]" {
		t.Errorf("Unresolved = %s, want TPL: prod.X Y", got)
	}
	if v, _ := l.Values.Get("SHELL"); v != "${HOME:-/} ${a b} $Y ${}" {
		t.Errorf("SHELL = %q, want it kept", v)
	}
	if len(l.Hidden) != 1 || l.Hidden[0] != "HID" {
		t.Errorf("Hidden = %v", l.Hidden)
	}
}

func TestUnresolvedReferenceErrorBoundsWhatItPrints(t *testing.T) {
	long := strings.Repeat("A", 300)
	e := &UnresolvedReferenceError{Scope: Scope{ProjectID: "p", Environment: "prod"},
		Refs: map[string][]string{"K": {"a", "b", "c", "d", "e", "f", "g", long}, "J": {long}}}
	msg := e.Error()
	if strings.Contains(msg, long) || !strings.Contains(msg, "${"+long[:maxRefNameShow]+"…}") {
		t.Errorf("a long reference name is not cut: %s", msg)
	}
	if !strings.Contains(msg, "${e} 3 more") || strings.Contains(msg, "${f}") {
		t.Errorf("want 5 references of K shown and the rest counted: %s", msg)
	}
	if strings.Index(msg, "J (") > strings.Index(msg, "K (") {
		t.Errorf("keys not sorted: %s", msg)
	}
}

func TestAPIErrorKeepsTextDetails(t *testing.T) {
	scrub := func(s string) string { return strings.ReplaceAll(s, "tok-1", "[redacted]") }
	e := decodeAPIError("GET", "/p", 403, []byte(`{"reqId":"r","statusCode":403,"error":"ForbiddenError",`+
		`"message":"Failed to expand one or more secret references",`+
		`"details":["You do not have permission to read secret 'B' ..., which is referenced by secret 'A' ...","tok-1","3","4","5","sixth"]}`), scrub)
	if len(e.Details) != maxDetails || e.Details[1] != "[redacted]" {
		t.Errorf("Details = %q, want %d scrubbed entries", e.Details, maxDetails)
	}
	if got := e.Error(); !strings.Contains(got, "secret references: You do not have permission to read secret 'B'") ||
		strings.Contains(got, "tok-1") || strings.Contains(got, "sixth") {
		t.Errorf("Error() = %s", got)
	}
	if !errors.Is(e, ErrForbidden) || errors.Is(e, ErrUnauthorized) {
		t.Errorf("a ForbiddenError 403 should match ErrForbidden only")
	}

	// CASL's PermissionDenied details are rule objects: not kept.
	e = decodeAPIError("GET", "/p", 403, []byte(`{"error":"PermissionDenied","message":"You are not allowed to readValue on secrets",`+
		`"details":[{"action":["readValue"],"inverted":false,"subject":"secrets","conditions":{"secretPath":{"$glob":"/x"}}}]}`), scrub)
	if e.Details != nil || strings.Contains(e.Error(), "glob") {
		t.Errorf("object details kept: %+v", e)
	}
}
