package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

// BenchmarkLoadPipeline measures loading and validating the production sample (the daemon
// does it once per file at start, the validate command once per argument).
func BenchmarkLoadPipeline(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(samplePipelines, "production.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	env := testEnv()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadPipelineBytes("production.yaml", data, env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResolve measures filling a run's trigger into the production sample (once per run).
func BenchmarkResolve(b *testing.B) {
	p, err := LoadPipelineFile(filepath.Join(samplePipelines, "production.yaml"), testEnv())
	if err != nil {
		b.Fatal(err)
	}
	t := orchestrator.Trigger{Build: "1234", ImageTag: "v1.2.3", Commit: "0a1b2c3", AppVersion: "1.2.3", Params: map[string]string{"jobs_concurrency": "16"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Resolve(t); err != nil {
			b.Fatal(err)
		}
	}
}
