package phases

import (
	"context"
	"errors"
	"fmt"
	"math/big"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// A build far ahead of a pipeline's newest (a typo, a build number of another CI, a
// hostile delivery) would, once synced, make every later build of the pipeline older than
// it: each would end stale or superseded until someone deployed a rollback. Submit refuses
// a build more than the pipeline's max_build_ahead ahead of the newest build it knows,
// unless the trigger is a rollback (deliberate, recorded and audited) or an admin allowed
// it (Trigger.AllowBuildAhead).

// newestKnownBuild returns the newest numeric build pipeline p is known to have, and where
// it was seen: p's marks on its services (the newest build it synced or deployed on each)
// and its runs that have not ended (queued ones would supersede a later one, running ones
// will leave their marks). "" when it has none.
func (e *Engine) newestKnownBuild(ctx context.Context, p *config.Pipeline) (build, runID string, err error) {
	consider := func(b, id string) {
		if config.IsBuildNumber(b) && (build == "" || config.CompareBuilds(b, build) > 0) {
			build, runID = b, id
		}
	}
	for _, s := range p.Services {
		m, err := e.d.Marks.PipelineMark(ctx, s.UUID, p.Name)
		switch {
		case errors.Is(err, runs.ErrNotFound):
			continue
		case err != nil:
			return "", "", fmt.Errorf("read the mark of pipeline %s on %s: %w", p.Name, s.UUID, err)
		}
		consider(m.Build, m.RunID)
	}
	f := runs.Filter{Pipeline: p.Name, Status: []runs.Status{runs.StatusQueued, runs.StatusAwaiting, runs.StatusPhase1, runs.StatusPhase2, runs.StatusMobile},
		Limit: runs.MaxLimit, ReadOnly: true}
	for {
		page, err := e.d.Store.List(ctx, f)
		if err != nil {
			return "", "", fmt.Errorf("list the runs of %s: %w", p.Name, err)
		}
		for _, r := range page.Runs {
			consider(r.Trigger.Build, r.ID)
		}
		if f.Cursor = page.Next; f.Cursor == "" {
			return build, runID, nil
		}
	}
}

// checkBuildAhead refuses t (a *orchestrator.FieldError naming build, Refused) when its build
// is more than p.MaxBuildAhead ahead of the newest build p is known to have; nil when the
// pipeline does not order by build, the check is off, t is a rollback or an admin allowed it.
func (e *Engine) checkBuildAhead(ctx context.Context, p *config.Pipeline, t orchestrator.Trigger) error {
	if p.MaxBuildAhead <= 0 || t.Rollback || t.AllowBuildAhead || p.Order.Effective(t.Build) != config.OrderBuild ||
		!config.IsBuildNumber(t.Build) {
		return nil
	}
	newest, runID, err := e.newestKnownBuild(ctx, p)
	if err != nil || newest == "" {
		return err
	}
	ahead := new(big.Int).Sub(decimal(t.Build), decimal(newest))
	if ahead.Cmp(big.NewInt(p.MaxBuildAhead)) <= 0 {
		return nil
	}
	// The trigger's own build is not repeated: the caller sent it.
	return orchestrator.Refusedf("build", "more than %d ahead of build %s of run %s, the newest this pipeline has synced, "+
		"deployed or queued (max_build_ahead): a build that far ahead would leave every later build stale. "+
		"If it is meant, send it as a rollback (rollback: true with a reason), or with the admin token and "+
		"allow_build_ahead: true, or raise the pipeline's max_build_ahead (0 turns the check off)", p.MaxBuildAhead, newest, runID)
}

// decimal is a numeric build (config.IsBuildNumber) as a number.
func decimal(build string) *big.Int {
	n, _ := new(big.Int).SetString(build, 10)
	return n
}
