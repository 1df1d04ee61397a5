// Package trace carries the run and the lease fence an outside-API request is made for, so
// every call to Coolify or Flagsmith says which run and which lease made it: the clients send
// them as X-Orchestrator-Run and X-Orchestrator-Fence, for a proxy or the server's access log.
package trace

import (
	"context"
	"net/http"
	"strconv"
)

// Header names.
const (
	HeaderRun   = "X-Orchestrator-Run"
	HeaderFence = "X-Orchestrator-Fence"
)

type key struct{}

type value struct {
	runID string
	fence int64
}

// With returns a context whose outside-API requests carry runID and fence (each only when
// set: an empty run ID or a zero fence omits its header).
func With(ctx context.Context, runID string, fence int64) context.Context {
	return context.WithValue(ctx, key{}, value{runID: runID, fence: fence})
}

// From returns the run ID and fence attached by With, and whether there were any.
func From(ctx context.Context) (runID string, fence int64, ok bool) {
	v, ok := ctx.Value(key{}).(value)
	return v.runID, v.fence, ok
}

// SetHeaders puts the run and fence of ctx on h.
func SetHeaders(ctx context.Context, h http.Header) {
	runID, fence, _ := From(ctx)
	if runID != "" {
		h.Set(HeaderRun, runID)
	}
	if fence != 0 {
		h.Set(HeaderFence, strconv.FormatInt(fence, 10))
	}
}
