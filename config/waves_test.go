package config

import (
	"slices"
	"strings"
	"testing"
)

// wavesPipeline is a valid pipeline with five services; svcs replaces its service list.
func wavesPipeline(svcs string) string {
	return `
coolify:
  url: https://coolify.example.com
  token: ${COOLIFY_TOKEN}
phase2: { parallel: 2 }
services:
` + svcs
}

func TestLoadPipelineWaves(t *testing.T) {
	p, err := LoadPipelineBytes("waves.yaml", []byte(wavesPipeline(`
  - { name: db-migrate, uuid: u1 }
  - { name: api, uuid: u2, after: [db-migrate] }
  - { name: worker, uuid: u3, wave: 1 }
  - { name: web, uuid: u4, after: [api, worker] }
  - { name: docs, uuid: u5, wave: 5, after: [db-migrate] }
  - { name: cron, uuid: u6 }
`)), testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if p.Phase2.Parallel != 2 {
		t.Errorf("parallel: got %d, want 2", p.Phase2.Parallel)
	}
	var got []int
	for _, s := range p.Services {
		got = append(got, s.Wave)
	}
	if want := []int{0, 1, 1, 2, 5, 0}; !slices.Equal(got, want) {
		t.Errorf("effective waves: got %v, want %v", got, want)
	}
	if got, want := p.Waves(), [][]int{{0, 5}, {1, 2}, {3}, {4}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Waves(): got %v, want %v", got, want)
	}
}

func TestLoadPipelineWithoutWavesIsOneWaveOneByOne(t *testing.T) {
	p, err := LoadPipelineBytes("p.yaml", []byte(minimal+"  - { name: web, uuid: def456 }\n"), testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if p.Phase2.Parallel != 1 {
		t.Errorf("parallel: got %d, want the default 1", p.Phase2.Parallel)
	}
	if got, want := p.Waves(), [][]int{{0, 1}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Waves(): got %v, want %v", got, want)
	}
}

func TestLoadPipelineWaveProblems(t *testing.T) {
	tests := []struct {
		name, svcs, field, want string
	}{
		{"unknown after", `
  - { name: api, uuid: u1, after: [db] }
`, "services[0].after[0]", `names no service of this pipeline: "db"`},
		{"after itself", `
  - { name: api, uuid: u1, after: [api] }
`, "services[0].after[0]", "after itself"},
		{"cycle", `
  - { name: a, uuid: u1, after: [c] }
  - { name: b, uuid: u2, after: [a] }
  - { name: c, uuid: u3, after: [b] }
`, "services[0].after", `makes a cycle: "a" → "c" → "b" → "a"`},
		{"wave not after its after", `
  - { name: db, uuid: u1, wave: 2 }
  - { name: api, uuid: u2, wave: 1, after: [db] }
`, "services[1].wave", `wave 1 is not after wave 2 of "db"`},
		{"negative wave", `
  - { name: api, uuid: u1, wave: -1 }
`, "services[0].wave", "negative"},
		{"parallel too high", `
  - { name: api, uuid: u1 }
phase2: { parallel: 99 }
`, "phase2.parallel", "not between 1 and 32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			y := wavesPipeline(tc.svcs)
			if strings.Contains(tc.svcs, "phase2:") {
				y = strings.Replace(y, "phase2: { parallel: 2 }\n", "", 1)
			}
			_, err := LoadPipelineBytes("waves.yaml", []byte(y), testEnv())
			ps := mustProblems(t, err)
			wantProblem(t, ps, tc.field, tc.want)
			if !strings.Contains(err.Error(), "waves.yaml: "+tc.field+": ") {
				t.Errorf("error does not name the file and field: %v", err)
			}
		})
	}
}
