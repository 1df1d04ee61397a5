package phases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/codes"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
	"github.com/deploy-orchestrator/orchestrator/mobile"
	"github.com/deploy-orchestrator/orchestrator/runs"
	"github.com/deploy-orchestrator/orchestrator/secrets"
)

// preflight checks, with read-only calls and before anything is written, every outside
// system a run of the pipeline touches, and returns every problem it finds (not only the
// first), each a sentence that names the system, the service or step and what is wrong:
//
//   - Coolify: the token's abilities, and that each application and service exists;
//   - the secrets sources: every secret the pipeline's services reference can be read (the
//     values stay in the run's resolver, so Phase 1 reads none of them again);
//   - Flagsmith: for each mobile step, that its environment key and feature exist, that the
//     environment takes writes without change requests, and that the step's changes fit the
//     value there now (its type, its paths, versions that parse); what the step would write
//     is returned, with the never_downgrade verdicts;
//   - Prometheus: each metric check of the analysis, rendered for the run, parses there.
//
// A run stops at the first problem before writing anything (the mobile step reads again
// before it writes, so a value that moved since is still caught there); plan reports them
// all. Its calls go through the run's gate like any other.
func (x *execution) preflight(ctx context.Context) preflightResult {
	ctx = coolify.WithPurpose(ctx, coolify.PurposePreflight)
	var pf preflightResult
	pf.problems = x.preflightCoolify(ctx)
	if pf.secrets = x.preflightSecrets(ctx); pf.secrets != nil {
		pf.problems = append(pf.problems, "secrets: "+pf.secrets.Error())
	}
	for _, m := range x.p.Mobile {
		mp, err := x.previewMobile(ctx, m)
		if err != nil {
			pf.problems = append(pf.problems, fmt.Sprintf("mobile step %s (Flagsmith %s, feature %s): %v", m.Name, m.Flagsmith.URL, m.Feature, err))
			mp.Error = err.Error()
		}
		pf.mobile = append(pf.mobile, mp)
	}
	var problems []string
	pf.checks, problems = x.planChecks(ctx)
	pf.problems = append(pf.problems, problems...)
	return pf
}

// preflightResult is what preflight found.
type preflightResult struct {
	problems []string
	secrets  error // why the secrets could not all be read (nil: they were)
	mobile   []orchestrator.MobilePlan
	checks   []orchestrator.CheckPlan
}

// preflightCoolify checks the token's abilities and reads every service of the pipeline.
// When the token itself is refused or Coolify cannot be reached, that is the one problem.
func (x *execution) preflightCoolify(ctx context.Context) []string {
	if err := checkToken(ctx, x.cl, x.p); err != nil {
		if !errors.Is(err, ErrTokenAbilities) && !errors.Is(err, coolify.ErrNotFound) {
			return []string{fmt.Sprintf("Coolify %s: %v", x.p.Coolify.URL, err)}
		}
		problems := []string{"Coolify: " + err.Error()}
		if errors.Is(err, ErrTokenAbilities) {
			return problems // the services' reads would say nothing more
		}
		return append(problems, x.missingServices(ctx, 1)...)
	}
	return x.missingServices(ctx, 1) // checkToken read the first
}

// missingServices names each service of the pipeline, from index from on, that Coolify does
// not know, or that could not be read. Applications are looked up in one list of the team's
// applications when there are listMin or more (knownApplications); Coolify services, and
// applications when the list could not be read, are read one by one.
func (x *execution) missingServices(ctx context.Context, from int) []string {
	rest := x.p.Services[min(from, len(x.p.Services)):]
	known := x.knownApplications(ctx, rest)
	var problems []string
	for _, s := range rest {
		var err error
		kind := "application"
		switch {
		case s.Kind == config.KindService:
			kind = "service"
			_, err = x.cl.GetService(ctx, s.UUID)
		case known != nil:
			if !known[s.UUID] {
				err = coolify.ErrNotFound
			}
		default:
			_, err = x.cl.GetApplication(ctx, s.UUID)
		}
		switch {
		case errors.Is(err, coolify.ErrNotFound):
			problems = append(problems, fmt.Sprintf("Coolify: service %s: %s %s not found on %s (check its uuid in the pipeline)", s.Name, kind, s.UUID, x.p.Coolify.URL))
		case err != nil:
			problems = append(problems, fmt.Sprintf("Coolify: service %s: read %s %s: %v", s.Name, kind, s.UUID, err))
		}
	}
	return problems
}

// listMin is how many applications a preflight must look up before it lists the team's
// applications (one request) instead of reading each: every run submitted at once checks
// its services at once, before the first of them can write, so a read per application
// spends the budget the first run's Phase 1 is waiting for.
const listMin = 2

// knownApplications returns the uuids of the team's applications when services has listMin
// applications or more and the list could be read, else nil (read each instead).
func (x *execution) knownApplications(ctx context.Context, services []config.Service) map[string]bool {
	if appsAmong(services) < listMin {
		return nil
	}
	apps, err := x.cl.ListApplications(ctx)
	if err != nil {
		x.log.LogAttrs(ctx, slog.LevelDebug, "preflight: listing applications failed; reading each",
			slog.String(logError, err.Error()))
		return nil
	}
	known := make(map[string]bool, len(apps))
	for _, a := range apps {
		known[a.UUID] = true
	}
	return known
}

// appsAmong counts the applications (not Coolify services) among services.
func appsAmong(services []config.Service) int {
	n := 0
	for _, s := range services {
		if s.Kind != config.KindService {
			n++
		}
	}
	return n
}

// preflightSecrets reads every secret the pipeline's services reference, all at once.
func (x *execution) preflightSecrets(ctx context.Context) error {
	var refs []secrets.Ref
	for _, s := range x.p.Services {
		for _, e := range s.Env {
			if e.Secret != nil {
				refs = append(refs, secrets.Ref{Source: e.Secret.Source, Key: e.Secret.Key})
			}
		}
	}
	if len(refs) == 0 {
		return nil
	}
	_, err := x.resolver.Resolve(ctx, refs...)
	return err
}

// previewMobile works out, without writing, what mobile step m would write to Flagsmith.
func (x *execution) previewMobile(ctx context.Context, m config.MobileStep) (orchestrator.MobilePlan, error) {
	mp := orchestrator.MobilePlan{Name: m.Name, Feature: m.Feature, When: string(m.When),
		Fields: slices.Sorted(maps.Keys(m.Set)), LockKey: m.LockKey()}
	client, err := x.e.flagsmithFor(m.Flagsmith)
	if err != nil {
		return mp, err
	}
	res, err := mobile.NewStep(client, mobile.WithStepLogger(x.log)).Preview(ctx, mobileRequest(m, x.run.ID, 0))
	if err != nil {
		return mp, err
	}
	mp.Environment = res.EnvironmentName
	mp.Current, mp.Next, mp.Changes = res.Old.Text(), res.New.Text(), res.Changed
	for _, s := range res.Skipped {
		mp.Kept = append(mp.Kept, fmt.Sprintf("%s stays %s: never_downgrade keeps it over %s", s.Path, s.Current, s.Wanted))
	}
	return mp, nil
}

// mobileRequest is the request of mobile step m: its changes, in path order.
func mobileRequest(m config.MobileStep, runID string, fence int64) mobile.Request {
	paths := slices.Sorted(maps.Keys(m.Set))
	changes := make([]mobile.Change, 0, len(paths))
	for _, p := range paths {
		changes = append(changes, mobile.Change{Path: p, Value: m.Set[p], NeverDowngrade: m.NeverDowngrade})
	}
	return mobile.Request{Environment: m.Flagsmith.Environment, Feature: m.Feature, Changes: changes, RunID: runID, Fence: fence}
}

// preflightRun is the preflight stage of a run: its outcome is a preflight event (ok, or
// every problem), and a run with problems ends failed before it writes anything.
func (x *execution) preflightRun() (runs.Status, string, bool) {
	sctx, span := stage(x.ctx, "preflight", "")
	ctx := coolify.WithTrace(sctx, x.run.ID, 0)
	pf := x.preflight(ctx)
	if ctx.Err() != nil || len(pf.problems) > 0 {
		span.SetStatus(codes.Error, "failed")
	}
	span.End()
	if ctx.Err() != nil {
		status, reason := x.outcome(context.Cause(ctx), "preflight")
		return status, reason, false
	}
	if len(pf.problems) == 0 {
		x.rec.event(runs.Event{Type: runs.EventPreflight, Message: "ok: Coolify, secrets and Flagsmith checked; nothing written yet"})
		return "", "", true
	}
	reason := fmt.Sprintf("preflight: nothing was written: %s", strings.Join(pf.problems, "; "))
	x.rec.event(runs.Event{Type: runs.EventPreflight, Message: reason})
	return runs.StatusFailed, reason, false
}
