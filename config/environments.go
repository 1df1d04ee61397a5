package config

import "sort"

// Environment is what pipelines that name it (Pipeline.Environment) share: deploy windows
// and approvals. A pipeline's own windows or approvals block replaces the environment's.
//
//	environments:
//	  production:
//	    windows:   { time_zone: Europe/Berlin, deny: [{ cron: "0 15 * * 5", duration: 66h }] }
//	    approvals: { required: 1 }
type Environment struct {
	Windows   *Windows   `koanf:"windows"`
	Approvals *Approvals `koanf:"approvals"`
}

// environments checks the daemon's environments and fills their defaults.
func (v *validator) environments(envs map[string]Environment) {
	names := make([]string, 0, len(envs))
	for n := range envs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e := envs[n]
		f := "environments." + n
		if !PipelineNamePattern.MatchString(n) {
			v.add(f, "%q is not an environment name (%s)", n, PipelineNamePattern)
		}
		v.windows(f+".windows", e.Windows)
		v.approvals(f+".approvals", e.Approvals)
	}
}

// ApplyEnvironments gives each pipeline that names an environment that environment's
// windows and approvals, where the pipeline has none of its own. Errors: Problems naming the
// pipeline file's environment field when the daemon config has no such environment.
func (d *Daemon) ApplyEnvironments(pipelines map[string]*Pipeline) error {
	var ps Problems
	for _, name := range sortedKeys(pipelines) {
		p := pipelines[name]
		if p.Environment == "" {
			continue
		}
		e, ok := d.Environments[p.Environment]
		if !ok {
			ps = append(ps, Problem{File: p.File, Field: "environment",
				Message: "no environment " + p.Environment + " in the daemon config's environments"})
			continue
		}
		if p.Windows == nil {
			p.Windows = e.Windows
		}
		if p.Approvals == nil {
			p.Approvals = e.Approvals
		}
	}
	return ps.Err()
}
