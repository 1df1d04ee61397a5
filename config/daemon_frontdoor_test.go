package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestLoadDaemonFrontDoorSettings(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "orchestrator.yaml", `
listen: 0.0.0.0:8080
trusted_proxies: [10.0.0.0/8, 192.0.2.7, "2001:db8::/32"]
allowed_hosts: [orchestrator.internal, localhost]
connections: { max: 200, per_client: 10 }
`)
	d, err := LoadDaemon(path, testEnv(), nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if d.Connections != (Connections{Max: 200, PerClient: 10}) {
		t.Errorf("connections: got %+v", d.Connections)
	}
	if got := d.AllowedHostsOr(); !slices.Equal(got, []string{"orchestrator.internal", "localhost"}) {
		t.Errorf("allowed hosts: got %v", got)
	}
	ps, err := ParseTrustedProxies(d.TrustedProxies)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("2001:db8::/32")}
	if !slices.Equal(ps, want) {
		t.Errorf("trusted proxies: got %v, want %v", ps, want)
	}
}

func TestLoadDaemonFrontDoorDefaults(t *testing.T) {
	d, err := LoadDaemon("", testEnv(), nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if d.Connections != (Connections{Max: DefaultMaxConns, PerClient: DefaultMaxConnsPerClient}) {
		t.Errorf("connections: got %+v", d.Connections)
	}
	if d.Coolify.RateLimit != DefaultCoolifyRateLimit {
		t.Errorf("coolify.rate_limit: got %d, want %d", d.Coolify.RateLimit, DefaultCoolifyRateLimit)
	}
	if got := d.AllowedHostsOr(); !slices.Equal(got, []string{"localhost", "127.0.0.1", "::1"}) {
		t.Errorf("allowed hosts for %s: got %v", d.Listen, got)
	}
	for listen, want := range map[string][]string{
		"0.0.0.0:8080":       {"localhost", "127.0.0.1", "::1"},
		"[::]:8080":          {"localhost", "127.0.0.1", "::1"},
		":8080":              {"localhost", "127.0.0.1", "::1"},
		"10.1.2.3:8080":      {"localhost", "127.0.0.1", "::1", "10.1.2.3"},
		"orch.internal:8080": {"localhost", "127.0.0.1", "::1", "orch.internal"},
	} {
		if got := DefaultAllowedHosts(listen); !slices.Equal(got, want) {
			t.Errorf("DefaultAllowedHosts(%q): got %v, want %v", listen, got, want)
		}
	}
}

func TestLoadDaemonFrontDoorProblems(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "orchestrator.yaml", `
trusted_proxies: [10.0.0.0/8, proxy.example.com]
allowed_hosts: ["http://evil.example", "ok.example"]
connections: { max: 10, per_client: 20 }
`)
	_, err := LoadDaemon(path, testEnv(), nil)
	ps := mustProblems(t, err)
	for _, w := range []struct{ field, substr string }{
		{"trusted_proxies[1]", "neither an IP address nor a CIDR"},
		{"allowed_hosts[0]", "without port or scheme"},
		{"connections.per_client", "between 1 and connections.max"},
	} {
		p, ok := findProblem(ps, w.field, w.substr)
		if !ok {
			t.Errorf("no problem on %s containing %q in:\n%v", w.field, w.substr, ps)
			continue
		}
		if p.File != path {
			t.Errorf("%s: file %q, want %q", w.field, p.File, path)
		}
	}
	if len(ps) != 3 {
		t.Errorf("got %d problems, want 3:\n%v", len(ps), ps)
	}
}

// TestDaemonDependentChecksSkipInvalidValues: a value that is already reported invalid is
// reported once: a check that depends on it (per_client's bound on connections.max, the
// length of a token whose ${NAME} is unset) is not made on top.
func TestDaemonDependentChecksSkipInvalidValues(t *testing.T) {
	for _, c := range []struct {
		yaml  string
		field string
		want  string
	}{
		{"connections: { max: lots }\n", "connections.max", "want an integer"},
		{"connections: { max: 0 }\n", "connections.max", "must be at least 1"},
		{"tokens: { admin: \"${ADMIN_TOKEN}\" }\n", "tokens.admin", "environment variable ADMIN_TOKEN is not set"},
	} {
		path := write(t, t.TempDir(), "orchestrator.yaml", c.yaml)
		_, err := LoadDaemon(path, testEnv("ADMIN_TOKEN"), nil)
		ps := mustProblems(t, err)
		if len(ps) != 1 || ps[0].Field != c.field || !strings.Contains(ps[0].Message, c.want) {
			t.Errorf("%s: got\n%s\nwant one problem: %s: %s", strings.TrimSpace(c.yaml), strings.Join(ps.Lines(), "\n"), c.field, c.want)
		}
	}
	// A valid max still bounds per_client.
	path := write(t, t.TempDir(), "orchestrator.yaml", "connections: { max: 8, per_client: 9 }\n")
	_, err := LoadDaemon(path, testEnv(), nil)
	wantProblem(t, mustProblems(t, err), "connections.per_client", "must be between 1 and connections.max (8)")
}

// TestPipelineUnsetVariableIsOneProblem: a pipeline value whose ${NAME} is unset is that one
// problem, not also "not a URL" or "does not match" about the reference's own text.
func TestPipelineUnsetVariableIsOneProblem(t *testing.T) {
	path := write(t, t.TempDir(), "p.yaml", "coolify: { url: \"${COOLIFY_URL}\", token: t }\n"+
		"services:\n  - { name: api, uuid: \"${API_UUID}\" }\n")
	_, err := LoadPipelineFile(path, testEnv("COOLIFY_URL", "API_UUID"))
	ps := mustProblems(t, err)
	if len(ps) != 2 {
		t.Errorf("got\n%s\nwant two problems, each variable not set", strings.Join(ps.Lines(), "\n"))
	}
	wantProblem(t, ps, "coolify.url", "environment variable COOLIFY_URL is not set")
	wantProblem(t, ps, "services[0].uuid", "environment variable API_UUID is not set")
}
