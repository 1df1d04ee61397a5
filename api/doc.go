// Package api is the daemon's HTTP front door: the JSON API that triggers, lists, follows
// and cancels runs and shows and overrides locks; the CI webhooks (GitHub, GitLab, generic)
// that turn a successful build into a run; the live dashboard; health, readiness and
// Prometheus metrics.
//
// NewServer builds the whole thing as one http.Handler from its dependencies (Deps): the
// engine, through the narrow Engine interface declared here, the run store, the lock service
// and the daemon config. routes.go is the map of every route with its access rule. Every
// error answer is JSON, {"error":{"code","message","field"}}, produced by one function
// (toHTTP); request bodies are decoded by one helper (decode) and validated in one file
// (validate.go).
//
// Authentication is by bearer token, compared in constant time: the trigger token starts
// and cancels runs, the admin token also force-releases and freezes locks, the read token
// (or no token, when the config makes reads public) reads. A missing token answers 401; a
// wrong one (unknown, or known but its role does not admit the route) answers 403.
//
// Prometheus metrics are package metrics': the server serves that registry at /metrics and
// reports every request and webhook delivery to it.
package api
