package config

import (
	"net/url"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

// healthPipeline is minimal with an HTTP health check at url.
func healthPipeline(url string) string {
	return minimal + "    health: { http: { url: \"" + url + "\" } }\n"
}

// Issue 41, item 1: a trigger value can never choose where a health check goes. A reference
// that could reach the scheme, the host or the port is refused when the file is loaded.
func TestHealthURLReferenceInTheHostIsRefused(t *testing.T) {
	for _, u := range []string{
		"http://${trigger.params.host}/healthz",
		"https://${trigger.params.sub}.example.com/healthz",
		"https://api.example.com:${trigger.params.port}/healthz",
		"${trigger.params.scheme}://api.example.com/healthz",
		"https://api.example.com${trigger.params.path}",
		"https://api-${trigger.params.region}.example.com/healthz",
	} {
		_, err := LoadPipelineBytes("p.yaml", []byte(healthPipeline(u)), testEnv())
		if err == nil {
			t.Errorf("%s: loaded, want it refused", u)
			continue
		}
		wantProblem(t, mustProblems(t, err), "services[0].health.http.url", "scheme, host or port")
	}
	for _, u := range []string{
		"https://api.example.com/${trigger.params.region}/healthz",
		"https://api.example.com?region=${trigger.params.region}",
		"https://api.example.com/healthz#${trigger.params.region}",
		"https://${HEALTH_HOST}/healthz/${trigger.build}", // the environment is the operator's
	} {
		if _, err := LoadPipelineBytes("p.yaml", []byte(healthPipeline(u)), testEnv()); err != nil {
			t.Errorf("%s: %v, want it loaded", u, err)
		}
	}
}

// Issue 41, item 1: a value is escaped for the part of the URL it lands in, so it cannot
// leave that part: no new path segment, query parameter or fragment, and the scheme, host
// and port stay the file's.
func TestHealthURLValuesAreEscapedForTheirPart(t *testing.T) {
	tmpl := "http://127.0.0.1:8080/health/${trigger.params.svc}?check=${trigger.params.check}&n=1#${trigger.params.frag}"
	p, err := LoadPipelineBytes("p.yaml", []byte(healthPipeline(tmpl)), testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	params := map[string]string{"svc": "x/../../admin?y=1#z", "check": "a&b=c#d e", "frag": "@127.0.0.1:9/x"}
	r, err := p.Resolve(orchestrator.Trigger{ImageTag: "v1", Params: params})
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	got := r.Services[0].Health.HTTP.URL
	u, err := url.Parse(got)
	if err != nil {
		t.Fatalf("resolved URL %q does not parse: %v", got, err)
	}
	if u.Scheme != "http" || u.Host != "127.0.0.1:8080" {
		t.Errorf("resolved URL %q: scheme and host %s://%s, want http://127.0.0.1:8080", got, u.Scheme, u.Host)
	}
	if want := "/health/x%2F..%2F..%2Fadmin%3Fy=1%23z"; u.EscapedPath() != want {
		t.Errorf("resolved path %q, want %q (one segment)", u.EscapedPath(), want)
	}
	q := u.Query()
	if len(q) != 2 || q.Get("check") != params["check"] || q.Get("n") != "1" {
		t.Errorf("resolved query %q: got %v, want check=%q and n=1 only", u.RawQuery, q, params["check"])
	}
	if u.Fragment != params["frag"] {
		t.Errorf("resolved fragment %q, want %q", u.Fragment, params["frag"])
	}
	if strings.Contains(got, "@") && !strings.Contains(u.EscapedFragment(), "@") {
		t.Errorf("resolved URL %q carries an @ outside its fragment", got)
	}
}

// A pipeline built in code is not loaded, so Resolve checks the same rule itself.
func TestResolveRefusesAHostReferenceOfAPipelineBuiltInCode(t *testing.T) {
	p := &Pipeline{File: "code", Services: []Service{{UUID: "a", Health: Health{HTTP: &HTTPCheck{URL: "http://${trigger.params.host}/healthz"}}}}}
	_, err := p.Resolve(orchestrator.Trigger{Params: map[string]string{"host": "127.0.0.1:9"}})
	wantProblem(t, mustProblems(t, err), "services[0].health.http.url", "scheme, host or port")
}
