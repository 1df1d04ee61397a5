package api

import (
	"net/http"

	"github.com/deploy-orchestrator/orchestrator"
)

// headerTraceparent is W3C Trace Context's header: a CI job that sends it on a trigger or
// delivery has the run's trace continue its own.
const headerTraceparent = "traceparent"

// traceparent returns the request's traceparent header when it is one (version 00, IDs not
// zero), else "": a malformed one starts a new trace, as W3C Trace Context says.
func traceparent(r *http.Request) string {
	tp := r.Header.Get(headerTraceparent)
	if !orchestrator.ValidTraceparent(tp) {
		return ""
	}
	return tp
}
