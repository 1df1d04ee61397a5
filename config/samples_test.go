package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deploy-orchestrator/orchestrator"
)

// The samples live at the top of the repository, shared with the demo and the docs.
const (
	samplePipelines = "../testdata/pipelines"
	sampleConfigs   = "../testdata/config"
)

func TestSamplesValidate(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(samplePipelines, "*.yaml"))
	if err != nil || len(paths) < 3 {
		t.Fatalf("sample pipelines: %v %v", paths, err)
	}
	configs, _ := filepath.Glob(filepath.Join(sampleConfigs, "*.yaml"))
	if len(configs) < 2 {
		t.Fatalf("sample daemon configs: %v", configs)
	}
	paths = append(append(paths, configs...), samplePipelines)
	if ps := Validate(testEnv(), paths...); len(ps) > 0 {
		t.Fatalf("samples do not validate:\n%s", strings.Join(ps.Lines(), "\n"))
	}
}

func TestSampleDaemonConfigs(t *testing.T) {
	d, err := LoadDaemon(filepath.Join(sampleConfigs, "orchestrator.yaml"), testEnv(), nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if d.Backend() != BackendRedis || d.Webhooks.GitHub == nil || d.Webhooks.GitLab == nil {
		t.Errorf("orchestrator.yaml: backend %q, webhooks %+v", d.Backend(), d.Webhooks)
	}
	e, err := LoadDaemon(filepath.Join(sampleConfigs, "orchestrator-embedded.yaml"), testEnv(), nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if e.Backend() != BackendEmbedded || !e.PublicRead {
		t.Errorf("orchestrator-embedded.yaml: backend %q public %v", e.Backend(), e.PublicRead)
	}
	if want := filepath.Join(sampleConfigs, "../pipelines"); e.PipelinesDir != filepath.Clean(want) {
		t.Errorf("pipelines dir %q, want %q", e.PipelinesDir, want)
	}
}

// TestDemoPipelines pins what the demo relies on.
func TestDemoPipelines(t *testing.T) {
	ps, err := LoadPipelines(samplePipelines, testEnv())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	demo, web := ps["demo"], ps["demo-web"]
	if demo == nil || web == nil || ps["production"] == nil {
		t.Fatalf("loaded %v, want demo, demo-web and production", keys(ps))
	}
	if len(demo.Services) != 3 {
		t.Errorf("demo has %d services, want 3", len(demo.Services))
	}
	shared := 0
	for _, s := range web.Services {
		if demo.Service(s.UUID) != nil {
			shared++
		}
	}
	if shared != 2 {
		t.Errorf("demo and demo-web share %d services, want 2", shared)
	}
	var sources []string
	for _, s := range demo.Services {
		for _, e := range s.Env {
			if e.Secret != nil {
				src := e.Secret.Source
				if src != EnvSource && demo.Secrets[src].Infisical != nil {
					src = "infisical"
				}
				sources = append(sources, src)
			}
		}
	}
	if !slices.Contains(sources, EnvSource) || !slices.Contains(sources, "infisical") {
		t.Errorf("demo secret sources %v, want env and infisical", sources)
	}
	if len(demo.Mobile) != 1 || demo.Mobile[0].Feature != "version_state" || demo.Mobile[0].LockKey() != "mobile:flagsmith:version_state" {
		t.Errorf("demo mobile = %+v", demo.Mobile)
	}
	r, err := demo.Resolve(orchestrator.Trigger{Build: "7", ImageTag: "v1.0.7", Commit: "abc123", AppVersion: "1.0.7"})
	if err != nil {
		t.Fatalf("resolve demo: %v", err)
	}
	if r.Services[2].ImageTag != "web-7" {
		t.Errorf("web tag = %q", r.Services[2].ImageTag)
	}
	if _, err := web.Resolve(orchestrator.Trigger{Build: "8", ImageTag: "v1"}); err == nil {
		t.Error("demo-web resolved without its channel param")
	}
}

func TestValidateReportsLines(t *testing.T) {
	dir := t.TempDir()
	bad := write(t, dir, "bad.yaml", minimal+"on_failure: never\n")
	daemon := write(t, dir, "orchestrator.yaml", "listen: :8080\npipelines_dir: pipes\nwebhooks: { generic: { secret: 0123456789abcdef, rules: [ { pipeline: ghost } ] } }\n")
	write(t, t.TempDir(), "x", "")
	if err := mkdir(filepath.Join(dir, "pipes")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "pipes"), "real.yaml", minimal)
	ps := Validate(testEnv(), bad, daemon, filepath.Join(dir, "missing.yaml"))
	lines := ps.Lines()
	want := []string{
		bad + `: on_failure: "never" is not one of: rollback, rollback-failed, halt`,
		daemon + `: webhooks.generic.rules[0].pipeline: no pipeline "ghost" in ` + filepath.Join(dir, "pipes"),
		filepath.Join(dir, "missing.yaml") + ": no such file or directory",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestValidateDirectoryClassifiesEachFile: a directory is validated file by file as the
// files themselves are: the sample daemon configs' directory validates as both files do
// (it used to be read as pipelines, dozens of false problems), and a directory mixing a
// daemon config and pipelines reports what is wrong in each, by kind.
func TestValidateDirectoryClassifiesEachFile(t *testing.T) {
	configs, _ := filepath.Glob(filepath.Join(sampleConfigs, "*.yaml"))
	if ps := Validate(testEnv(), configs...); len(ps) > 0 {
		t.Fatalf("the sample configs do not validate as files:\n%s", strings.Join(ps.Lines(), "\n"))
	}
	if ps := Validate(testEnv(), sampleConfigs); len(ps) > 0 {
		t.Errorf("validate %s: got\n%s\nwant what the files give: nothing", sampleConfigs, strings.Join(ps.Lines(), "\n"))
	}

	dir := t.TempDir()
	daemon := write(t, dir, "orchestrator.yaml", "listen: :8080\npipelines_dir: .\nconnections: { per_client: 0 }\n")
	bad := write(t, dir, "bad.yaml", minimal+"on_failure: never\n")
	write(t, dir, "good.yaml", minimal)
	write(t, dir, "again.yml", minimal+"name: good\n")
	write(t, dir, "notes.txt", "not a config")
	got := Validate(testEnv(), dir).Lines()
	want := []string{
		filepath.Join(dir, "good.yaml") + `: name: pipeline "good" is already defined in ` + filepath.Join(dir, "again.yml"),
		bad + `: on_failure: "never" is not one of: rollback, rollback-failed, halt`,
		daemon + `: connections.per_client: must be between 1 and connections.max (1024)`,
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("validate of a mixed directory: got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLoadPipelinesNamesADaemonConfig: a daemon config left in the pipelines directory is one
// problem saying what it is, not every daemon key as an unknown pipeline field.
func TestLoadPipelinesNamesADaemonConfig(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "good.yaml", minimal)
	daemon := write(t, dir, "orchestrator.yaml", "listen: :8080\ntokens: { admin: 0123456789abcdef }\n")
	ps, err := LoadPipelines(dir, testEnv())
	lines := mustProblems(t, err).Lines()
	if len(lines) != 1 || !strings.HasPrefix(lines[0], daemon+": is a daemon config") || ps["good"] == nil {
		t.Errorf("got %v and problems:\n%s\nwant good loaded and one problem naming %s a daemon config", keys(ps), strings.Join(lines, "\n"), daemon)
	}
}

// TestValidateReportsEachProblemOnce: a daemon config whose pipelines_dir is its own
// directory, validated as that directory, reports each pipeline's problem once, and itself
// as a daemon config where pipelines are loaded from.
func TestValidateReportsEachProblemOnce(t *testing.T) {
	dir := t.TempDir()
	daemon := write(t, dir, "orchestrator.yaml", "listen: :8080\npipelines_dir: .\n")
	bad := write(t, dir, "bad.yaml", minimal+"on_failure: never\n")
	got := Validate(testEnv(), dir, daemon).Lines()
	want := []string{
		bad + `: on_failure: "never" is not one of: rollback, rollback-failed, halt`,
		daemon + `: is a daemon config (its top-level keys are the daemon's), not a pipeline: keep it out of the pipelines directory and give it to serve with --config`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSampleDemoPipelinesAreTheDemos: testdata/pipelines holds copies of the demo's embedded
// pipelines (cmd/orchestrator/demopipelines), not links to them: a link that leads out of a
// pipelines directory is refused. The copies must stay the demo's.
func TestSampleDemoPipelinesAreTheDemos(t *testing.T) {
	for _, name := range []string{"demo.yaml", "demo-web.yaml"} {
		embedded, err := os.ReadFile(filepath.Join("..", "cmd", "orchestrator", "demopipelines", name))
		if err != nil {
			t.Fatal(err)
		}
		sample, err := os.ReadFile(filepath.Join(samplePipelines, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(sample) != string(embedded) {
			t.Errorf("%s/%s differs from cmd/orchestrator/demopipelines/%s: copy it again", samplePipelines, name, name)
		}
	}
}
