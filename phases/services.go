package phases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deploy-orchestrator/orchestrator"
	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/internal/outbound"
	"github.com/deploy-orchestrator/orchestrator/runs"
)

// Services implements orchestrator.Engine: the services view of the loaded pipelines, with
// the deployments Coolify shows in progress on each application now (its reads yield to
// runs' on the request budget).
func (e *Engine) Services(ctx context.Context) ([]orchestrator.Service, error) {
	list, err := ServicesOf(ctx, e.d.Pipelines, e.d.Marks)
	if err != nil {
		return nil, err
	}
	ctx = outbound.Background(ctx)
	for i := range list {
		v := &list[i]
		p, s, ok := e.serviceOf(v.UUID)
		if !ok || s.Kind == config.KindService {
			continue // Coolify services have no deployments to list
		}
		active, err := e.coolifyFor(p).ActiveDeployments(ctx, v.UUID)
		if err != nil {
			v.InProgressUnread = err.Error()
			continue
		}
		v.InProgress = make([]string, 0, len(active))
		for _, d := range active {
			v.InProgress = append(v.InProgress, d.UUID)
		}
	}
	return list, nil
}

// serviceOf finds a loaded pipeline that deploys the resource uuid, and its service there.
func (e *Engine) serviceOf(uuid string) (*config.Pipeline, config.Service, bool) {
	for _, name := range slices.Sorted(maps.Keys(e.d.Pipelines)) {
		p := e.d.Pipelines[name]
		for _, s := range p.Services {
			if s.UUID == uuid {
				return p, s, true
			}
		}
	}
	return nil, config.Service{}, false
}

// ServicesOf is the services view of pipelines, read from ms: every resource the pipelines
// deploy, ordered by name then UUID, with the pipelines that deploy it (and the name each
// gives it), its mark and each pipeline's mark on it. Engine.Services answers it; the CLI
// reads it from a local backend with it.
func ServicesOf(ctx context.Context, pipelines map[string]*config.Pipeline, ms runs.MarkStore) ([]orchestrator.Service, error) {
	byUUID := map[string]*orchestrator.Service{}
	for _, name := range slices.Sorted(maps.Keys(pipelines)) {
		for _, s := range pipelines[name].Services {
			v := byUUID[s.UUID]
			if v == nil {
				v = &orchestrator.Service{UUID: s.UUID}
				byUUID[s.UUID] = v
			}
			if !slices.Contains(v.Names, s.Name) {
				v.Names = append(v.Names, s.Name)
			}
			v.Pipelines = append(v.Pipelines, orchestrator.ServicePipeline{Pipeline: name, Service: s.Name})
		}
	}
	out := make([]orchestrator.Service, 0, len(byUUID))
	for _, v := range byUUID {
		slices.Sort(v.Names)
		m, err := ms.GetMark(ctx, v.UUID)
		switch {
		case errors.Is(err, runs.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("services: %w", err)
		default:
			v.Mark = serviceMark(m)
		}
		own, err := ms.PipelineMarks(ctx, v.UUID)
		if err != nil {
			return nil, fmt.Errorf("services: %w", err)
		}
		for _, m := range own {
			i := slices.IndexFunc(v.Pipelines, func(p orchestrator.ServicePipeline) bool { return p.Pipeline == m.Pipeline })
			if i < 0 {
				// A pipeline no longer loaded (renamed, removed) that deployed it.
				v.Pipelines = append(v.Pipelines, orchestrator.ServicePipeline{Pipeline: m.Pipeline})
				i = len(v.Pipelines) - 1
			}
			v.Pipelines[i].Newest = serviceMark(m)
		}
		r, err := ms.GetRunning(ctx, v.UUID)
		switch {
		case errors.Is(err, runs.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("services: %w", err)
		default:
			v.Running = &orchestrator.ServiceRunning{ImageTag: r.ImageTag, Commit: r.Commit, AppVersion: r.AppVersion,
				Deployment: r.Deployment, RunID: r.RunID, Pipeline: r.Pipeline, Build: r.Build, Since: r.Since,
				Restored: r.Restored, RestoredBy: r.RestoredBy}
		}
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b orchestrator.Service) int {
		return cmp.Or(strings.Compare(a.Names[0], b.Names[0]), strings.Compare(a.UUID, b.UUID))
	})
	return out, nil
}

func serviceMark(m runs.Mark) *orchestrator.ServiceMark {
	return &orchestrator.ServiceMark{RunID: m.RunID, Fence: m.Fence, Phase: string(m.Phase), At: m.At,
		Pipeline: m.Pipeline, Build: m.Build, RunCreated: m.RunCreated, Rollback: m.Rollback}
}
