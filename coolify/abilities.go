package coolify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Token abilities, as Coolify names them.
const (
	AbilityRead          = "read"
	AbilityWrite         = "write"
	AbilityDeploy        = "deploy"
	AbilityReadSensitive = "read:sensitive"
)

// AbilitiesTTL is how long [Client.Abilities] keeps a probe's answer.
const AbilitiesTTL = 5 * time.Minute

// Abilities is what the client's token may do, as [Client.Abilities] found out.
type Abilities struct {
	Read, Write, Deploy bool
	// ReadSensitive says whether env values (and other secrets) come back; it needs the
	// read:sensitive (or root) ability and a token owner who is team admin or owner.
	ReadSensitive bool
	// SensitiveUnknown is set when read:sensitive could not be probed (the token cannot read).
	SensitiveUnknown bool
}

// Missing names the abilities the token lacks, in the order read, write, deploy,
// read:sensitive (read:sensitive only when it was probed).
func (a Abilities) Missing() []string {
	var out []string
	for _, x := range []struct {
		ok   bool
		name string
	}{{a.Read, AbilityRead}, {a.Write, AbilityWrite}, {a.Deploy, AbilityDeploy}, {a.ReadSensitive || a.SensitiveUnknown, AbilityReadSensitive}} {
		if !x.ok {
			out = append(out, x.name)
		}
	}
	return out
}

// abilityProbeUUID names no resource: the write probe's path parameter.
const abilityProbeUUID = "orchestrator-ability-probe"

type abilityCache struct {
	mu  sync.Mutex
	at  time.Time
	key ResourceRef
	val Abilities
}

// Abilities finds out which abilities the token has, without changing anything: Coolify has no
// endpoint that lists a token's abilities, so it probes with GET requests only, each guarded by
// one ability, and reads a 403 "Missing required permissions: X" as X missing:
//
//   - read: GET of ref (an application or service the caller will work on);
//   - read:sensitive: the same answer carries docker_compose_raw, a field Coolify shows only to
//     tokens that may read secrets (it hides the field otherwise, and env values with it);
//   - write: GET /servers/{uuid}/validate, a route guarded by write whose GET only answers 405
//     "This endpoint has changed to a POST request." (before v4.2.0 the GET validated the
//     server named; the uuid probed names none, so it answers 404);
//   - deploy: GET /deploy, guarded by deploy, likewise 405 (before v4.2.0: 400, no uuid given).
//
// The answer is kept for [AbilitiesTTL]. Errors: any other failure of a probe (401, a 403 that
// names no ability such as "API is disabled.", 404 for ref, transport errors).
func (c *Client) Abilities(ctx context.Context, ref ResourceRef) (Abilities, error) {
	c.abilities.mu.Lock()
	defer c.abilities.mu.Unlock()
	if !c.abilities.at.IsZero() && c.abilities.key == ref && time.Since(c.abilities.at) < AbilitiesTTL {
		return c.abilities.val, nil
	}
	a, err := c.probeAbilities(ctx, ref)
	if err != nil {
		return Abilities{}, fmt.Errorf("check token abilities: %w", err)
	}
	c.abilities.at, c.abilities.key, c.abilities.val = time.Now(), ref, a
	return a, nil
}

func (c *Client) probeAbilities(ctx context.Context, ref ResourceRef) (Abilities, error) {
	var a Abilities
	col, err := ref.collection()
	if err != nil {
		return a, err
	}
	// missing reports whether err is a 403 for ability; other errors are returned.
	missing := func(err error, ability string) (bool, error) {
		var ae *APIError
		switch {
		case err == nil:
			return false, nil
		case errors.As(err, &ae) && ae.StatusCode == http.StatusForbidden && ae.MissingPermission() != "":
			return true, nil
		case errors.As(err, &ae) && (ae.StatusCode == http.StatusMethodNotAllowed || ae.StatusCode == http.StatusBadRequest ||
			(ae.StatusCode == http.StatusNotFound && ability == AbilityWrite)):
			return false, nil // past the ability check
		}
		return false, err
	}

	var obj map[string]json.RawMessage
	err = c.do(ctx, call{method: http.MethodGet, route: routeOf(ref, ""), path: col}, &obj)
	noRead, err := missing(err, AbilityRead)
	if err != nil {
		return a, err
	}
	a.Read = !noRead
	if a.Read {
		_, a.ReadSensitive = obj["docker_compose_raw"]
	} else {
		a.SensitiveUnknown = true
	}

	err = c.do(ctx, call{method: http.MethodGet, route: "/servers/{uuid}/validate", path: "/servers/" + abilityProbeUUID + "/validate"}, nil)
	noWrite, err := missing(err, AbilityWrite)
	if err != nil {
		return a, err
	}
	a.Write = !noWrite

	err = c.do(ctx, call{method: http.MethodGet, route: "/deploy", path: "/deploy"}, nil)
	noDeploy, err := missing(err, AbilityDeploy)
	if err != nil {
		return a, err
	}
	a.Deploy = !noDeploy
	return a, nil
}
