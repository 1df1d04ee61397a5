package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
)

// hangLimit is far above the few milliseconds any input takes, even under -race on a busy
// machine.
const hangLimit = 20 * time.Second

// FuzzLoadPipeline feeds arbitrary bytes to the pipeline loader. It must never panic or hang;
// every rejection is a non-empty Problems naming the file with a message, never showing an
// environment value; the same input always gives the same answer; and a pipeline that loads
// can be resolved.
func FuzzLoadPipeline(f *testing.F) {
	samples, _ := filepath.Glob(filepath.Join(samplePipelines, "*.yaml"))
	for _, path := range samples {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(minimal))
	f.Add([]byte(resolvable))
	f.Add([]byte(""))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("services: [{uuid: x, env: [{key: A, value: '${'}]}]\n"))

	env := testEnv("UNSET")
	trigger := orchestrator.Trigger{Build: "1", ImageTag: "v1", Commit: "abc", AppVersion: "1.0.0", Params: map[string]string{"region": "eu", "tag": "x"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		// A hung load can't fail the test from inside; the watchdog crashes the worker, and
		// the fuzzer saves the input.
		watchdog := time.AfterFunc(hangLimit, func() { panic(fmt.Sprintf("load took over %s on %q", hangLimit, data)) })
		defer watchdog.Stop()
		p, err := LoadPipelineBytes("fuzz.yaml", data, env)
		_, err2 := LoadPipelineBytes("fuzz.yaml", data, env)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("two loads of the same input disagree:\n%v\n---\n%v", err, err2)
		}
		if err != nil {
			ps := AsProblems(err)
			if len(ps) == 0 {
				t.Fatal("error without problems")
			}
			for _, pr := range ps {
				if pr.File != "fuzz.yaml" || strings.TrimSpace(pr.Message) == "" {
					t.Fatalf("unclear problem %#v", pr)
				}
			}
			if !strings.Contains(string(data), sentinel) && strings.Contains(err.Error(), sentinel) {
				t.Fatalf("problem shows an environment value: %v", err)
			}
			return
		}
		r, err := p.Resolve(trigger)
		if err != nil {
			if len(AsProblems(err)) == 0 {
				t.Fatal("resolve error without problems")
			}
			return
		}
		for _, s := range r.Services {
			if s.ImageTag != "" && !orchestrator.ImageTagPattern.MatchString(s.ImageTag) {
				t.Fatalf("resolved an invalid image tag %q", s.ImageTag)
			}
		}
	})
}
