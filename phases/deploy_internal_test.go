package phases

import (
	"testing"

	"github.com/deploy-orchestrator/orchestrator/coolify"
)

// A deployment's link keeps the instance's host: only a path is taken from Coolify's answer.
func TestDeploymentPage(t *testing.T) {
	for _, c := range []struct{ instance, path, want string }{
		{"https://coolify.example.com", "/project/p/environment/e/application/a/deployment/d",
			"https://coolify.example.com/project/p/environment/e/application/a/deployment/d"},
		{"https://coolify.example.com/prefix/", "/project/p/deployment/d?x=1", "https://coolify.example.com/project/p/deployment/d"},
		{"https://coolify.example.com", "", ""},
		{"https://coolify.example.com", "https://elsewhere.example/x", ""},
		{"https://coolify.example.com", "//elsewhere.example/x", ""},
		{"not a url", "/x", ""},
	} {
		if got := deploymentPage(c.instance, &coolify.Deployment{DeploymentURL: c.path}); got != c.want {
			t.Errorf("deploymentPage(%q, %q) = %q, want %q", c.instance, c.path, got, c.want)
		}
	}
	if got := deploymentPage("https://coolify.example.com", nil); got != "" {
		t.Errorf("deploymentPage of no deployment = %q, want none", got)
	}
}
