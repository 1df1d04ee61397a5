package coolify

import "context"

// Purpose says what a request to Coolify is for, so the request budget can be seen spent by
// purpose ([WithPurposeMetrics]).
type Purpose string

// The purposes of requests. A request made under no [WithPurpose] counts as PurposeOther.
const (
	// PurposePreflight: the read-only checks before a run writes anything, and plan's.
	PurposePreflight Purpose = "preflight"
	// PurposeSync: Phase 1, reading and writing env vars and image tags.
	PurposeSync Purpose = "sync"
	// PurposeDeploy: Phase 2's requests other than the waits and health checks: the checks
	// before a deploy, the deploy, its confirming read, cancels.
	PurposeDeploy Purpose = "deploy"
	// PurposePoll: waiting for deployments to end ([Client.WaitDeployment]'s looks and its
	// read of how one ended) and for a restarted service to run again.
	PurposePoll Purpose = "poll"
	// PurposeHealth: a service's Coolify status health check.
	PurposeHealth Purpose = "health"
	// PurposeOther: anything else (restores and rollbacks, takeovers, the services view).
	PurposeOther Purpose = "other"
)

// Purposes lists every purpose, in the order reports show them.
var Purposes = []Purpose{PurposePreflight, PurposeSync, PurposeDeploy, PurposePoll, PurposeHealth, PurposeOther}

type purposeKey struct{}

// WithPurpose returns a context under which the client's requests count as made for p.
func WithPurpose(ctx context.Context, p Purpose) context.Context {
	return context.WithValue(ctx, purposeKey{}, p)
}

// PurposeOf returns the purpose ctx carries ([PurposeOther] when none).
func PurposeOf(ctx context.Context) Purpose {
	if p, ok := ctx.Value(purposeKey{}).(Purpose); ok {
		return p
	}
	return PurposeOther
}

// WithPurposeMetrics registers fn to be told the purpose of every attempt the client sends
// (retries included). It must be safe for concurrent use and must not block.
func WithPurposeMetrics(fn func(Purpose)) Option { return func(c *Client) { c.purposes = fn } }
