package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shadowLine is a line of /etc/shadow: YAML reads it as a key (it ends in a colon).
const shadowLine = "root:$6$saltsalt$Xk9hashhashhashhash:19000:0:99999:7:::"

// Issue 41, item 4: a symbolic link in a directory of config files that leads out of it is
// refused (its target is not read, so nothing of it comes back in a problem); one to a file
// inside the directory (a Kubernetes ConfigMap's ..data links) loads.
func TestSymlinkOutOfTheDirectoryIsRefused(t *testing.T) {
	outside := t.TempDir()
	target := write(t, outside, "shadow", shadowLine+"\ndaemon:*:19000:0:99999:7:::\n")
	dir := t.TempDir()
	if err := os.Symlink(target, filepath.Join(dir, "evil.yaml")); err != nil {
		t.Skipf("symlink: %v", err)
	}
	if err := mkdir(filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "..data"), "prod.yaml", minimal)
	if err := os.Symlink(filepath.Join("..data", "prod.yaml"), filepath.Join(dir, "prod.yaml")); err != nil {
		t.Fatal(err)
	}
	got, err := LoadPipelines(dir, testEnv())
	ps := AsProblems(err)
	wantFileProblem(t, ps, filepath.Join(dir, "evil.yaml"), "symbolic link")
	if got["prod"] == nil {
		t.Errorf("prod.yaml, a link inside the directory, not loaded: %v", err)
	}
	noContent(t, ps.Error())
	probs := Validate(testEnv(), dir)
	wantFileProblem(t, probs, filepath.Join(dir, "evil.yaml"), "symbolic link")
	noContent(t, probs.Error())
	// A file named on its own is the operator's choice and is followed (NixOS keeps /etc
	// as links into its store); it is still no pipeline, and its lines do not come back.
	noContent(t, Validate(testEnv(), filepath.Join(dir, "evil.yaml")).Error())
}

// Issue 41, item 4: a file that is not a config at all (a shadow file copied in, a secret
// pasted on its own) is refused without its lines coming back: unknown keys that are no field
// names are not quoted, nor the values YAML's errors would show.
func TestProblemsNeverEchoFileContent(t *testing.T) {
	dir := t.TempDir()
	shadow := write(t, dir, "shadow.yaml", shadowLine+"\ndaemon:*:19000:0:99999:7:::\n")
	secret := write(t, dir, "secret.yaml", "password123secret\n")
	list := write(t, dir, "list.yaml", "- password123secret\n")
	for _, path := range []string{shadow, secret, list} {
		_, err := LoadPipelineFile(path, testEnv())
		ps := AsProblems(err)
		if len(ps) == 0 {
			t.Errorf("%s: loaded, want problems", path)
		}
		noContent(t, ps.Error())
	}
	// Keys that are field names are still named.
	_, err := LoadPipelineBytes("p.yaml", []byte(minimal+"colour: blue\n"), testEnv())
	wantProblem(t, mustProblems(t, err), "colour", "unknown field")
}

func noContent(t *testing.T, s string) {
	t.Helper()
	for _, bit := range []string{"$6$", "saltsalt", "hashhash", "19000", "99999", "password123", "passwor"} {
		if strings.Contains(s, bit) {
			t.Errorf("problems echo the file's content (%q):\n%s", bit, s)
		}
	}
}

func wantFileProblem(t *testing.T, ps Problems, file, substr string) {
	t.Helper()
	for _, p := range ps {
		if p.File == file && strings.Contains(p.Message, substr) {
			return
		}
	}
	t.Errorf("no problem on %s containing %q; got:\n%s", file, substr, strings.Join(ps.Lines(), "\n"))
}

// canary returns a getenv whose every variable holds a distinct value no problem may show,
// and the list of those values.
func canary(bad string) (func(string) string, *[]string) {
	var seen []string
	return func(k string) string {
		if strings.HasPrefix(k, "ORCH_") {
			return "" // the daemon's own overrides: each test sets those it wants
		}
		v := "canary" + bad + strings.ToLower(strings.ReplaceAll(k, "_", ""))
		seen = append(seen, v)
		return v
	}, &seen
}

// Issue 41, item 4: a value that came from the environment is never quoted in a problem,
// whatever field it lands in and whatever is wrong with it (config/doc.go, "Errors").
func TestProblemsNeverShowEnvironmentValues(t *testing.T) {
	pipeline := `
name: ${NAME}
coolify: { url: "${COOLIFY}", token: t }
secrets:
  vault: { infisical: { url: "${INF_URL}", client_id: "${CID}", client_secret: s, project_id: p, environment: e, path: "${INF_PATH}" } }
services:
  - name: ${SVC_NAME}
    uuid: ${UUID}
    kind: ${KIND}
    image_tag: "${TAG}"
    env:
      - { key: "${ENV_KEY}", value: v }
      - { key: "${ENV_KEY}", value: v }
      - { key: A, secret: { source: "${SOURCE}", key: "${SKEY}" } }
      - { key: B, secret: { source: env, key: "${SKEY2}" } }
    health: { coolify_status: "${STATUS}", http: { url: "${HURL}" } }
    after: ["${AFTER}"]
  - name: ${SVC_NAME}
    uuid: phase1
mobile:
  - name: ${MNAME}
    flagsmith: { url: "${FURL}", api_key: k, environment: e }
    feature: ${FEATURE}
    when: ${WHEN}
    set: { a: b }
on_failure: ${ONF}
concurrency: ${CONC}
order: ${ORDER}
notify:
  targets:
    - { name: "${TNAME}", kind: "${TKIND}", url: "${TURL}", events: ["${TEVENT}"] }
`
	daemon := `
listen: ${LISTEN}
redis_url: ${REDIS}
log: { level: "${LEVEL}", format: "${FORMAT}" }
trusted_proxies: ["${PROXY}"]
allowed_hosts: ["${HOST}"]
public_url: "${PUBLIC}"
webhooks:
  github:
    secret: "${GH_SECRET}"
    rules:
      - { repository: "${REPO}", branch: "[${BRANCH}", sources: ["${SRC}", merge_request_event], pipeline: "${PIPE}" }
  gitlab:
    secret: 0123456789abcdef
    rules:
      - { sources: ["${GLSRC}"], pipeline: ghost-${GHOST} }
`
	// Values of a valid shape reach the checks that compare them (duplicates, names that
	// must exist); values of an invalid shape the checks of their shape.
	for _, bad := range []string{"", "!x y/"} {
		dir := t.TempDir()
		getenv, seen := canary(bad)
		var all Problems
		_, err := LoadPipelineBytes("p.yaml", []byte(pipeline), getenv)
		all = append(all, AsProblems(err)...)
		path := write(t, dir, "d.yaml", daemon+"pipelines_dir: "+dir+"\n")
		_, err = LoadDaemon(path, getenv, nil)
		all = append(all, AsProblems(err)...)
		write(t, dir, "p.yaml", pipeline)
		all = append(all, Validate(getenv, dir)...)
		// A daemon whose only problem is a rule naming a pipeline that is not there.
		ok := write(t, t.TempDir(), "d.yaml", "pipelines_dir: "+t.TempDir()+"\nwebhooks: { gitlab: { secret: 0123456789abcdef, rules: [ { pipeline: \"${PIPE}\" } ] } }\n")
		all = append(all, Validate(getenv, ok)...)
		if len(all) < 20 {
			t.Fatalf("got %d problems, want many:\n%s", len(all), strings.Join(all.Lines(), "\n"))
		}
		text := all.Error()
		reported := map[string]bool{}
		for _, v := range *seen {
			if strings.Contains(text, v) && !reported[v] {
				reported[v] = true
				t.Errorf("a problem shows the value of an environment variable (%s):\n%s", v, grepLines(text, v))
			}
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
