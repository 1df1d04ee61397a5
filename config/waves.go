package config

import (
	"fmt"
	"slices"
	"strings"
)

// Phase2Policy says how Phase 2 deploys the services: wave by wave (Service.Wave), and inside
// a wave up to Parallel services at once, each under its own service lock.
//
// Coolify runs at most concurrent_builds deployments per server (2 by default, in the
// server's settings); deployments beyond it wait in Coolify's queue as "queued". A Parallel
// above the server's concurrent_builds therefore gains nothing, and the time a deployment
// waits in that queue counts against its deploy_timeout.
type Phase2Policy struct {
	// Parallel is how many services of one wave deploy at once: 1 (the default) deploys them
	// one by one in file order; at most MaxParallel.
	Parallel int `koanf:"parallel"`
}

// MaxParallel bounds Phase2Policy.Parallel.
const MaxParallel = 32

// Waves groups the indices of p.Services by wave: waves in ascending order (empty waves
// left out), file order inside a wave. A pipeline without waves is one wave in file order.
func (p *Pipeline) Waves() [][]int {
	byWave := map[int][]int{}
	for i, s := range p.Services {
		byWave[s.Wave] = append(byWave[s.Wave], i)
	}
	nums := make([]int, 0, len(byWave))
	for w := range byWave {
		nums = append(nums, w)
	}
	slices.Sort(nums)
	out := make([][]int, len(nums))
	for i, w := range nums {
		out[i] = byWave[w]
	}
	return out
}

// waves checks the services' wave and after fields and sets each service's Wave to its
// effective wave: a service with after deploys one wave after the latest service it names,
// or in the wave it names itself if that is later still. Reported: a negative wave, after
// naming an unknown service or the service itself, a cycle of after, and a wave that is not
// later than a service after names. p.Phase2 is checked too.
func (v *validator) waves(p *Pipeline) {
	if n := p.Phase2.Parallel; n < 1 || n > MaxParallel {
		v.add("phase2.parallel", "%d is not between 1 and %d", n, MaxParallel)
	}
	idx := map[string]int{}
	for i, s := range p.Services {
		if _, dup := idx[s.Name]; !dup {
			idx[s.Name] = i
		}
	}
	if !v.waveFields(p, idx) {
		return
	}

	const (
		unseen = iota
		visiting
		done
	)
	state := make([]int, len(p.Services))
	wave := make([]int, len(p.Services))
	// visit computes the wave of service i; path is the chain of after that led to it. It
	// reports the first cycle or conflict and returns false then.
	var visit func(i int, path []int) bool
	visit = func(i int, path []int) bool {
		switch state[i] {
		case done:
			return true
		case visiting:
			cycle := path[slices.Index(path, i):]
			names := make([]string, 0, len(cycle)+1)
			for _, k := range append(cycle, i) {
				names = append(names, v.show(fmt.Sprintf("services[%d].name", k), p.Services[k].Name))
			}
			v.add(fmt.Sprintf("services[%d].after", i), "makes a cycle: %s", strings.Join(names, " → "))
			return false
		}
		state[i] = visiting
		s := p.Services[i]
		w, from := s.Wave, -1
		for _, name := range s.After {
			k := idx[name]
			if !visit(k, append(path, i)) {
				return false
			}
			if from < 0 || wave[k] > wave[from] {
				from = k
			}
		}
		if from >= 0 {
			switch latest := wave[from]; {
			case s.Wave == 0:
				w = latest + 1
			case s.Wave <= latest:
				field := fmt.Sprintf("services[%d].wave", i)
				v.add(field, "wave %d is not after wave %d of %s, which after names; drop wave or raise it",
					s.Wave, latest, v.show(fmt.Sprintf("services[%d].name", from), p.Services[from].Name))
				return false
			}
		}
		wave[i], state[i] = w, done
		return true
	}
	for i := range p.Services {
		if !visit(i, nil) {
			return
		}
	}
	for i := range p.Services {
		p.Services[i].Wave = wave[i]
	}
}

// waveFields checks each service's wave and the names its after lists (idx: service name →
// index), and reports whether they are fit to compute waves from.
func (v *validator) waveFields(p *Pipeline, idx map[string]int) bool {
	ok := true
	for i, s := range p.Services {
		field := fmt.Sprintf("services[%d]", i)
		if s.Wave < 0 {
			v.add(field+".wave", "%d is negative; waves count from 0", s.Wave)
			ok = false
		}
		for j, name := range s.After {
			f := fmt.Sprintf("%s.after[%d]", field, j)
			switch k, known := idx[name]; {
			case !known:
				v.add(f, "names no service of this pipeline: %s", v.show(f, name))
				ok = false
			case k == i:
				v.add(f, "a service can't deploy after itself")
				ok = false
			}
		}
	}
	return ok
}
