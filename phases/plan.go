package phases

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/locks"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// Plan reads the current state of every service of the pipeline and reports what a run with
// trigger t would change, which locks it would take and who holds them now. Nothing is
// written and no lock is taken. Its calls to Coolify wait for the shared request budget with
// the lowest priority (outbound.Background), so a plan, from the API or the CLI, never takes
// the budget a run's calls are waiting for.
//
// Errors: orchestrator.ErrUnknownPipeline; config.Problems for an invalid trigger (see
// Submit); secret resolution errors (naming keys, never
// values).
func (e *Engine) Plan(ctx context.Context, pipeline string, t orchestrator.Trigger) (*orchestrator.Plan, error) {
	ctx = outbound.Background(ctx)
	p := e.d.Pipelines[pipeline]
	if p == nil {
		return nil, orchestrator.UnknownPipeline(pipeline, e.Pipelines())
	}
	// Resolve validates the trigger too and reports every problem at once.
	resolved, err := p.Resolve(t)
	if err != nil {
		return nil, fmt.Errorf("invalid trigger: %w", err)
	}
	sources, err := e.sourcesFor(resolved)
	if err != nil {
		return nil, err
	}
	// The run as it would be created now: the guard compares its build with the marks.
	run := runs.Run{Pipeline: pipeline, Trigger: t, CreatedAt: time.Now().UTC()}
	x := &execution{e: e, run: run, p: resolved, cl: e.coolifyFor(resolved), resolver: secrets.NewResolver(sources)}
	defer x.resolver.Forget()

	plan := &orchestrator.Plan{Pipeline: pipeline, Parallel: resolved.Phase2.Parallel}
	for _, wave := range resolved.Waves() {
		names := make([]string, len(wave))
		for i, idx := range wave {
			names[i] = resolved.Services[idx].Name
		}
		plan.Waves = append(plan.Waves, names)
	}
	pf := x.preflight(ctx)
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	plan.Problems, plan.Mobile, plan.Checks = pf.problems, pf.mobile, pf.checks
	stale := 0
	for _, s := range resolved.Services {
		var sp orchestrator.ServicePlan
		if pf.secrets != nil && usesSecrets(s) {
			// Reading them again would wait out the same retries to fail the same way.
			sp = orchestrator.ServicePlan{Name: s.Name, UUID: s.UUID, Kind: string(s.Kind),
				Error: "not read: a secret it needs cannot be read (see the problems)"}
		} else if sp, err = x.planService(ctx, s); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			sp.Error = err.Error()
		}
		if sp.Stale, _, err = x.staleOn(ctx, s.UUID); err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
		if sp.Stale != "" {
			stale++
		}
		plan.Services = append(plan.Services, sp)
		plan.Timeouts = append(plan.Timeouts, timeoutsOf(s))
	}
	switch {
	case stale > 0 && stale == len(plan.Services):
		plan.Problems = append(plan.Problems, "a run would end superseded without writing: every service carries a newer build of this pipeline (trigger a rollback to deploy this one anyway)")
	case stale > 0:
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("%d of %d services would be left alone: they carry a newer build of this pipeline", stale, len(plan.Services)))
	}
	if err := e.planLocks(ctx, resolved, plan); err != nil {
		return nil, err
	}
	e.planWindows(resolved, plan)
	plan.WouldFail = len(plan.Problems) > 0
	plan.Requests = requestPlan(resolved, plan.Services)
	return plan, nil
}

// planLocks adds the lock keys a run would take, each free or held as it is now, and a
// problem for a frozen one.
func (e *Engine) planLocks(ctx context.Context, resolved *config.Pipeline, plan *orchestrator.Plan) error {
	for _, key := range resolved.LockKeys() {
		lp := orchestrator.LockPlan{Key: key, Free: true}
		info, err := e.d.Locker.Get(ctx, key)
		switch {
		case err == nil:
			lp.Free, lp.Current = false, &info
			if info.Frozen {
				what := "wait until it is lifted"
				if resolved.Locks.OnFrozen == config.OnFrozenFail {
					what = "fail (on_frozen: fail)"
				}
				plan.Problems = append(plan.Problems, fmt.Sprintf("%s is frozen by %s until %s: %s (a run would %s)",
					key, info.Holder, info.ExpiresAt.UTC().Format(time.RFC3339), info.Message, what))
			}
		case !errors.Is(err, locks.ErrNotFound):
			return fmt.Errorf("plan: look up lock %q: %w", key, err)
		}
		plan.Locks = append(plan.Locks, lp)
	}
	return nil
}

// planWindows adds the deploy windows' verdict now, and a problem when a run would not go
// ahead.
func (e *Engine) planWindows(resolved *config.Pipeline, plan *orchestrator.Plan) {
	if w := resolved.Windows.Gates(); !w.Empty() {
		v := w.Verdict(e.now())
		plan.Window = v.String()
		if !v.Open {
			what := "wait, holding no lock"
			if resolved.Windows.Outside == config.OutsideFail {
				what = "fail (outside: fail)"
			}
			plan.Problems = append(plan.Problems, fmt.Sprintf("%s (a run would %s)", v, what))
		}
	}
}

// usesSecrets reports whether a service's env takes a value from a secrets source.
func usesSecrets(s config.Service) bool {
	return slices.ContainsFunc(s.Env, func(e config.EnvVar) bool { return e.Secret != nil })
}

// timeoutsOf is the windows that decide a run's outcome on service s.
func timeoutsOf(s config.Service) orchestrator.TimeoutPlan {
	tp := orchestrator.TimeoutPlan{Service: s.Name, Deploy: s.DeployTimeout, Cancel: s.CancelTimeout}
	if s.Health.CoolifyStatus != "" {
		tp.Status = s.Health.StatusTimeout
	}
	if h := s.Health.HTTP; h != nil {
		tp.HTTP = h.Timeout
	}
	return tp
}

func (x *execution) planService(ctx context.Context, s config.Service) (orchestrator.ServicePlan, error) {
	sp := orchestrator.ServicePlan{Name: s.Name, UUID: s.UUID, Kind: string(s.Kind)}
	desired, err := x.desiredEnvs(ctx, s)
	if err != nil {
		return sp, err
	}
	current, err := x.cl.ListEnvs(ctx, refOf(s))
	if err != nil {
		return sp, err
	}
	_, _, changes := envDiff(s.Kind, current, desired)
	for _, d := range desired {
		ch := orchestrator.EnvChange{Key: d.key, Action: orchestrator.EnvUnchanged}
		if i := slices.IndexFunc(changes, func(c orchestrator.EnvChange) bool { return c.Key == d.key }); i >= 0 {
			ch = changes[i]
		}
		sp.Env = append(sp.Env, ch)
	}
	if s.Kind != config.KindService && s.ImageTag != "" {
		app, err := x.cl.GetApplication(ctx, s.UUID)
		if err != nil {
			return sp, err
		}
		if app.ImageTag != s.ImageTag {
			sp.ImageTag = &orchestrator.TagChange{Old: app.ImageTag, New: s.ImageTag}
		}
	}
	return sp, nil
}

// The requests a run sends to Coolify, as the engine makes them (TestPlanRequestsMatchARun
// holds the estimate to a run's count in the fake's log).
const (
	// preflightPerRun: the token's abilities, asked once per daemon and token (the read of
	// the first service aside: see preflightRequests).
	preflightPerRun = 2
	// syncPerService: Phase 1's reads of a service before and after its writes, and the
	// guard's look for deployments in progress; each write (env vars, image tag) adds one.
	syncPerService = 5
	// deployPerApp: the checks that the service still carries the sync (2 reads), the
	// guard's look, the deploy and its confirming read.
	deployPerApp = 5
	// deployPerService: the checks and the restart of a Coolify service.
	deployPerService = 3
)

// requestPlan estimates the Coolify requests of a run of p, given the plan of each service.
func requestPlan(p *config.Pipeline, sps []orchestrator.ServicePlan) orchestrator.RequestPlan {
	by := map[coolify.Purpose]int{coolify.PurposePreflight: preflightRequests(p)}
	byName := map[string]orchestrator.ServicePlan{}
	for _, sp := range sps {
		byName[sp.Name] = sp
	}
	for _, wave := range p.Waves() {
		inFlight := max(1, min(p.Phase2.Parallel, len(wave)))
		for _, idx := range wave {
			s := p.Services[idx]
			sp := byName[s.Name]
			if sp.Stale != "" || sp.Error != "" {
				continue
			}
			by[coolify.PurposeSync] += syncPerService + writesOf(sp)
			if s.Kind == config.KindService {
				by[coolify.PurposeDeploy] += deployPerService
			} else {
				by[coolify.PurposeDeploy] += deployPerApp
			}
			by[coolify.PurposePoll] += (coolify.LooksPerDeployment+inFlight-1)/inFlight + 1
			if s.Health.CoolifyStatus != "" {
				by[coolify.PurposeHealth]++
			}
		}
	}
	rp := orchestrator.RequestPlan{ByPurpose: map[string]int{}}
	for p, n := range by {
		rp.ByPurpose[string(p)] = n
		rp.Total += n
	}
	return rp
}

// preflightRequests is what a run's preflight sends to Coolify: the token's abilities with
// the read of the first service, then one list of the applications when listMin or more are
// left to look up (else a read of each), and a read of each Coolify service.
func preflightRequests(p *config.Pipeline) int {
	if len(p.Services) == 0 {
		return preflightPerRun
	}
	rest := p.Services[1:]
	apps := appsAmong(rest)
	n := preflightPerRun + 1 + len(rest) - apps
	if apps >= listMin {
		return n + 1
	}
	return n + apps
}

// writesOf is how many writes Phase 1 would send to a service.
func writesOf(sp orchestrator.ServicePlan) int {
	n := 0
	if sp.ImageTag != nil && sp.ImageTag.Old != sp.ImageTag.New {
		n++
	}
	for _, e := range sp.Env {
		if e.Action != orchestrator.EnvUnchanged {
			return n + 1 // one bulk write
		}
	}
	return n
}
