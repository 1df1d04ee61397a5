package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOnlyCmdWiresBackends enforces the layering: the engine, the API and the contracts
// depend on interfaces; only cmd/orchestrator imports the concrete lock and run-store
// backends (docs/architecture.md, "Wiring only in cmd").
func TestOnlyCmdWiresBackends(t *testing.T) {
	const mod = "github.com/deploy-orchestrator/orchestrator/"
	backends := []string{"locks/redislock", "locks/sqlitelock", "runs/redisstore", "runs/sqlitestore"}
	for _, pkg := range []string{"api", "phases", "locks", "runs", "config", "coolify", "mobile", "secrets", "secrets/infisical", "metrics"} {
		out, err := exec.Command("go", "list", "-deps", mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		for _, b := range backends {
			for _, d := range deps {
				if d == mod+b {
					t.Errorf("%s depends on the concrete backend %s; only cmd/orchestrator may wire it", pkg, b)
				}
			}
		}
	}
}

// TestDomainLayering: the domain package at the module root imports nothing of the module,
// so every package can use its words; the API reaches the engine only through the domain's
// contract (orchestrator.Engine), never package phases.
func TestDomainLayering(t *testing.T) {
	const root = "github.com/deploy-orchestrator/orchestrator"
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	for _, d := range deps(root) {
		if d != root && strings.HasPrefix(d, root+"/") {
			t.Errorf("the domain package imports %s; it must import nothing of the module", d)
		}
	}
	for _, d := range deps(root + "/api") {
		if d == root+"/phases" {
			t.Errorf("api depends on phases; it must reach the engine through orchestrator.Engine")
		}
	}
}

// TestOnlyDemoImportsTheSimulators: the simulated servers are in the binary for `demo` only;
// no other file of the command, serve's included, imports them.
func TestOnlyDemoImportsTheSimulators(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if f == "demo.go" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); strings.HasSuffix(p, "test") {
				t.Errorf("%s imports the simulator %s; only demo.go may", f, p)
			}
		}
	}
}
