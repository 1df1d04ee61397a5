// Package hostclient holds what the Git host clients (github, gitlab) share below their
// libraries (go-github, client-go): the transport that sets the User-Agent and the trace
// headers of internal/trace on every attempt and reports it to the metrics, the base URL
// rule, and the text of their API errors. Their retry policy is the caller's (the outbox),
// so they send through this instead of internal/outbound's retrying client.
package hostclient

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/internal/trace"
)

// HTTPClient returns a copy of hc (nil: a client with a 30 s timeout) whose transport sets
// "User-Agent: orchestrator/<version>" and the trace headers, reports every attempt to
// metrics (when set) as system with the route route(path) gives, and follows redirects on
// the request's host only (outbound.SameHostRedirect).
func HTTPClient(hc *http.Client, system, version string, metrics outbound.MetricsFunc, route func(method, path string) string) *http.Client {
	c := &http.Client{Timeout: 30 * time.Second}
	if hc != nil {
		cp := *hc
		c = &cp
	}
	next := c.Transport
	if next == nil {
		next = outbound.DefaultTransport
	}
	c.Transport = &attemptTransport{next: next, system: system, userAgent: UserAgent(version), metrics: metrics, route: route}
	c.CheckRedirect = outbound.SameHostRedirect
	return c
}

// UserAgent is the User-Agent of every request.
func UserAgent(version string) string { return "orchestrator/" + version }

type attemptTransport struct {
	next      http.RoundTripper
	system    string
	userAgent string
	metrics   outbound.MetricsFunc
	route     func(method, path string) string
}

func (t *attemptTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("User-Agent", t.userAgent)
	trace.SetHeaders(r.Context(), r.Header)
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	if t.metrics != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.metrics(t.system, r.Method, t.route(r.Method, r.URL.EscapedPath()), status, time.Since(start))
	}
	return resp, err
}

// BaseURL parses an API base URL: absolute http(s), no user information, query or fragment.
func BaseURL(system, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" {
		// The URL is configuration, not a secret: it has no user information when valid, and
		// an invalid one is not repeated with its user part.
		shown := raw
		if err == nil && u.User != nil {
			u.User = nil
			shown = u.String()
		}
		return nil, fmt.Errorf("%s base url %q: want an absolute http(s) URL without user, query or fragment", system, shown)
	}
	return u, nil
}

// ErrorText is the text of a client's API error: "<system> <method> <path>: <status>
// <message> (<field>: <msgs>, …) (retry after <d>)".
func ErrorText(system, method, path string, status int, message string, fields map[string][]string, retryAfter time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s: %d", system, method, path, status)
	switch {
	case message != "":
		b.WriteString(" " + message)
	case len(fields) == 0:
		b.WriteString(" " + strings.ToLower(http.StatusText(status)))
	}
	if len(fields) > 0 {
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ": " + strings.Join(fields[k], "; ")
		}
		b.WriteString(" (" + strings.Join(parts, ", ") + ")")
	}
	if retryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", retryAfter.Round(time.Second))
	}
	return b.String()
}
