package phases

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/deploy-orchestrator/orchestrator/config"
	"github.com/deploy-orchestrator/orchestrator/coolify"
)

// ErrTokenAbilities: the pipeline's Coolify token lacks an ability a run needs. The error names
// every one missing.
var ErrTokenAbilities = errors.New("coolify token lacks abilities")

// checkToken finds out, without writing, whether the pipeline's Coolify token has every ability a
// run of p needs: read, write and deploy, and read:sensitive when p syncs env vars (to compare
// values and to put them back on failure). It returns an error wrapping ErrTokenAbilities that
// names each missing ability, or the probe's own error.
func checkToken(ctx context.Context, cl Coolify, p *config.Pipeline) error {
	if len(p.Services) == 0 {
		return nil
	}
	first := p.Services[0]
	a, err := cl.Abilities(ctx, refOf(first))
	var ae *coolify.APIError
	if errors.Is(err, coolify.ErrNotFound) && errors.As(err, &ae) {
		// The probe reads the first service: its 404 is about the pipeline, not the token.
		kind := "application"
		if first.Kind == config.KindService {
			kind = "service"
		}
		return fmt.Errorf("service %s: %s %s not found on %s (check its uuid in the pipeline); nothing was written: %w",
			first.Name, kind, first.UUID, p.Coolify.URL, ae)
	}
	if err != nil {
		return err
	}
	missing := a.Missing()
	if !slices.ContainsFunc(p.Services, func(s config.Service) bool { return len(s.Env) > 0 }) {
		missing = slices.DeleteFunc(missing, func(m string) bool { return m == coolify.AbilityReadSensitive })
	}
	if len(missing) == 0 {
		return nil
	}
	why := make([]string, len(missing))
	for i, m := range missing {
		why[i] = m + " (" + abilityUse[m] + ")"
	}
	return fmt.Errorf("%w: the token of %s has no %s; nothing was written", ErrTokenAbilities, p.Coolify.URL, strings.Join(why, ", "))
}

// abilityUse says what a run needs each ability for.
var abilityUse = map[string]string{
	coolify.AbilityRead:          "to read services, env vars and deployments",
	coolify.AbilityWrite:         "to write env vars and image tags",
	coolify.AbilityDeploy:        "to deploy and cancel deployments",
	coolify.AbilityReadSensitive: "to compare env values and put them back on failure",
}
